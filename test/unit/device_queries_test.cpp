// Device behaviour that needs no device: what a program sees on a host without RDMA.
#include <coverbs/device.hpp>

#include <catch2/catch.hpp>

#include "fixtures/no_rdma.hpp"

TEST_CASE("without an RDMA device, asking for one gives errc::no_device with a helpful message", "[device]") {
  if (test::skip_on_rdma_host()) return;
  coverbs::error_code ec;
  CHECK(coverbs::list_devices(ec).empty());
  CHECK(ec == coverbs::errc::no_device);

  coverbs::device dev = coverbs::device::open("", ec);
  CHECK(ec == coverbs::errc::no_device);
  CHECK_FALSE(dev);

  try {
    (void)coverbs::device::open();
    FAIL("device::open() did not throw");
  } catch (const coverbs::system_error& e) {
    test::check_points_to_guest(e);
    CHECK(std::string(e.what()).find("kernel has no RDMA support") != std::string::npos);
  }
  CHECK_THROWS_AS(coverbs::list_devices(), coverbs::system_error);
}

TEST_CASE("gid text and IPv4-mapped detection", "[device]") {
  coverbs::gid g;
  CHECK(g.is_zero());
  g.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1};
  CHECK(g.is_ipv4_mapped());
  CHECK_FALSE(g.is_zero());
  CHECK(g.to_string() == "::ffff:10.77.0.1");
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  CHECK_FALSE(g.is_ipv4_mapped());
  CHECK(g.to_verbs().raw[0] == 0xfe);
}

TEST_CASE("a closed or empty device refuses queries instead of crashing", "[device]") {
  coverbs::device dev;
  CHECK_FALSE(dev);
  CHECK(dev.name().empty());
  CHECK_THROWS_AS(dev.caps(), coverbs::system_error);
  CHECK_THROWS_AS(dev.query_port(1), coverbs::system_error);
}

TEST_CASE("capability helpers name what a device has", "[device]") {
  coverbs::device_caps c;
  CHECK(coverbs::mw_types_string(c) == "none");
  c.mw_type1 = true;
  c.mw_type2b = true;
  CHECK(coverbs::mw_types_string(c) == "type1,type2b");
  CHECK(c.mw_type2());
  CHECK(std::string(coverbs::to_string(coverbs::atomic_support::hca)) == "hca");
  CHECK(std::string(coverbs::to_string(coverbs::gid_type::roce_v2)) == "roce_v2");
}
