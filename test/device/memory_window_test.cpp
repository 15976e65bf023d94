// Memory windows on a real device (rxe0 in the Soft-RoCE guest): binds, remote access through the window,
// local and remote invalidation, validation before posting, rebinds, pools, leases and revocation.
//
// Windows are bound through queue pair `a`; the peer's accesses come through `b`, connected to `a` (a type-2
// key works only through the queue pair that bound it). A refused remote access moves both queue pairs to
// the error state, so each such check ends its test case (or section).
#include <coverbs/memory_window.hpp>
#include <coverbs/registration_service.hpp>
#include <coverbs/window_pool.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <tuple>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using asio::use_awaitable;

using test::rc_pair;
using test::test_buffer;

namespace {

constexpr auto region_rights = cv::access::local_write | cv::access::remote_read | cv::access::remote_write |
                               cv::access::remote_atomic | cv::access::mw_bind;
constexpr auto tuple = asio::as_tuple(use_awaitable);

/// Writes `n` bytes of `from` through `key` from the peer (queue pair b); returns the error.
awaitable<cv::error_code> peer_write(rc_pair& p, test_buffer& from, cv::remote_key key, std::size_t n = 64) {
  auto [ec, bytes] = co_await p.b.async_write(from.span(0, n), key.slice(0, n), tuple);
  co_return ec;
}

awaitable<cv::error_code> peer_read(rc_pair& p, test_buffer& into, cv::remote_key key, std::size_t n = 64) {
  auto [ec, bytes] = co_await p.b.async_read(into.span(0, n), key.slice(0, n), tuple);
  co_return ec;
}

/// The queue pair a still carries traffic: a send from a reaches b.
awaitable<bool> a_still_works(rc_pair& p, test_buffer& scratch) {
  p.b.async_recv(scratch.span(0, 16), [](cv::error_code, cv::received) {});
  auto [ec, n] = co_await p.a.async_send(scratch.span(16, 16), tuple);
  co_return !ec && n == 16;
}

}  // namespace

TEST_CASE("a bound window carries remote writes and reads of its range, for type 1 and type 2", "[mw][bind]") {
  const auto type = GENERATE(cv::window_type::type1, cv::window_type::type2);
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::memory_window w(p.pd, type);
  CHECK(w.state() == cv::window_state::unbound);
  p.run([&]() -> awaitable<void> {
    const cv::remote_key key =
        co_await cv::bind_mw(p.a, w, region.mr, {4096, 8192}, cv::access::remote_read | cv::access::remote_write);
    CHECK(key.addr == reinterpret_cast<std::uint64_t>(region.bytes.data() + 4096));
    CHECK(key.length == 8192);
    CHECK(key.rkey == w.rkey());
    CHECK(key.rkey != region.mr.rkey());
    CHECK(w.bound());
    CHECK(w.key() == key);

    peer.fill('w');
    const auto wrote = co_await peer_write(p, peer, key.slice(100, 64));
    CHECK_FALSE(wrote);
    CHECK(region.str(4096 + 100, 64) == std::string(64, 'w'));

    std::memset(region.bytes.data() + 4096 + 1000, 'r', 64);
    const auto read = co_await peer_read(p, peer, key.slice(1000, 64));
    CHECK_FALSE(read);
    CHECK(peer.str(0, 64) == std::string(64, 'r'));
  });
}

TEST_CASE("after a local invalidation the same remote access fails with rem_access_err", "[mw][invalidate]") {
  const auto type = GENERATE(cv::window_type::type1, cv::window_type::type2);
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::memory_window w(p.pd, type);
  const auto before = cv::window_statistics();
  p.run([&]() -> awaitable<void> {
    const auto key = co_await cv::bind_mw(p.a, w, region.mr, {}, cv::access::remote_write);
    const auto first = co_await peer_write(p, peer, key);
    CHECK_FALSE(first);
    co_await cv::invalidate(p.a, w);
    CHECK(w.state() == cv::window_state::unbound);
    CHECK(w.key() == cv::remote_key{});
    const auto after = co_await peer_write(p, peer, key);
    CHECK(after == cv::wc_errc::rem_access_err);
  });
  const auto now = cv::window_statistics();
  CHECK(now.binds == before.binds + 1);
  CHECK(now.invalidations == before.invalidations + 1);
  CHECK(now.windows_bound == before.windows_bound);
}

