#pragma once
// For unit tests of what a program sees on a host without RDMA.
#include <coverbs/error.hpp>

#include <catch2/catch.hpp>

#include <string>

#include <sys/stat.h>

namespace test {

/// True (with a warning in the test's output) when this kernel has RDMA support, where the no-device
/// paths cannot be exercised: the calling test returns. CI and the development hosts have none.
inline bool skip_on_rdma_host() {
  struct stat st {};
  if (::stat("/sys/class/infiniband_verbs", &st) != 0) return false;
  WARN("this host has RDMA support; the no-device path is covered where the kernel has none");
  return true;
}

/// What every "no RDMA here" exception must say: errc::no_device, and where verbs do work.
inline void check_points_to_guest(const coverbs::system_error& e) {
  const std::string what = e.what();
  INFO(what);
  CHECK(e.code() == coverbs::errc::no_device);
  CHECK(what.find("tools/rxe-vm") != std::string::npos);
}

}  // namespace test
