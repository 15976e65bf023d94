// Synchronous registration on a real device (rxe0 in the Soft-RoCE guest).
#include <coverbs/device.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/protection_domain.hpp>

#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <vector>

namespace cv = coverbs;

namespace {
struct fixture {
  coverbs::device dev = coverbs::device::open();
  coverbs::protection_domain pd{dev};
};
}  // namespace

TEST_CASE_METHOD(fixture, "register and deregister a buffer", "[mr]") {
  std::vector<std::byte> buf(1 << 20);
  coverbs::memory_region mr(pd, buf, cv::access::local_write | cv::access::remote_read | cv::access::remote_write);
  REQUIRE(mr);
  CHECK(mr.data() == buf.data());
  CHECK(mr.size() == buf.size());
  CHECK(mr.lkey() != 0);
  CHECK(mr.rkey() != 0);
  CHECK(mr.pd() == pd.native_handle());
  CHECK(mr.rights() == (cv::access::local_write | cv::access::remote_read | cv::access::remote_write));
  CHECK(mr.contains(buf.data() + 10, 100));
  CHECK(mr.contains(buf.data(), buf.size()));
  CHECK_FALSE(mr.contains(buf.data() + 1, buf.size()));
  CHECK_FALSE(mr.contains(buf.data() - 1, 1));
  mr.deregister();
  CHECK_FALSE(mr);
  CHECK_NOTHROW(mr.deregister());  // idempotent
}

TEST_CASE_METHOD(fixture, "remote_write without local_write fails with EINVAL and says why", "[mr]") {
  std::vector<std::byte> buf(4096);
  coverbs::error_code ec;
  coverbs::memory_region mr(pd, buf, cv::access::remote_write, ec);
  CHECK(ec == boost::system::errc::invalid_argument);
  CHECK(ec.category() == boost::system::system_category());
  CHECK_FALSE(mr);
  try {
    coverbs::memory_region thrown(pd, buf, cv::access::remote_write | cv::access::remote_read);
    FAIL("registration succeeded");
  } catch (const coverbs::system_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.code() == boost::system::errc::invalid_argument);
    CHECK(what.find("ibv_reg_mr") != std::string::npos);
    CHECK(what.find("access=remote_write|remote_read") != std::string::npos);
    CHECK(what.find("need local_write") != std::string::npos);
  }
  // remote_atomic has the same rule
  coverbs::memory_region atomic(pd, buf, cv::access::remote_atomic, ec);
  CHECK(ec == boost::system::errc::invalid_argument);
}

TEST_CASE_METHOD(fixture, "registering memory that is not mapped fails with EFAULT", "[mr]") {
  void* p = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  REQUIRE(::munmap(p, 8192) == 0);
  coverbs::error_code ec;
  coverbs::memory_region mr(pd, {static_cast<std::byte*>(p), 8192}, cv::access::local_write, ec);
  CHECK(ec == boost::system::errc::bad_address);
  CHECK_FALSE(mr);
}

TEST_CASE_METHOD(fixture, "a region moves and deregisters once, on destruction", "[mr]") {
  std::vector<std::byte> buf(8192);
  coverbs::memory_region a(pd, buf, cv::access::local_write);
  const std::uint32_t lkey = a.lkey();
  coverbs::memory_region b = std::move(a);
  CHECK_FALSE(a);
  CHECK(b.lkey() == lkey);
  {
    coverbs::memory_region c(pd, buf, cv::access::local_write);
    b = std::move(c);  // deregisters b's old region
  }
  CHECK(b);
  CHECK(b.lkey() != lkey);
}

TEST_CASE_METHOD(fixture, "a protection domain with a live region refuses to close until it is gone", "[mr][pd]") {
  std::vector<std::byte> buf(4096);
  auto mr = std::make_unique<coverbs::memory_region>(pd, buf, cv::access::local_write);
  coverbs::error_code ec;
  pd.close(ec);
  CHECK(ec == boost::system::errc::device_or_resource_busy);
  CHECK(pd);
  mr.reset();
  pd.close(ec);
  CHECK_FALSE(ec);
  CHECK_FALSE(pd);
}

TEST_CASE_METHOD(fixture, "many regions over one buffer get distinct keys", "[mr]") {
  std::vector<std::byte> buf(1 << 16);
  std::vector<coverbs::memory_region> regions;
  for (int i = 0; i < 64; ++i)
    regions.emplace_back(pd, buf, cv::access::local_write | cv::access::remote_read);
  std::vector<std::uint32_t> keys;
  for (auto& r : regions)
    keys.push_back(r.lkey());
  std::sort(keys.begin(), keys.end());
  CHECK(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
}