TEST_CASE("invalidating by rkey finds the window, and an unknown rkey is refused without posting", "[mw][invalidate]") {
  rc_pair p;
  test_buffer region(p.pd, 4096, region_rights), scratch(p.pd, 4096);
  cv::memory_window w(p.pd, cv::window_type::type2);
  p.run([&]() -> awaitable<void> {
    const auto key = co_await cv::bind_mw(p.a, w, region.mr, {}, cv::access::remote_read);
    auto [unknown] = co_await cv::invalidate(p.a, key.rkey + 0x100, tuple);
    CHECK(unknown == cv::errc::rkey_not_a_window);
    auto [ec] = co_await cv::invalidate(p.a, key.rkey, tuple);
    CHECK_FALSE(ec);
    CHECK_FALSE(w.bound());
    auto [again] = co_await cv::invalidate(p.a, w, tuple);  // nothing left to do: success at once
    CHECK_FALSE(again);
    const bool works = co_await a_still_works(p, scratch);
    CHECK(works);
  });
}

TEST_CASE("after the peer's send-with-invalidate the key is dead and the window knows it", "[mw][invalidate]") {
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096), inbox(p.pd, 4096);
  cv::memory_window w(p.pd, cv::window_type::type2);
  const auto before = cv::window_statistics();
  p.run([&]() -> awaitable<void> {
    const auto key = co_await cv::bind_mw(p.a, w, region.mr, {}, cv::access::remote_write);
    bool window_was_unbound_in_handler = false;
    test::completion<cv::received> got;
    p.a.async_recv(inbox.span(0, 64), [&](cv::error_code ec, cv::received r) {
      window_was_unbound_in_handler = !w.bound();
      got.handler()(ec, r);
    });
    const auto sent = co_await p.b.async_send_with_invalidate(peer.span(0, 8), key.rkey, tuple);
    CHECK_FALSE(std::get<0>(sent));
    while (!got.done())
      co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
    CHECK_FALSE(*got.ec);
    REQUIRE(got.value.invalidated_rkey);
    CHECK(*got.value.invalidated_rkey == key.rkey);
    CHECK(window_was_unbound_in_handler);
    auto [nothing] = co_await cv::invalidate(p.a, w, tuple);  // already dead: nothing is posted
    CHECK_FALSE(nothing);
    const auto after = co_await peer_write(p, peer, key);
    CHECK(after == cv::wc_errc::rem_access_err);
  });
  CHECK(cv::window_statistics().remote_invalidations == before.remote_invalidations + 1);
}

TEST_CASE("a send-with-invalidate naming a window bound through another queue pair is refused as foreign",
          "[mw][invalidate][foreign]") {
  // Two tenants on one device: pair (a, b), and pair (victim, victim_peer) whose window is bound through
  // `victim`. b, the peer of another queue pair, names that window's key (IBA: a type-2 window may be
  // invalidated only through the queue pair it is bound to; rxe does not check).
  rc_pair p;
  cv::queue_pair victim(p.pd, p.cq), victim_peer(p.pd, p.cq);
  cv::connect_pair(victim, victim_peer);
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096), inbox(p.pd, 4096), scratch(p.pd, 4096);
  cv::memory_window w(p.pd, cv::window_type::type2);
  const auto before = cv::window_statistics();
  p.run([&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const auto key = co_await cv::bind_mw(victim, w, region.mr, {}, cv::access::remote_write);
    test::completion<cv::received> foreign;
    bool window_was_unbound_in_handler = false;
    p.a.async_recv(inbox.span(0, 64), [&](cv::error_code ec, cv::received r) {
      window_was_unbound_in_handler = !w.bound();
      foreign.handler()(ec, r);
    });
    auto [sent, n] = co_await p.b.async_send_with_invalidate(peer.span(0, 8), key.rkey, tuple);
    CHECK_FALSE(sent);  // rxe carried out the invalidation
    while (!foreign.done())
      co_await asio::post(ex, use_awaitable);
    CHECK(*foreign.ec == cv::errc::foreign_remote_invalidation);
    CHECK(window_was_unbound_in_handler);  // rxe killed the victim's key, and the runtime says so
    CHECK_FALSE(p.a.error());              // the refused request leaves the receiving queue pair healthy
    const bool works = co_await a_still_works(p, scratch);
    CHECK(works);

    // The legitimate form, through the queue pair the window is bound through, is accepted.
    const auto fresh = co_await cv::bind_mw(victim, w, region.mr, {}, cv::access::remote_write);
    test::completion<cv::received> legit;
    victim.async_recv(inbox.span(64, 64), legit.handler());
    auto [sent2, n2] = co_await victim_peer.async_send_with_invalidate(peer.span(0, 8), fresh.rkey, tuple);
    CHECK_FALSE(sent2);
    while (!legit.done())
      co_await asio::post(ex, use_awaitable);
    CHECK_FALSE(*legit.ec);
    REQUIRE(legit.value.invalidated_rkey);
    CHECK(*legit.value.invalidated_rkey == fresh.rkey);
    CHECK_FALSE(w.bound());

    // What the victim sees on rxe: its first key is dead, so its next write through it fails.
    auto [old, m] = co_await victim_peer.async_write(peer.span(0, 64), key.slice(0, 64), tuple);
    CHECK(old == cv::wc_errc::rem_access_err);
  });
  const auto now = cv::window_statistics();
  CHECK(now.foreign_invalidations == before.foreign_invalidations + 1);
  CHECK(now.remote_invalidations == before.remote_invalidations + 1);
}

