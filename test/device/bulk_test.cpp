// Bulk calls on a real device (rxe0 with 10.77.0.1 in the Soft-RoCE guest): 1 MiB moved both ways through a call's
// window, the key dead once the call completes or is cancelled, refusals before posting.
//
// The caller's windows are type 1 here, so that their keys work through any queue pair of the caller's domain: a
// read through a second, throwaway connection succeeds while the call runs and fails once it is over (a type-2
// key would fail on another queue pair either way, proving nothing). A failed read moves the *reader's* queue pair
// to the error state, hence the throwaway connection; the session goes on.
#include <coverbs/coverbs.hpp>

#include "fixtures/event_loop.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using namespace asio::experimental::awaitable_operators;
using bytes = std::vector<std::byte>;

namespace {

constexpr const char* address = "10.77.0.1";  // veth0, under rxe0
constexpr auto with_ec = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t mib = 1 << 20;

bytes pattern(std::size_t n, unsigned seed) {
  bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 11)) & 0xff);
  return b;
}

/// The caller's side: one domain and completion queue for its session and its throwaway connections, a 1 MiB
/// region to expose, and a pool of type-1 windows.
struct caller {
  cv::protection_domain pd;
  cv::completion_queue cq;
  bytes memory;
  cv::memory_region mr;
  cv::window_pool windows;
  caller(asio::io_context& io, cv::device& dev)
      : pd(dev), cq(io.get_executor(), dev), memory(pattern(mib, 1)),
        mr(pd, memory,
           cv::access::local_write | cv::access::remote_read | cv::access::remote_write | cv::access::mw_bind),
        windows(pd, {.type = cv::window_type::type1}) {}
  cv::session_options session() {
    cv::session_options o;
    o.connection.pd = &pd;
    o.connection.cq = &cq;
    o.messages.slot_size = 256;
    o.messages.recv_slots = 8;
    o.messages.send_slots = 8;
    return o;
  }
};

/// A connection from the caller's domain to a listener, and its accepted end, where reads with the caller's keys
/// are tried: the accepted end's queue pair may end in the error state.
struct throwaway {
  cv::connection accepted, connected;
  bytes landing = bytes(mib);
  std::optional<cv::memory_region> mr{};

  /// Reads all of `key` through the accepted end; the read's error.
  awaitable<cv::error_code> read(cv::remote_key key) {
    auto [ec, n] = co_await accepted.qp().async_read(cv::span_of(*mr, 0, key.length), key, with_ec);
    co_return ec;
  }
};

awaitable<throwaway> make_throwaway(cv::listener& l, caller& c) {
  const auto ex = co_await asio::this_coro::executor;
  cv::connect_options o;
  o.pd = &c.pd;
  o.cq = &c.cq;
  auto [accepted, connected] = co_await (l.async_accept(asio::use_awaitable) &&
                                         cv::async_connect(ex, address, l.local_port(), o, asio::use_awaitable));
  throwaway t{std::move(accepted), std::move(connected)};
  t.mr.emplace(t.accepted.pd(), t.landing, cv::access::local_write);
  co_return t;
}

/// What the callee saw of the last bulk request.
struct callee_log {
  std::optional<cv::bulk_descriptor> descriptor;
  bytes read;                                  // what it read
  std::optional<cv::error_code> in_call_read;  // a read through the throwaway connection while the call was running
  int requests = 0;
};

/// One test's loop, its listeners (sessions, throwaway connections) and the caller's side.
struct rig {
  test::event_loop loop;
  asio::io_context::executor_type ex = loop.io.get_executor();
  cv::listener sessions{ex, address, 0}, others{ex, address, 0};
  caller c{loop.io, sessions.get_device()};

  /// Serves `callee` on every session accepted.
  void serve(cv::session_handler callee) {
    cv::server_options o;
    o.session.messages = c.session().messages;
    cv::async_serve(sessions, std::move(callee), o, asio::detached);
  }
  awaitable<cv::session> connect() {
    co_return co_await cv::async_connect_session(ex, address, sessions.local_port(), c.session(), asio::use_awaitable);
  }
};

