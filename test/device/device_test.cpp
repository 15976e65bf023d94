// Device discovery and capabilities on a real device (rxe0 in the Soft-RoCE guest).
#include <coverbs/device.hpp>
#include <coverbs/protection_domain.hpp>

#include <catch2/catch.hpp>

#include <algorithm>

namespace {
bool is_rxe(const coverbs::device& d) { return d.name().rfind("rxe", 0) == 0; }
}  // namespace

TEST_CASE("the device list names at least one device", "[device]") {
  const auto devices = coverbs::list_devices();
  REQUIRE_FALSE(devices.empty());
  WARN("device tests run on " << devices.front().name);  // in the log, as evidence of where they ran
  for (const auto& d : devices) {
    INFO(d.name);
    CHECK_FALSE(d.name.empty());
    CHECK(d.guid != 0);
  }
}

TEST_CASE("a device opens by default and by name; an unknown name is refused with the names that exist", "[device]") {
  coverbs::device first = coverbs::device::open();
  REQUIRE(first);
  coverbs::device again = coverbs::device::open(first.name());
  CHECK(again.name() == first.name());

  coverbs::error_code ec;
  coverbs::device none = coverbs::device::open("no_such_dev", ec);
  CHECK(ec == coverbs::errc::device_not_found);
  CHECK_FALSE(none);
  try {
    (void)coverbs::device::open("no_such_dev");
    FAIL("no exception");
  } catch (const coverbs::system_error& e) {
    CHECK(std::string(e.what()).find(first.name()) != std::string::npos);
  }
}

TEST_CASE("capabilities report memory-window types, limits and the rereg probe", "[device]") {
  coverbs::device dev = coverbs::device::open();
  const coverbs::device_caps& c = dev.caps();
  INFO(dev.name() << ": mw=" << coverbs::mw_types_string(c) << " max_mw=" << c.max_mw << " max_mr=" << c.max_mr
                  << " atomics=" << coverbs::to_string(c.atomics) << " odp=" << c.odp << " rereg=" << c.rereg_mr);
  CHECK(c.phys_port_cnt >= 1);
  CHECK(c.max_mr > 0);
  CHECK(c.max_qp_wr > 0);
  CHECK(c.max_mr_size > 0);
  CHECK(&dev.caps() == &c);  // cached
  if (is_rxe(dev)) {
    // Measured on rxe (kernel 6.1): MW type 1 and 2B, not 2A; max_mw = max_mr; no ODP; rereg refused.
    CHECK(c.mw_type1);
    CHECK(c.mw_type2b);
    CHECK_FALSE(c.mw_type2a);
    CHECK(c.max_mw > 0);
    CHECK(c.max_mw == c.max_mr);
    CHECK_FALSE(c.odp);
    CHECK_FALSE(c.rereg_mr);
    CHECK(c.atomics != coverbs::atomic_support::none);
    CHECK(coverbs::mw_types_string(c) == "type1,type2b");
  }
}

TEST_CASE("port 1 is active and an out-of-range port is refused", "[device]") {
  coverbs::device dev = coverbs::device::open();
  const coverbs::port_attributes p = dev.query_port(1);
  CHECK(p.active());
  CHECK(p.active_mtu_bytes() >= 256);
  CHECK(p.gid_table_len > 0);
  const auto bad = static_cast<std::uint8_t>(dev.caps().phys_port_cnt + 1);
  CHECK_THROWS_WITH(dev.query_port(bad), Catch::Contains("port"));
  try {
    (void)dev.query_port(0);
    FAIL("port 0 accepted");
  } catch (const coverbs::system_error& e) {
    CHECK(e.code() == coverbs::errc::invalid_port);
  }
}

TEST_CASE("the default GID on RoCE is the RoCE v2 IPv4-mapped one", "[device]") {
  coverbs::device dev = coverbs::device::open();
  const auto gids = dev.query_gids(1);
  REQUIRE_FALSE(gids.empty());
  for (const auto& g : gids) {
    INFO("gid[" << g.index << "] " << g.value.to_string() << " " << coverbs::to_string(g.type));
    CHECK_FALSE(g.value.is_zero());
    CHECK(g.port == 1);
  }
  const coverbs::gid_entry def = dev.default_gid(1);
  INFO("default gid[" << def.index << "] " << def.value.to_string());
  if (dev.query_port(1).is_ethernet()) {
    CHECK(def.type == coverbs::gid_type::roce_v2);
    CHECK(def.value.is_ipv4_mapped());
  }
  if (is_rxe(dev) && def.value.to_string() == "::ffff:10.77.0.1") {
    CHECK(def.index == 1);  // the guest's documented layout: index 0 link-local, 1 the RoCE v2 IPv4 GID
  }
}

TEST_CASE("a protection domain allocates, moves and closes", "[device][pd]") {
  coverbs::device dev = coverbs::device::open();
  coverbs::protection_domain pd(dev);
  REQUIRE(pd);
  CHECK(pd.context() == dev.native_handle());
  coverbs::protection_domain moved = std::move(pd);
  CHECK_FALSE(pd);
  CHECK(moved);
  moved.close();
  CHECK_FALSE(moved);
  CHECK_NOTHROW(moved.close());  // idempotent
}