TEST_CASE("through a shared receive queue, the queue pair a send-with-invalidate arrived on must own the window",
          "[mw][invalidate][foreign][srq]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue cq(loop.io, dev);
  test_buffer region(pd, 1 << 16, region_rights), peer(pd, 4096), inbox(pd, 4096);
  cv::memory_window w(pd, cv::window_type::type2);
  cv::shared_receive_queue srq(pd, cq, {.max_wr = 8, .max_sge = 1, .limit = 0});
  cv::queue_pair_options attached;
  attached.srq = &srq;
  // Both server-side queue pairs take their receives from the SRQ; the window is bound through `tenant`.
  cv::queue_pair tenant(pd, cq, attached), intruded(pd, cq, attached), tenant_peer(pd, cq), intruder(pd, cq);
  cv::connect_pair(tenant, tenant_peer);
  cv::connect_pair(intruded, intruder);
  const auto before = cv::window_statistics();
  loop.run([&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const auto key = co_await cv::bind_mw(tenant, w, region.mr, {}, cv::access::remote_write);
    test::completion<cv::srq_received> foreign, legit;
    srq.async_recv(inbox.span(0, 64), foreign.handler());
    auto [sent, n] = co_await intruder.async_send_with_invalidate(peer.span(0, 8), key.rkey, tuple);
    CHECK_FALSE(sent);
    while (!foreign.done())
      co_await asio::post(ex, use_awaitable);
    CHECK(*foreign.ec == cv::errc::foreign_remote_invalidation);
    CHECK(foreign.value.qp_num == intruded.qp_num());  // names the queue pair whose peer to drop
    CHECK_FALSE(w.bound());
    CHECK_FALSE(intruded.error());

    const auto fresh = co_await cv::bind_mw(tenant, w, region.mr, {}, cv::access::remote_write);
    srq.async_recv(inbox.span(64, 64), legit.handler());
    auto [sent2, n2] = co_await tenant_peer.async_send_with_invalidate(peer.span(0, 8), fresh.rkey, tuple);
    CHECK_FALSE(sent2);
    while (!legit.done())
      co_await asio::post(ex, use_awaitable);
    CHECK_FALSE(*legit.ec);
    CHECK(legit.value.qp_num == tenant.qp_num());
    REQUIRE(legit.value.invalidated_rkey);
    CHECK(*legit.value.invalidated_rkey == fresh.rkey);
    CHECK_FALSE(w.bound());
  });
  const auto now = cv::window_statistics();
  CHECK(now.foreign_invalidations == before.foreign_invalidations + 1);
  CHECK(now.remote_invalidations == before.remote_invalidations + 1);
}