/// Waits on the loop, 5 ms at a time, until `done()` holds or `limit` has passed; whether it holds. (Pass a named
/// predicate, and await into a named variable: GCC 12 mishandles temporaries in a co_await's full-expression.)
template <class Pred>
awaitable<bool> eventually(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  asio::steady_timer tick(co_await asio::this_coro::executor);
  for (auto waited = std::chrono::milliseconds(0); !done() && waited < limit; waited += std::chrono::milliseconds(5)) {
    tick.expires_after(std::chrono::milliseconds(5));
    co_await tick.async_wait(asio::use_awaitable);
  }
  co_return done();
}

}  // namespace

TEST_CASE("a bulk call moves 1 MiB both ways byte-exact, and its key is dead once it completes; a late read with it "
          "fails with rem_access_err on a throwaway connection while the session goes on",
          "[bulk]") {
  rig r;
  caller& c = r.c;
  std::optional<throwaway> t;
  callee_log log;
  const bytes answer = pattern(mib, 2);
  // The callee: "read" reads the caller's region (and, while the call runs, reads it through the throwaway
  // connection too); "write" writes `answer` into it.
  auto callee = [&](cv::session& s) -> awaitable<void> {
    bytes memory(mib);
    cv::memory_region mr(s.pd(), memory, cv::access::local_write);
    for (;;) {
      cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
      const cv::bulk_request bulk = cv::parse_bulk_request(req.bytes());
      log.descriptor = bulk.descriptor;
      ++log.requests;
      std::size_t n = 0;
      if (bulk.payload.size() == 4) {  // "read"
        n = co_await cv::async_bulk_read(s.qp(), bulk.descriptor, cv::span_of(mr, 0, mib), asio::use_awaitable);
        log.read.assign(memory.begin(), memory.begin() + static_cast<std::ptrdiff_t>(n));
        log.in_call_read = co_await t->read(bulk.descriptor.key);
      } else {
        std::copy(answer.begin(), answer.end(), memory.begin());
        n = co_await cv::async_bulk_write(s.qp(), cv::span_of(mr, 0, mib), bulk.descriptor, asio::use_awaitable);
      }
      co_await s.endpoint().async_reply(req, std::as_bytes(std::span(&n, 1)), asio::use_awaitable);
    }
  };
  r.serve(callee);
  r.loop.run([&]() -> awaitable<void> {
    t.emplace(co_await make_throwaway(r.others, c));
    auto s = co_await r.connect();
    const std::size_t free_before = c.windows.free();

    // The peer reads 1 MiB.
    const std::string read = "read";
    cv::inbound_message reply = co_await cv::async_bulk_call(
        s.endpoint(), c.windows, c.mr, {0, mib}, cv::access::remote_read, asio::buffer(read), asio::use_awaitable);
    std::size_t n = 0;
    std::memcpy(&n, reply.bytes().data(), sizeof n);
    CHECK(n == mib);
    CHECK(log.read == c.memory);
    REQUIRE(log.in_call_read);
    CHECK_FALSE(*log.in_call_read);  // the key worked through another queue pair of the domain while the call ran
    CHECK(log.descriptor->key.length == mib);
    CHECK(log.descriptor->rights == cv::access::remote_read);
    CHECK(c.windows.free() == free_before);  // the window is back: its key is dead
    const cv::error_code late = co_await t->read(log.descriptor->key);
    INFO(late.message());
    CHECK(late == cv::wc_errc::rem_access_err);

    // The peer writes 1 MiB into the region, through a new window of the same session.
    const std::string write = "write";
    reply = co_await cv::async_bulk_call(s.endpoint(), c.windows, c.mr, {0, mib}, cv::access::remote_write,
                                         asio::buffer(write), asio::use_awaitable);
    CHECK(c.memory == answer);
    CHECK(log.descriptor->rights == cv::access::remote_write);
    CHECK(log.requests == 2);
    t.emplace(co_await make_throwaway(r.others, c));  // the first one's reader is in the error state
    const cv::error_code late_write = co_await t->read(log.descriptor->key);  // (no co_await inside CHECK)
    CHECK(late_write == cv::wc_errc::rem_access_err);
    CHECK_FALSE(s.endpoint().error());
    reply.release();
    co_await s.async_close(asio::use_awaitable);
  });
}