TEST_CASE("a send-with-invalidate naming a window of another context of the device is refused as foreign",
          "[mw][invalidate][foreign]") {
  // Two device::open() of rxe0 in one process (two services on a host): the victim's window lives in context
  // 2; a peer of a queue pair of context 1 names its key. rxe checks neither queue pair nor protection domain.
  test::event_loop loop;
  cv::device dev1 = cv::device::open(), dev2 = cv::device::open();
  cv::protection_domain pd1(dev1), pd2(dev2);
  cv::completion_queue cq1(loop.io, dev1), cq2(loop.io, dev2);
  cv::queue_pair server(pd1, cq1), attacker(pd1, cq1), victim(pd2, cq2), victim_peer(pd2, cq2);
  cv::connect_pair(server, attacker);
  cv::connect_pair(victim, victim_peer);
  test_buffer region(pd2, 1 << 16, region_rights), inbox(pd1, 4096), apeer(pd1, 4096);
  cv::memory_window w(pd2, cv::window_type::type2);
  const auto before = cv::window_statistics();
  loop.run([&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const auto key = co_await cv::bind_mw(victim, w, region.mr, {}, cv::access::remote_write);
    test::completion<cv::received> got;
    server.async_recv(inbox.span(0, 64), got.handler());
    co_await attacker.async_send_with_invalidate(apeer.span(0, 8), key.rkey, tuple);
    while (!got.done())
      co_await asio::post(ex, use_awaitable);
    CHECK(*got.ec == cv::errc::foreign_remote_invalidation);
    CHECK_FALSE(server.error());  // the refused request leaves the receiving queue pair healthy
    while (w.bound())             // settled on the victim's executor (here the same loop)
      co_await asio::post(ex, use_awaitable);
    CHECK_FALSE(w.bound());  // rxe killed the victim's key, and the runtime says so
  });
  CHECK(cv::window_statistics().foreign_invalidations == before.foreign_invalidations + 1);
}

TEST_CASE("a reset queue pair's new peer cannot invalidate a window bound through its old connection",
          "[mw][invalidate][foreign][reset]") {
  // A window leased through a while it was connected to b; a is reset and connected to c (another tenant),
  // which names the old window's key.
  rc_pair p;
  cv::queue_pair c(p.pd, p.cq);
  test_buffer region(p.pd, 1 << 16, region_rights), inbox(p.pd, 4096), cbuf(p.pd, 4096);
  cv::window_pool pool(p.pd, {.initial_windows = 1});
  std::optional<cv::window_lease> lease;
  test::completion<int> held;
  cv::remote_key key{};
  p.run([&]() -> awaitable<void> {
    lease.emplace(co_await pool.async_lease(p.a, region.mr, {}, cv::access::remote_write));
    key = lease->key();
    lease->async_hold([&](cv::error_code ec) { held.handler()(ec, 0); });
  });
  p.a.reset();
  REQUIRE(p.run_until([&] { return held.done(); }, std::chrono::seconds(5)));  // the reset ended the lease
  CHECK_FALSE(lease->active());
  CHECK(pool.free() == 1);
  cv::connect_pair(p.a, c);
  const auto before = cv::window_statistics();
  p.run([&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    test::completion<cv::received> got;
    p.a.async_recv(inbox.span(0, 64), got.handler());
    co_await c.async_send_with_invalidate(cbuf.span(0, 8), key.rkey, tuple);
    while (!got.done())
      co_await asio::post(ex, use_awaitable);
    // The reset killed the old key, so the device itself refuses the invalidation (rxe: the receive fails
    // with rem_inv_req_err); before, it was accepted as the legitimate peer's.
    INFO("a's receive: " << got.ec->message());
    CHECK(*got.ec);
  });
  CHECK(cv::window_statistics().remote_invalidations == before.remote_invalidations);
}

TEST_CASE("a read-only window refuses a remote write", "[mw][access]") {
  rc_pair p;
  test_buffer region(p.pd, 4096, region_rights), peer(p.pd, 4096);
  cv::memory_window w(p.pd, cv::window_type::type2);
  p.run([&]() -> awaitable<void> {
    const auto key = co_await cv::bind_mw(p.a, w, region.mr, {}, cv::access::remote_read);
    const auto read = co_await peer_read(p, peer, key);
    CHECK_FALSE(read);
    region.fill('x');
    const auto wrote = co_await peer_write(p, peer, key);
    CHECK(wrote == cv::wc_errc::rem_access_err);
    CHECK(region.str(0, 64) == std::string(64, 'x'));
  });
}

TEST_CASE("each invalid bind is refused with its own errc and the queue pair keeps carrying traffic",
          "[mw][validate]") {
  rc_pair p;
  test_buffer region(p.pd, 8192, region_rights), scratch(p.pd, 4096);
  test_buffer no_bind(p.pd, 4096, cv::access::local_write | cv::access::remote_read | cv::access::remote_write);
  test_buffer read_only(p.pd, 4096, cv::access::remote_read | cv::access::mw_bind);
  test_buffer writable_no_remote_write(p.pd, 4096,
                                       cv::access::local_write | cv::access::remote_read | cv::access::mw_bind);
  cv::protection_domain other_pd(p.dev);
  test_buffer other_region(other_pd, 4096, region_rights);
  cv::memory_window other_window(other_pd, cv::window_type::type2);
  cv::memory_window w(p.pd, cv::window_type::type2);
  const auto before = cv::window_statistics();
  p.run([&]() -> awaitable<void> {
    auto bind = [&](cv::memory_window& win, const cv::memory_region& mr, cv::window_range r, cv::access a) {
      return cv::bind_mw(p.a, win, mr, r, a, tuple);
    };
    auto [e1, k1] = co_await bind(w, no_bind.mr, {}, cv::access::remote_read);
    CHECK(e1 == cv::errc::region_lacks_mw_bind);
    auto [e2, k2] = co_await bind(w, read_only.mr, {}, cv::access::remote_write);
    CHECK(e2 == cv::errc::window_needs_local_write);
    CHECK(e2.message().find("lacks local_write") != std::string::npos);  // names the region's lack and the right
    CHECK(e2.message().find("remote_write") != std::string::npos);
    auto [e3, k3] = co_await bind(w, writable_no_remote_write.mr, {}, cv::access::remote_write);
    CHECK(e3 == cv::errc::access_exceeds_region);
    CHECK(e3.message().find("memory_region::rights()") != std::string::npos);
    auto [e4, k4] = co_await bind(w, region.mr, {4096, 8192}, cv::access::remote_read);
    CHECK(e4 == cv::errc::range_outside_region);
    auto [e5, k5] = co_await bind(w, region.mr, {8193, cv::window_range::all}, cv::access::remote_read);
    CHECK(e5 == cv::errc::range_outside_region);
    auto [e6, k6] = co_await bind(w, region.mr, {0, 0}, cv::access::remote_read);
    CHECK(e6 == cv::errc::zero_length_window);
    auto [e7, k7] = co_await bind(w, other_region.mr, {}, cv::access::remote_read);
    CHECK(e7 == cv::errc::pd_mismatch);
    auto [e8, k8] = co_await bind(other_window, other_region.mr, {}, cv::access::remote_read);
    CHECK(e8 == cv::errc::pd_mismatch);
    auto [e9, k9] = co_await bind(w, region.mr, {}, cv::access::remote_read | cv::access::local_write);
    CHECK(e9 == cv::errc::window_access_invalid);
    const bool healthy = co_await a_still_works(p, scratch);
    CHECK(healthy);

    auto [ok, key] = co_await bind(w, region.mr, {0, 4096}, cv::access::remote_read);
    REQUIRE_FALSE(ok);
    auto [e10, k10] = co_await bind(w, region.mr, {0, 4096}, cv::access::remote_write);
    CHECK(e10 == cv::errc::window_still_bound);
    CHECK(w.key() == key);  // the refused bind left the binding as it was
    // A second operation while one is in flight.
    test::completion<cv::remote_key> first;
    cv::rebind_mw(p.a, w, region.mr, {0, 4096}, cv::access::remote_write, first.handler());
    auto [e11, k11] = co_await bind(w, region.mr, {0, 4096}, cv::access::remote_read);
    CHECK(e11 == cv::errc::window_busy);
    while (!first.done())
      co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
    CHECK_FALSE(*first.ec);
    const bool still_healthy = co_await a_still_works(p, scratch);
    CHECK(still_healthy);
    CHECK(p.a.error() == cv::error_code{});
    co_await cv::invalidate(p.a, w);
  });
  CHECK(cv::window_statistics().binds_failed >= before.binds_failed + 11);
}

TEST_CASE("the device refuses window types it lacks, clearly", "[mw][alloc]") {
  rc_pair p;
  const auto& caps = p.dev.caps();
  cv::error_code ec;
  cv::memory_window a(p.pd, cv::window_type::type2a, ec);
  if (caps.mw_type2a) {
    CHECK_FALSE(ec);
  } else {
    CHECK(ec == cv::errc::mw_type_unsupported);
    CHECK_FALSE(a);
    CHECK_THROWS_AS(cv::memory_window(p.pd, cv::window_type::type2a), cv::system_error);
  }
  cv::memory_window b(p.pd, cv::window_type::type2b, ec);
  CHECK(ec == (caps.mw_type2b ? cv::error_code{} : cv::error_code(cv::errc::mw_type_unsupported)));
}