TEST_CASE("a bulk call cancelled at once, while its bind is on the wire, ends with operation_aborted once its key "
          "is dead and harms nothing; a dead lease and rights other than read or write are refused",
          "[bulk]") {
  rig r;
  caller& c = r.c;
  auto echo = [](cv::session& s) -> awaitable<void> {
    for (;;) {
      cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
      co_await s.endpoint().async_reply(req, req.bytes(), asio::use_awaitable);
    }
  };
  r.serve(echo);
  r.loop.run([&]() -> awaitable<void> {
    auto s = co_await r.connect();
    const std::byte one[1] = {};
    asio::cancellation_signal cancel;
    std::optional<cv::error_code> done;
    cv::async_bulk_call(
        s.endpoint(), c.windows, c.mr, {0, 64}, cv::access::remote_read, std::span(one),
        asio::bind_cancellation_slot(cancel.slot(), [&](cv::error_code ec, cv::inbound_message) { done = ec; }));
    cancel.emit(asio::cancellation_type::terminal);  // the bind was posted by the initiation
    auto called_back = [&] { return done.has_value(); };
    const bool ended = co_await eventually(called_back);
    REQUIRE(ended);
    CHECK(*done == asio::error::operation_aborted);
    CHECK(c.windows.free() == c.windows.size());  // its key is dead: the window is back
    CHECK_FALSE(s.endpoint().error());            // the bind ran to its end: the queue pair is healthy
    cv::inbound_message reply = co_await cv::async_bulk_call(
        s.endpoint(), c.windows, c.mr, {0, 64}, cv::access::remote_read, std::span(one), asio::use_awaitable);
    CHECK(reply.size() == cv::bulk_descriptor::wire_size + 1);
    reply.release();
    auto [dead, m1] = co_await cv::async_bulk_call(s.endpoint(), cv::window_lease(), cv::access::remote_read,
                                                   asio::buffer(one), with_ec);
    CHECK(dead == cv::errc::bad_bulk_descriptor);
    auto [atomic, m2] = co_await cv::async_bulk_call(s.endpoint(), c.windows, c.mr, {0, 64}, cv::access::remote_atomic,
                                                     std::span(one), with_ec);
    CHECK(atomic == cv::errc::bad_bulk_descriptor);
    CHECK(c.windows.free() == c.windows.size());
    CHECK_FALSE(s.endpoint().error());
    co_await s.async_close(asio::use_awaitable);
  });
}

TEST_CASE("cancelling a bulk call (|| timer) kills its key before the call completes; the session goes on", "[bulk]") {
  rig r;
  caller& c = r.c;
  std::optional<throwaway> t;
  callee_log log;
  // The callee reads through the throwaway connection (the key works), then answers only the second request.
  std::optional<cv::inbound_request> held;
  auto callee = [&](cv::session& s) -> awaitable<void> {
    for (;;) {
      cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
      log.descriptor = cv::parse_bulk_request(req.bytes()).descriptor;
      if (++log.requests == 1) {
        log.in_call_read = co_await t->read(log.descriptor->key);
        held.emplace(std::move(req));  // never answered while the caller waits
        continue;
      }
      co_await s.endpoint().async_reply(req, req.bytes(), asio::use_awaitable);
    }
  };
  r.serve(callee);
  r.loop.run([&]() -> awaitable<void> {
    t.emplace(co_await make_throwaway(r.others, c));
    auto s = co_await r.connect();
    // The timer: once the callee's read through the throwaway connection is done, 50 ms more.
    auto timer = [&]() -> awaitable<void> {
      asio::steady_timer timer(r.ex);
      while (!log.in_call_read) {
        timer.expires_after(std::chrono::milliseconds(5));
        co_await timer.async_wait(asio::use_awaitable);
      }
      timer.expires_after(std::chrono::milliseconds(50));
      co_await timer.async_wait(asio::use_awaitable);
    };
    const std::byte one[1] = {};
    auto outcome = co_await (cv::async_bulk_call(s.endpoint(), c.windows, c.mr, {0, mib}, cv::access::remote_read,
                                                 std::span(one), with_ec) ||
                             timer());
    REQUIRE(outcome.index() == 1);  // the timer won; the call completed (aborted) once its key was dead
    CHECK(log.requests == 1);
    REQUIRE(log.in_call_read);
    CHECK_FALSE(*log.in_call_read);
    const std::size_t free_now = c.windows.free();
    CHECK(free_now == c.windows.size());  // every window back in the pool
    const cv::error_code late = co_await t->read(log.descriptor->key);
    CHECK(late == cv::wc_errc::rem_access_err);
    CHECK(s.endpoint().statistics().calls_abandoned == 1);
    // The session goes on: the next bulk call is answered.
    cv::inbound_message reply = co_await cv::async_bulk_call(
        s.endpoint(), c.windows, c.mr, {0, 64}, cv::access::remote_read, std::span(one), asio::use_awaitable);
    CHECK(reply.size() == cv::bulk_descriptor::wire_size + 1);
    CHECK(log.requests == 2);
    reply.release();
    held.reset();
    co_await s.async_close(asio::use_awaitable);
  });
}