TEST_CASE("many bind, rebind and invalidate cycles on one window all succeed", "[mw][cycles]") {
  const auto type = GENERATE(cv::window_type::type1, cv::window_type::type2);
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::memory_window w(p.pd, type);
  p.run([&]() -> awaitable<void> {
    std::uint32_t last = 0;
    int good = 0;
    for (int i = 0; i < 300; ++i) {
      const std::size_t off = (i % 8) * 4096;
      auto [e1, key] = co_await cv::bind_mw(p.a, w, region.mr, {off, 4096}, cv::access::remote_read, tuple);
      // Rights change: invalidate + bind in one chain (type 2), a plain rebind (type 1).
      auto [e2, key2] = co_await cv::rebind_mw(p.a, w, region.mr, {off, 4096}, cv::access::remote_write, tuple);
      auto [e3] = co_await cv::invalidate(p.a, w, tuple);
      if (!e1 && !e2 && !e3 && key.rkey != last && key2.rkey != key.rkey && !w.bound()) ++good;
      last = key2.rkey;
    }
    CHECK(good == 300);
    // The window still works after all that (256 keys wrap around the 8-bit tag).
    const auto key = co_await cv::bind_mw(p.a, w, region.mr, {}, cv::access::remote_write);
    peer.fill('c');
    const auto wrote = co_await peer_write(p, peer, key);
    CHECK_FALSE(wrote);
    CHECK(region.str(0, 64) == std::string(64, 'c'));
  });
}

TEST_CASE("deregistering a region with bound windows is refused until they are invalidated", "[mw][dereg]") {
  rc_pair p;
  std::vector<std::byte> bytes(8192);
  cv::memory_region mr(p.pd, bytes, region_rights);
  cv::memory_window w1(p.pd, cv::window_type::type1), w2(p.pd, cv::window_type::type2);
  p.run([&]() -> awaitable<void> {
    co_await cv::bind_mw(p.a, w1, mr, {0, 4096}, cv::access::remote_read);
    co_await cv::bind_mw(p.a, w2, mr, {4096, 4096}, cv::access::remote_read);
  });
  // What the device itself answers (rxe: EINVAL) — coverbs answers first, with a clear condition.
  const int raw = ibv_dereg_mr(mr.native_handle());
  REQUIRE(raw != 0);
  INFO("ibv_dereg_mr with bound windows: " << cv::verbs_status_result(raw).message());
  if (p.dev.name().rfind("rxe", 0) == 0) CHECK(cv::verbs_status_result(raw) == boost::system::errc::invalid_argument);
  cv::error_code ec;
  mr.deregister(ec);
  CHECK(ec == cv::errc::region_has_bound_windows);
  CHECK(mr);
  p.run([&]() -> awaitable<void> { co_await cv::invalidate(p.a, w1); });
  mr.deregister(ec);
  CHECK(ec == cv::errc::region_has_bound_windows);
  p.run([&]() -> awaitable<void> { co_await cv::invalidate(p.a, w2); });
  mr.deregister(ec);
  CHECK_FALSE(ec);
  CHECK_FALSE(mr);
}

TEST_CASE("asynchronous dereg and rereg of a region with bound windows are refused and hand it back",
          "[mw][dereg][reg]") {
  rc_pair p;
  cv::registration_service service(p.io.get_executor(), {.threads = 1});
  std::vector<std::byte> bytes(8192), other(8192);
  cv::memory_region mr(p.pd, bytes, region_rights);
  const auto lkey = mr.lkey();
  cv::memory_window w(p.pd, cv::window_type::type2);
  cv::error_code ec;
  cv::memory_region back;
  p.run([&]() -> awaitable<void> {
    co_await cv::bind_mw(p.a, w, mr, {0, 4096}, cv::access::remote_read);
    std::tie(ec, back) = co_await cv::dereg(service, std::move(mr), asio::as_tuple(use_awaitable));
  });
  CHECK(ec == cv::errc::region_has_bound_windows);
  REQUIRE(back);
  CHECK(back.lkey() == lkey);  // the same registration, still registered
  cv::rereg_result result;
  const cv::rereg_request change{.buffer = std::span<std::byte>(other), .rights = region_rights};
  p.run([&]() -> awaitable<void> {
    std::tie(ec, result) = co_await cv::rereg(service, std::move(back), change, asio::as_tuple(use_awaitable));
  });
  CHECK(ec == cv::errc::region_has_bound_windows);
  REQUIRE(result.region);
  CHECK(result.region.lkey() == lkey);
  CHECK(service.stats().registered == 0);  // the fallback did not register the new buffer for nothing
  // Once the window is invalidated the region goes.
  p.run([&]() -> awaitable<void> {
    co_await cv::invalidate(p.a, w);
    std::tie(ec, back) = co_await cv::dereg(service, std::move(result.region), asio::as_tuple(use_awaitable));
  });
  CHECK_FALSE(ec);
  CHECK_FALSE(back);
}

namespace {

/// Lets the loop run until `done` (from inside a coroutine).
template <class Pred>
awaitable<void> wait_for(Pred done) {
  while (!done())
    co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
}

}  // namespace

TEST_CASE("a leased key works until revoked, then the window returns to the pool", "[mw][lease]") {
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::window_pool pool(p.pd, {.type = cv::window_type::type2, .initial_windows = 2, .max_windows = 4});
  CHECK(pool.size() == 2);
  CHECK(pool.free() == 2);
  p.run([&]() -> awaitable<void> {
    cv::window_lease lease = co_await pool.async_lease(p.a, region.mr, {0, 4096}, cv::access::remote_write);
    CHECK(lease.active());
    CHECK(pool.free() == 1);
    CHECK_FALSE(lease.expires_at());
    const auto key = lease.key();
    const auto wrote = co_await peer_write(p, peer, key);
    CHECK_FALSE(wrote);
    co_await lease.async_revoke();
    CHECK_FALSE(lease.active());
    CHECK(pool.free() == 2);
    const auto refused = co_await peer_write(p, peer, key);
    CHECK(refused == cv::wc_errc::rem_access_err);
  });
}

TEST_CASE("a lease expires at its time-to-live and its key is dead afterwards", "[mw][lease]") {
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::window_pool pool(p.pd);
  const auto before = cv::window_statistics();
  p.run([&]() -> awaitable<void> {
    const auto ttl = std::chrono::milliseconds(300);
    const auto start = std::chrono::steady_clock::now();
    cv::window_lease lease = co_await pool.async_lease(p.a, region.mr, {}, cv::access::remote_write, ttl);
    CHECK(cv::window_statistics().leases_live == before.leases_live + 1);
    REQUIRE(lease.expires_at());
    CHECK(*lease.expires_at() >= start + ttl);
    const auto key = lease.key();
    auto [held] = co_await lease.async_hold(tuple);
    CHECK(held == cv::errc::lease_expired);
    CHECK(std::chrono::steady_clock::now() >= *lease.expires_at());  // never early
    CHECK_FALSE(lease.active());
    const auto refused = co_await peer_write(p, peer, key);
    CHECK(refused == cv::wc_errc::rem_access_err);
  });
  CHECK(cv::window_statistics().leases_expired == before.leases_expired + 1);
  CHECK(cv::window_statistics().leases_live == before.leases_live);
}

TEST_CASE("a cancelled hold completes only after the key is dead", "[mw][lease][cancel]") {
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::total);
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::window_pool pool(p.pd, {.initial_windows = 1});
  p.run([&]() -> awaitable<void> {
    cv::window_lease lease = co_await pool.async_lease(p.a, region.mr, {}, cv::access::remote_write);
    const auto key = lease.key();
    asio::cancellation_signal cancel;
    test::completion<int> held;
    bool dead_in_handler = false;
    lease.async_hold(asio::bind_cancellation_slot(cancel.slot(), [&](cv::error_code ec) {
      // The key is dead and the window back in the pool before this runs.
      dead_in_handler = !lease.active() && pool.free() == 1;
      held.handler()(ec, 0);
    }));
    cancel.emit(type);
    co_await wait_for([&] { return held.done(); });
    CHECK(*held.ec == asio::error::operation_aborted);
    CHECK(dead_in_handler);
    const auto refused = co_await peer_write(p, peer, key);
    CHECK(refused == cv::wc_errc::rem_access_err);
  });
}

TEST_CASE("the peer's send-with-invalidate ends a hold with success", "[mw][lease]") {
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096), inbox(p.pd, 4096);
  cv::window_pool pool(p.pd, {.initial_windows = 1});
  const auto before = cv::window_statistics();
  p.run([&]() -> awaitable<void> {
    cv::window_lease lease = co_await pool.async_lease(p.a, region.mr, {}, cv::access::remote_write);
    CHECK(cv::window_statistics().leases_live == before.leases_live + 1);
    p.a.async_recv(inbox.span(0, 64), [](cv::error_code, cv::received) {});
    test::completion<int> held;
    lease.async_hold([&](cv::error_code ec) { held.handler()(ec, 0); });
    co_await p.b.async_send_with_invalidate(peer.span(0, 8), lease.key().rkey);
    co_await wait_for([&] { return held.done(); });
    CHECK_FALSE(*held.ec);
    CHECK_FALSE(lease.active());
    CHECK(pool.free() == 1);
    // Ended by the peer: neither expired nor revoked, and no longer live.
    const auto after = cv::window_statistics();
    CHECK(after.leases_live == before.leases_live);
    CHECK(after.leases_revoked == before.leases_revoked);
    CHECK(after.leases_expired == before.leases_expired);
  });
}