TEST_CASE("a bulk descriptor longer than the callee allows is refused with bulk_too_large before posting, one "
          "without the needed right with bad_bulk_descriptor; the queue pair stays healthy",
          "[bulk]") {
  rig r;
  caller& c = r.c;
  std::vector<cv::error_code> refusals;
  bool completed_inline = false;
  std::size_t last_read = 0;
  auto callee = [&](cv::session& s) -> awaitable<void> {
    bytes memory(4096);
    cv::memory_region mr(s.pd(), memory, cv::access::local_write);
    for (;;) {
      cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
      cv::error_code parse_ec;
      const cv::bulk_request bulk = cv::parse_bulk_request(req.bytes(), parse_ec);
      if (parse_ec) {
        refusals.push_back(parse_ec);
      } else {
        bool done = false;
        cv::async_bulk_read(s.qp(), bulk.descriptor, cv::span_of(mr, 0, 4096), [&](cv::error_code ec, std::size_t) {
          done = true;
          refusals.push_back(ec);
        });
        completed_inline = completed_inline || done;
        auto [wec, wn] = co_await cv::async_bulk_write(s.qp(), cv::span_of(mr, 0, 16), bulk.descriptor, with_ec);
        refusals.push_back(wec);
        // Within the limit and the rights: a read of at most 4096 bytes goes through.
        if (bulk.descriptor.key.length <= 4096)
          last_read =
              co_await cv::async_bulk_read(s.qp(), bulk.descriptor, cv::span_of(mr, 0, 4096), asio::use_awaitable);
      }
      co_await s.endpoint().async_reply(req, req.bytes().first(0), asio::use_awaitable);
    }
  };
  r.serve(callee);
  r.loop.run([&]() -> awaitable<void> {
    auto s = co_await r.connect();
    const std::byte none[1] = {};
    // 1 MiB for a callee that takes 4 KiB: refused; read-only, so the write is refused too.
    co_await cv::async_bulk_call(s.endpoint(), c.windows, c.mr, {0, mib}, cv::access::remote_read, std::span(none, 0),
                                 asio::use_awaitable);
    // A plain request, no descriptor.
    co_await s.endpoint().async_call(std::span(none), asio::use_awaitable);
    // 4 KiB read-only, through a lease granted beforehand (which the call takes): the read goes through (the queue
    // pair is healthy); the write is refused for the right. The lease is revoked when the call completes.
    cv::window_lease lease = co_await c.windows.async_lease(s.endpoint().get_queue_pair(), c.mr, {4096, 4096},
                                                            cv::access::remote_read, {}, asio::use_awaitable);
    co_await cv::async_bulk_call(s.endpoint(), std::move(lease), cv::access::remote_read, asio::buffer(none, 0),
                                 asio::use_awaitable);
    CHECK(c.windows.free() == c.windows.size());
    co_await s.async_close(asio::use_awaitable);
  });
  REQUIRE(refusals.size() == 5);
  CHECK(refusals[0] == cv::errc::bulk_too_large);
  CHECK(refusals[1] == cv::errc::bad_bulk_descriptor);  // no remote_write
  CHECK(refusals[2] == cv::errc::bad_bulk_descriptor);  // no descriptor at all
  CHECK_FALSE(refusals[3]);                             // 4096 bytes into 4096: read
  CHECK(refusals[4] == cv::errc::bad_bulk_descriptor);  // no remote_write
  CHECK_FALSE(completed_inline);
  CHECK(last_read == 4096);
}

TEST_CASE("a bulk call whose session is destroyed under it completes with operation_aborted once its key is dead "
          "(no queue pair left, so the window is deallocated)",
          "[bulk]") {
  rig r;
  caller& c = r.c;
  std::optional<throwaway> t;
  callee_log log;
  std::optional<cv::inbound_request> held;
  auto callee = [&](cv::session& s) -> awaitable<void> {
    cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
    log.descriptor = cv::parse_bulk_request(req.bytes()).descriptor;
    ++log.requests;
    log.in_call_read = co_await t->read(log.descriptor->key);
    held.emplace(std::move(req));  // never answered
    cv::error_code ec;
    while (!ec) {
      auto [e, next] = co_await s.endpoint().async_receive_request(with_ec);
      ec = e;
    }
  };
  r.serve(callee);
  r.loop.run([&]() -> awaitable<void> {
    t.emplace(co_await make_throwaway(r.others, c));
    std::optional<cv::session> s(co_await r.connect());
    const std::byte one[1] = {};
    std::optional<cv::error_code> done;
    cv::async_bulk_call(s->endpoint(), c.windows, c.mr, {0, 4096}, cv::access::remote_read, std::span(one),
                        [&](cv::error_code ec, cv::inbound_message) { done = ec; });
    auto read_in_call = [&] { return log.in_call_read.has_value(); };
    const bool read = co_await eventually(read_in_call);
    REQUIRE(read);
    REQUIRE_FALSE(*log.in_call_read);  // the key worked while the call waited for its reply
    s.reset();  // the endpoint, then the connection and its queue pair: the call's revocation has none to post on
    auto called_back = [&] { return done.has_value(); };
    const bool ended = co_await eventually(called_back);
    REQUIRE(ended);
    CHECK(*done == asio::error::operation_aborted);
    CHECK(c.windows.free() == c.windows.size());
    const cv::error_code late = co_await t->read(log.descriptor->key);
    CHECK(late == cv::wc_errc::rem_access_err);  // the key is dead
    held.reset();
  });
}

TEST_CASE("a type-2 lease ends when the queue pair it was bound through is destroyed; async_hold completes with "
          "operation_aborted and the window is back in the pool",
          "[bulk]") {
  rig r;
  caller& c = r.c;
  cv::window_pool type2(c.pd, {.type = cv::window_type::type2});
  std::optional<throwaway> t;
  r.loop.run([&]() -> awaitable<void> {
    t.emplace(co_await make_throwaway(r.others, c));
    cv::window_lease lease = co_await type2.async_lease(t->connected.qp(), c.mr, {0, 4096}, cv::access::remote_read,
                                                        {}, asio::use_awaitable);
    REQUIRE(lease.active());
    CHECK(type2.free() + 1 == type2.size());
    std::optional<cv::error_code> held;
    lease.async_hold([&](cv::error_code ec) { held = ec; });
    t.reset();  // both connections, and so the queue pair of the lease
    auto hold_ended = [&] { return held.has_value(); };
    const bool ended = co_await eventually(hold_ended);
    REQUIRE(ended);
    CHECK(*held == asio::error::operation_aborted);
    CHECK_FALSE(lease.active());
    CHECK(type2.free() == type2.size());
    lease.revoke();  // nothing to do: it is dead
    auto [revoked] = co_await lease.async_revoke(with_ec);
    CHECK_FALSE(revoked);
  });
}