TEST_CASE("a pool grows on demand up to its bound, and a dropped lease revokes its key", "[mw][pool]") {
  rc_pair p;
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::window_pool pool(p.pd, {.initial_windows = 1, .max_windows = 2});
  p.run([&]() -> awaitable<void> {
    auto l1 = co_await pool.async_lease(p.a, region.mr, {0, 4096}, cv::access::remote_read);
    auto l2 = co_await pool.async_lease(p.a, region.mr, {4096, 4096}, cv::access::remote_read);
    CHECK(pool.size() == 2);
    auto [e3, l3] = co_await pool.async_lease(p.a, region.mr, {}, cv::access::remote_read, {}, tuple);
    CHECK(e3 == cv::errc::window_pool_exhausted);
    CHECK_FALSE(l3);
    auto [bad, l4] = co_await pool.async_lease(p.a, region.mr, {0, 1 << 20}, cv::access::remote_read, {}, tuple);
    CHECK(bad == cv::errc::window_pool_exhausted);
    const auto key = l1.key();
    l1 = cv::window_lease();  // dropping it revokes the key asynchronously
    co_await wait_for([&] { return pool.free() == 1; });
    auto [bad2, l5] = co_await pool.async_lease(p.a, region.mr, {0, 1 << 20}, cv::access::remote_read, {}, tuple);
    CHECK(bad2 == cv::errc::range_outside_region);
    CHECK(pool.free() == 1);  // the window came back after the refused bind
    const auto refused = co_await peer_read(p, peer, key);
    CHECK(refused == cv::wc_errc::rem_access_err);
  });
}

TEST_CASE("a failed grant's empty lease completes plain callbacks on the queue pair's loop, inside run()",
          "[mw][lease][executor]") {
  rc_pair p;
  test_buffer region(p.pd, 4096, region_rights);
  cv::window_pool pool(p.pd, {.initial_windows = 0, .max_windows = 0});
  std::optional<cv::error_code> granted;
  cv::window_lease lease;
  pool.async_lease(p.a, region.mr, {}, cv::access::remote_read, {}, [&](cv::error_code ec, cv::window_lease l) {
    granted = ec;
    lease = std::move(l);
  });
  CHECK_FALSE(granted);
  REQUIRE(p.run_until([&] { return granted.has_value(); }));
  CHECK(*granted == cv::errc::window_pool_exhausted);
  CHECK_FALSE(lease);
  CHECK(lease.get_executor() == p.a.get_executor());

  std::optional<cv::error_code> held, revoked;
  std::thread::id held_on, revoked_on;
  lease.async_hold([&](cv::error_code ec) { held = ec, held_on = std::this_thread::get_id(); });
  lease.async_revoke([&](cv::error_code ec) { revoked = ec, revoked_on = std::this_thread::get_id(); });
  CHECK_FALSE(held);  // never inside the initiating call
  CHECK_FALSE(revoked);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a handler on another thread would run now
  CHECK_FALSE(held);
  CHECK_FALSE(revoked);
  REQUIRE(p.run_until([&] { return held && revoked; }));
  CHECK(*held == boost::system::errc::bad_file_descriptor);
  CHECK(*revoked == boost::system::errc::bad_file_descriptor);
  CHECK(held_on == std::this_thread::get_id());
  CHECK(revoked_on == std::this_thread::get_id());

  // Moved from, a lease keeps its executor (as an Asio socket does).
  cv::window_lease moved = std::move(lease);
  CHECK(lease.get_executor() == p.a.get_executor());
  CHECK(moved.get_executor() == p.a.get_executor());
  // A default-constructed lease has none: a handler brings its own, or the call refuses.
  cv::window_lease none;
  CHECK_THROWS_AS(none.async_hold([](cv::error_code) {}), cv::system_error);
  std::optional<cv::error_code> bound;
  std::thread::id bound_on;
  none.async_hold(asio::bind_executor(p.io, [&](cv::error_code ec) { bound = ec, bound_on = std::this_thread::get_id(); }));
  CHECK_FALSE(bound);
  REQUIRE(p.run_until([&] { return bound.has_value(); }));
  CHECK(*bound == boost::system::errc::bad_file_descriptor);
  CHECK(bound_on == std::this_thread::get_id());
}
