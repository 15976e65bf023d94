// Sessions and servers on a real device (rxe0 with 10.77.0.1 in the Soft-RoCE guest): endpoints made before the
// connection is established (no receiver-not-ready during setup), sessions on a loop pool, why each session
// ended, hostile peers that end only their own session, leases revoked when a session closes.
#include <coverbs/coverbs.hpp>

#include "fixtures/event_loop.hpp"
#include "fixtures/messaging.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using bytes = std::vector<std::byte>;

namespace {

constexpr const char* address = "10.77.0.1";  // veth0, under rxe0
constexpr auto with_ec = asio::as_tuple(asio::use_awaitable);

using test::rnr_total;

cv::session_options small_sessions() {
  cv::session_options o;
  o.messages.slot_size = 256;
  o.messages.recv_slots = 8;
  o.messages.send_slots = 8;
  return o;
}

/// Answers every request with its bytes reversed until the session fails.
awaitable<void> reverse_server(cv::session& s) {
  for (;;) {
    cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
    bytes reply(req.bytes().rbegin(), req.bytes().rend());
    co_await s.endpoint().async_reply(req, reply, asio::use_awaitable);
  }
}

/// Reports, collected from any thread.
struct reports {
  std::mutex m;
  std::vector<cv::session_report> all;
  std::function<void(const cv::session_report&)> sink() {
    return [this](const cv::session_report& r) {
      std::lock_guard lock(m);
      all.push_back(r);
    };
  }
  std::size_t size() {
    std::lock_guard lock(m);
    return all.size();
  }
  cv::session_report at(std::size_t i) {
    std::lock_guard lock(m);
    return all.at(i);
  }
};

/// Small sessions whose ends go to `r`.
cv::server_options reporting_to(reports& r) {
  cv::server_options o;
  o.session = small_sessions();
  o.on_end = r.sink();
  return o;
}

/// One test's loop, a listener on rxe0's address, and a server's options whose session ends go to `ends`.
struct server_rig {
  test::event_loop loop;
  asio::io_context::executor_type ex = loop.io.get_executor();
  cv::listener l{ex, address, 0};
  reports ends;
  cv::server_options o = reporting_to(ends);
};

/// One call of `n` bytes through a fresh session, checked byte-exact, then closed.
awaitable<void> one_call(std::uint16_t port, std::size_t n) {
  const auto ex = co_await asio::this_coro::executor;
  auto [ec, s] = co_await cv::async_connect_session(ex, address, port, small_sessions(), with_ec);
  REQUIRE_FALSE(ec);
  bytes request(n);
  for (std::size_t i = 0; i < n; ++i)
    request[i] = static_cast<std::byte>(i * 7 + 1);
  cv::inbound_message reply = co_await s.endpoint().async_call(request, asio::use_awaitable);
  REQUIRE(reply.size() == n);
  for (std::size_t i = 0; i < n; ++i)
    REQUIRE(reply.bytes()[i] == request[n - 1 - i]);
  reply.release();
  auto [cec] = co_await s.async_close(with_ec);
  CHECK_FALSE(cec);
}

}  // namespace

TEST_CASE("sessions on a loop pool: endpoints posted before the connection is established, so no receiver-not-ready "
          "across 24 connection setups; each session reports why it ended",
          "[sessions]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  cv::loop_pool pool(l.get_device(), {.loops = 2});
  pool.run();
  reports ends;
  cv::server_options o = reporting_to(ends);
  o.pool = &pool;
  asio::cancellation_signal stop;
  std::optional<cv::error_code> served;
  cv::async_serve(l, reverse_server, o,
                  asio::bind_cancellation_slot(stop.slot(), [&](cv::error_code ec) { served = ec; }));
  const std::uint64_t rnr_before = rnr_total(l.get_device());
  // 16 one after another (the client calls at once: its first message races the server's accept), then 8 at once.
  loop.run([&]() -> awaitable<void> {
    for (int i = 0; i < 16; ++i)
      co_await one_call(l.local_port(), static_cast<std::size_t>(i * 16));
  });
  std::atomic<int> done{0};
  for (int i = 0; i < 8; ++i)
    asio::co_spawn(ex, one_call(l.local_port(), 256), [&](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
      ++done;
    });
  REQUIRE(loop.run_until([&] { return done == 8 && ends.size() == 24; }));
  const std::uint64_t rnr_after = rnr_total(l.get_device());
  INFO("receiver-not-ready counters before " << rnr_before << ", after " << rnr_after);
  CHECK(rnr_after == rnr_before);
  for (std::size_t i = 0; i < 24; ++i) {
    const cv::session_report r = ends.at(i);
    INFO(r.reason.message() << ": " << r.diagnostic);
    CHECK(r.reason == cv::errc::connection_reset);  // the client closed: the peer disconnected
    CHECK(r.statistics.messages_received == 1);
    CHECK(r.peer.rfind("10.77.0.1:", 0) == 0);
  }
  stop.emit(asio::cancellation_type::terminal);
  REQUIRE(loop.run_until([&] { return served.has_value(); }));
  CHECK(*served == asio::error::operation_aborted);
  pool.stop();
  pool.join();
}

TEST_CASE("a session whose coroutine returns or throws ends with that reason, closed in order: its kept lease is "
          "revoked and its window back in the pool",
          "[sessions]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  // The server's sessions on a domain and queue of the test's, so that its region and windows outlive them.
  cv::protection_domain pd(l.get_device());
  cv::completion_queue cq(ex, l.get_device());
  std::vector<std::byte> memory(4096, std::byte{0x11});
  cv::memory_region mr(pd, memory, cv::access::local_write | cv::access::remote_read | cv::access::mw_bind);
  cv::window_pool windows(pd);
  reports ends;
  cv::server_options o = reporting_to(ends);
  o.session.connection.pd = &pd;
  o.session.connection.cq = &cq;
  o.session.connection.qp.remote_access = cv::access::remote_read;
  // The first session grants a window lease, sends its key as the reply to one request and returns; the second
  // throws a plain exception; the third a system_error of its own.
  int sessions = 0;
  auto handler = [&](cv::session& s) -> awaitable<void> {
    const int n = sessions++;
    if (n == 1) throw std::runtime_error("the handler gave up");
    if (n == 2) throw cv::system_error(make_error_code(boost::system::errc::permission_denied), "not this one");
    cv::window_lease lease = co_await windows.async_lease(s.qp(), mr, {0, 4096}, cv::access::remote_read,
                                                          std::chrono::seconds(0), asio::use_awaitable);
    const cv::remote_key key = s.keep(std::move(lease)).key();
    cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
    co_await s.endpoint().async_reply(req, std::as_bytes(std::span(&key, 1)), asio::use_awaitable);
  };
  cv::async_serve(l, handler, o, asio::detached);
  for (int i = 0; i < 3; ++i) {
    loop.run([&]() -> awaitable<void> {
      auto [ec, s] = co_await cv::async_connect_session(ex, address, l.local_port(), small_sessions(), with_ec);
      REQUIRE_FALSE(ec);
      if (i == 0) {
        const std::byte ask[1] = {};
        cv::inbound_message reply = co_await s.endpoint().async_call(std::span(ask), asio::use_awaitable);
        REQUIRE(reply.size() == sizeof(cv::remote_key));
        cv::remote_key key;
        std::memcpy(&key, reply.bytes().data(), sizeof key);
        CHECK(key.length == 4096);  // the server's session returns once this reply is sent: no check of the lease here
      }
      // The server's session ends on its own: wait for its disconnect.
      auto [rec, m] = co_await s.endpoint().async_receive_message(with_ec);
      CHECK(rec);
      CHECK(s.error() == cv::errc::connection_reset);
    });
    REQUIRE(loop.run_until([&] { return ends.size() == static_cast<std::size_t>(i + 1); }));
  }
  CHECK_FALSE(ends.at(0).reason);  // returned
  CHECK_FALSE(ends.at(0).close_error);
  CHECK(ends.at(0).statistics.messages_sent == 1);
  CHECK(windows.free() == windows.size());  // revoked when the session closed: the window is back
  CHECK(ends.at(1).reason == cv::errc::session_handler_threw);
  CHECK(ends.at(1).diagnostic == "the handler gave up");
  CHECK(ends.at(2).reason == boost::system::errc::permission_denied);
}

TEST_CASE("async_close cancelled at once still revokes every kept lease, waits until each key is dead, and "
          "disconnects",
          "[sessions]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  reports ends;
  cv::async_serve(l, reverse_server, reporting_to(ends), asio::detached);
  // The client's session on a domain and queue of the test's, so that its region and windows outlive it.
  cv::protection_domain pd(l.get_device());
  cv::completion_queue cq(ex, l.get_device());
  std::vector<std::byte> memory(8192, std::byte{0x22});
  cv::memory_region mr(pd, memory, cv::access::local_write | cv::access::remote_read | cv::access::mw_bind);
  cv::window_pool windows(pd);
  cv::session_options o = small_sessions();
  o.connection.pd = &pd;
  o.connection.cq = &cq;
  o.connection.qp.remote_access = cv::access::remote_read;
  std::optional<cv::error_code> closed;
  std::size_t free_at_close = 0;
  loop.run([&]() -> awaitable<void> {
    auto [ec, s] = co_await cv::async_connect_session(ex, address, l.local_port(), o, with_ec);
    REQUIRE_FALSE(ec);
    for (std::size_t half : {0, 1}) {
      cv::window_lease lease = co_await windows.async_lease(s.qp(), mr, {half * 4096, 4096}, cv::access::remote_read,
                                                            std::chrono::seconds(0), asio::use_awaitable);
      s.keep(std::move(lease));
    }
    REQUIRE(windows.free() + 2 == windows.size());
    // Cancelled before its first step ran: it must still run every step to its end.
    asio::cancellation_signal cancel;
    s.async_close(asio::bind_cancellation_slot(cancel.slot(), [&](cv::error_code cec) {
      closed = cec;
      free_at_close = windows.free();
    }));
    cancel.emit(asio::cancellation_type::terminal);
    CHECK_FALSE(s);
  });
  REQUIRE(loop.run_until([&] { return closed.has_value(); }));
  CHECK_FALSE(*closed);                    // not operation_aborted: every step ran
  CHECK(free_at_close == windows.size());  // both keys dead when it completed
  REQUIRE(loop.run_until([&] { return ends.size() == 1; }));
  CHECK(ends.at(0).reason == cv::errc::connection_reset);  // and the server saw the disconnect
}

TEST_CASE("a hostile peer (garbage header, slot-overflowing length, credit overrun) ends only its own session with a "
          "named error; the server serves the next client",
          "[sessions]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  reports ends;
  cv::server_options o = reporting_to(ends);
  cv::async_serve(l, reverse_server, o, asio::detached);

  // A raw connection that sends `messages` (each a whole send) after posting receives for the server's credits.
  auto hostile = [&](std::vector<bytes> messages) -> awaitable<void> {
    auto [ec, c] = co_await cv::async_connect(ex, address, l.local_port(), {}, with_ec);
    REQUIRE_FALSE(ec);
    std::vector<std::byte> in(16 * 512), out(64 * 512);
    cv::memory_region in_mr(c.pd(), in, cv::access::local_write), out_mr(c.pd(), out, cv::access::local_write);
    for (int i = 0; i < 16; ++i)
      c.qp().async_recv(cv::span_of(in_mr, i * 512, 512), asio::detached);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      std::memcpy(out.data() + i * 512, messages[i].data(), messages[i].size());
      auto [sec, n] = co_await c.qp().async_send(cv::span_of(out_mr, i * 512, messages[i].size()), with_ec);
      if (sec) break;  // the server disconnected us
    }
    asio::steady_timer t(ex, std::chrono::seconds(10));
    while (c.connected() && t.expiry() > std::chrono::steady_clock::now()) {
      asio::steady_timer tick(ex, std::chrono::milliseconds(20));
      co_await tick.async_wait(with_ec);
    }
    CHECK_FALSE(c.connected());  // the server ended the session
  };
  auto header = [](cv::message_type type, std::uint32_t length, std::size_t total) {
    return test::header_bytes(type, length, total, 256);
  };
  bytes garbage(40, std::byte{0x77});
  std::vector<bytes> overrun;
  for (int i = 0; i < 9; ++i)
    overrun.push_back(header(cv::message_type::data, 8, cv::message_header::size + 8));

  const std::vector<std::pair<std::vector<bytes>, cv::errc>> cases = {
      {{garbage}, cv::errc::protocol_violation},
      {{header(cv::message_type::data, 300, cv::message_header::size + 8)}, cv::errc::protocol_violation},
      {overrun, cv::errc::credit_overrun},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    loop.run([&]() -> awaitable<void> { co_await hostile(cases[i].first); });
    REQUIRE(loop.run_until([&] { return ends.size() == 2 * i + 1; }));
    const cv::session_report r = ends.at(2 * i);
    INFO(r.diagnostic);
    CHECK(r.reason == cases[i].second);
    CHECK_FALSE(r.diagnostic.empty());
    loop.run([&]() -> awaitable<void> { co_await one_call(l.local_port(), 100); });  // the server goes on
    REQUIRE(loop.run_until([&] { return ends.size() == 2 * i + 2; }));
    CHECK(ends.at(2 * i + 1).reason == cv::errc::connection_reset);
  }
}

TEST_CASE("a session needs a connection made with session options", "[sessions]") {
  try {
    cv::session s{cv::connection()};
    FAIL("no throw");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errc::not_a_session_connection);
    CHECK(e.code() == boost::system::errc::invalid_argument);
  }
}

TEST_CASE("max_sessions: at the cap the server accepts no one until a session ends, and then the waiting peer is "
          "served",
          "[sessions]") {
  server_rig r;
  r.o.max_sessions = 1;
  int running = 0, most = 0, served = 0;
  auto handler = [&](cv::session& s) -> awaitable<void> {
    most = std::max(most, ++running);
    ++served;
    cv::error_code ec;
    while (!ec) {  // answers until the peer closes
      auto [e, req] = co_await s.endpoint().async_receive_request(with_ec);
      ec = e;
      if (!ec) co_await s.endpoint().async_reply(req, req.bytes(), asio::use_awaitable);
    }
    --running;
  };
  cv::async_serve(r.l, handler, r.o, asio::detached);
  r.loop.run([&]() -> awaitable<void> {
    auto [ec1, first] = co_await cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), with_ec);
    REQUIRE_FALSE(ec1);
    // The second peer's connect waits in the backlog while the first session runs.
    std::optional<cv::error_code> second_connected;
    std::optional<cv::session> second;
    cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), [&](cv::error_code ec, cv::session s) {
      second_connected = ec;
      second.emplace(std::move(s));
    });
    asio::steady_timer t(r.ex);
    t.expires_after(std::chrono::milliseconds(700));
    co_await t.async_wait(asio::use_awaitable);
    CHECK_FALSE(second_connected);
    CHECK(served == 1);
    const std::byte one[1] = {std::byte{7}};
    cv::inbound_message reply = co_await first.endpoint().async_call(std::span(one), asio::use_awaitable);
    CHECK(reply.size() == 1);
    reply.release();
    t.expires_after(std::chrono::milliseconds(700));  // still waiting, 1.4 s on: the cap, not a slow handshake
    co_await t.async_wait(asio::use_awaitable);
    CHECK_FALSE(second_connected);
    CHECK(served == 1);
    auto [cec] = co_await first.async_close(with_ec);
    CHECK_FALSE(cec);
    for (int i = 0; !second_connected && i < 1000; ++i) {
      t.expires_after(std::chrono::milliseconds(10));
      co_await t.async_wait(asio::use_awaitable);
    }
    REQUIRE(second_connected);
    REQUIRE_FALSE(*second_connected);
    cv::inbound_message again = co_await second->endpoint().async_call(std::span(one), asio::use_awaitable);
    CHECK(again.size() == 1);
    again.release();
    co_await second->async_close(with_ec);
  });
  REQUIRE(r.loop.run_until([&] { return r.ends.size() == 2; }));
  CHECK(served == 2);
  CHECK(most == 1);
}

TEST_CASE("idle_timeout ends a session whose peer sends nothing with session_idle, and not one that keeps calling",
          "[sessions]") {
  server_rig r;
  r.o.idle_timeout = std::chrono::milliseconds(400);
  cv::async_serve(r.l, reverse_server, r.o, asio::detached);
  r.loop.run([&]() -> awaitable<void> {
    auto [ec1, silent] = co_await cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), with_ec);
    REQUIRE_FALSE(ec1);
    auto [ec2, busy] = co_await cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), with_ec);
    REQUIRE_FALSE(ec2);
    // The busy peer calls every 50 ms for 1.5 s: past three idle periods of the silent one.
    const std::byte one[1] = {std::byte{3}};
    asio::steady_timer t(r.ex);
    for (int i = 0; i < 30; ++i) {
      cv::inbound_message reply = co_await busy.endpoint().async_call(std::span(one), asio::use_awaitable);
      REQUIRE(reply.size() == 1);
      reply.release();
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(asio::use_awaitable);
    }
    REQUIRE(r.ends.size() == 1);  // the silent one only
    CHECK(r.ends.at(0).reason == cv::errc::session_idle);
    CHECK(r.ends.at(0).reason == boost::system::errc::timed_out);
    CHECK_FALSE(r.ends.at(0).close_error);
    auto [rec, m] = co_await silent.endpoint().async_receive_message(with_ec);
    CHECK(rec);  // the server closed it
    auto [bec] = co_await busy.async_close(with_ec);
    CHECK_FALSE(bec);
  });
  REQUIRE(r.loop.run_until([&] { return r.ends.size() == 2; }));
}

TEST_CASE("with idle_timeout, a handler that throws ends its session at once with its reason while the peer keeps "
          "calling",
          "[sessions]") {
  server_rig r;
  r.o.idle_timeout = std::chrono::seconds(3);
  auto handler = [](cv::session& s) -> awaitable<void> {
    cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
    co_await s.endpoint().async_reply(req, req.bytes(), asio::use_awaitable);
    throw cv::system_error(make_error_code(boost::system::errc::permission_denied), "one call only");
  };
  cv::async_serve(r.l, handler, r.o, asio::detached);
  r.loop.run([&]() -> awaitable<void> {
    auto [ec, s] = co_await cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), with_ec);
    REQUIRE_FALSE(ec);
    const std::byte one[1] = {std::byte{5}};
    cv::inbound_message reply = co_await s.endpoint().async_call(std::span(one), asio::use_awaitable);
    reply.release();
    // Calls every 50 ms: the session is never idle, so only the handler's end can end it.
    asio::steady_timer t(r.ex);
    cv::error_code call_ec;
    for (int i = 0; i < 100 && !call_ec && r.ends.size() == 0; ++i) {
      auto [e, m] = co_await s.endpoint().async_call(std::span(one), with_ec);
      call_ec = e;
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(asio::use_awaitable);
    }
    for (int i = 0; i < 1000 && r.ends.size() == 0; ++i) {
      t.expires_after(std::chrono::milliseconds(10));
      co_await t.async_wait(asio::use_awaitable);
    }
    REQUIRE(r.ends.size() == 1);
    CHECK(r.ends.at(0).reason == boost::system::errc::permission_denied);
    CHECK(r.ends.at(0).reason != cv::errc::session_idle);
    co_await s.async_close(with_ec);
  });
}

TEST_CASE("an accept whose prepare threw (the endpoint's constructor) reports the exception's text, and the peer is "
          "refused; the server goes on",
          "[sessions]") {
  server_rig r;
  r.o.session.messages.recv_slots = 200;  // plus 4 control receives: above the queue pair's max_recv_wr (128)
  int ran = 0;
  cv::async_serve(
      r.l,
      [&](cv::session&) -> awaitable<void> {
        ++ran;
        co_return;
      },
      r.o, asio::detached);
  r.loop.run([&]() -> awaitable<void> {
    auto [ec, s] = co_await cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), with_ec);
    INFO(ec.message());
    CHECK(ec == cv::errc::connection_refused);  // the cm_id destroyed before rdma_accept: a REJ
  });
  REQUIRE(r.loop.run_until([&] { return r.ends.size() >= 1; }));
  const cv::session_report failed = r.ends.at(0);
  INFO(failed.reason.message() << ": " << failed.diagnostic);
  CHECK(failed.reason == cv::errc::device_limit_exceeded);
  CHECK(failed.peer.empty());
  // What message_endpoint's constructor threw, not only its error code's message.
  CHECK(failed.diagnostic.rfind("accept: prepare threw: ", 0) == 0);
  CHECK(failed.diagnostic.find("message_options::recv_slots = 200 plus 4 control receives exceeds the queue pair's "
                               "max_recv_wr 128") != std::string::npos);
  CHECK(ran == 0);
}

TEST_CASE("max_sessions: a session destroyed with its loop-pool member's io_context while suspended gives its place "
          "back, so the next peer is served",
          "[sessions]") {
  server_rig r;
  r.o.max_sessions = 1;
  // Re-made in place below: the server keeps a pointer to this storage.
  std::optional<cv::loop_pool> pool(std::in_place, r.l.get_device(), cv::loop_pool_options{.loops = 1});
  pool->run();
  r.o.pool = &*pool;
  std::atomic<int> started{0};
  cv::async_serve(
      r.l,
      [&](cv::session& s) -> awaitable<void> {
        ++started;
        co_await reverse_server(s);
      },
      r.o, asio::detached);
  r.loop.run([&]() -> awaitable<void> {
    auto [ec1, first] = co_await cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), with_ec);
    REQUIRE_FALSE(ec1);
    asio::steady_timer t(r.ex);
    for (int i = 0; i < 1000 && started == 0; ++i) {
      t.expires_after(std::chrono::milliseconds(10));
      co_await t.async_wait(asio::use_awaitable);
    }
    REQUIRE(started == 1);  // suspended in async_receive_request: the first peer sends nothing
    // The member's io_context goes with the pool, the session's frame with it: it never reaches its end. A pool
    // made again in the same place serves the next accept (nothing runs on this loop in between).
    pool.reset();
    pool.emplace(r.l.get_device(), cv::loop_pool_options{.loops = 1});
    pool->run();
    std::optional<cv::error_code> second_connected;
    std::optional<cv::session> second;
    cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), [&](cv::error_code ec, cv::session s) {
      second_connected = ec;
      second.emplace(std::move(s));
    });
    for (int i = 0; i < 1000 && !second_connected; ++i) {
      t.expires_after(std::chrono::milliseconds(10));
      co_await t.async_wait(asio::use_awaitable);
    }
    // Without its place back the server stays at the cap: the request waits in the backlog.
    REQUIRE(second_connected);
    REQUIRE_FALSE(*second_connected);
    const std::byte one[1] = {std::byte{9}};
    cv::inbound_message reply = co_await second->endpoint().async_call(std::span(one), asio::use_awaitable);
    CHECK(reply.size() == 1);
    reply.release();
    CHECK(started == 2);  // answered by the second session's handler
    co_await second->async_close(with_ec);
    co_await first.async_close(with_ec);
  });
  REQUIRE(r.loop.run_until([&] { return r.ends.size() == 1; }));  // the second session only: the first never ended
  pool.reset();
}

TEST_CASE("operations of a session its peer closed fail with connection_reset, the session's cause, not the flush",
          "[sessions]") {
  server_rig r;
  // One call answered, then the server's handler returns: the session is closed in order (disconnected).
  auto handler = [](cv::session& s) -> awaitable<void> {
    cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
    co_await s.endpoint().async_reply(req, req.bytes(), asio::use_awaitable);
  };
  cv::async_serve(r.l, handler, r.o, asio::detached);
  r.loop.run([&]() -> awaitable<void> {
    auto [ec, s] = co_await cv::async_connect_session(r.ex, address, r.l.local_port(), small_sessions(), with_ec);
    REQUIRE_FALSE(ec);
    const std::byte one[1] = {std::byte{4}};
    cv::inbound_message reply = co_await s.endpoint().async_call(std::span(one), asio::use_awaitable);
    reply.release();
    // Pending when the peer's disconnect arrives (or started after: then it fails with the same at once).
    auto [pending, m] = co_await s.endpoint().async_receive_message(with_ec);
    INFO(pending.message());
    CHECK(pending == cv::errc::connection_reset);
    CHECK(s.error() == cv::errc::connection_reset);
    CHECK(s.endpoint().error() == cv::errc::connection_reset);
    auto [later, m2] = co_await s.endpoint().async_call(std::span(one), with_ec);
    INFO(later.message());
    CHECK(later == cv::errc::connection_reset);
    co_await s.async_close(with_ec);
  });
  REQUIRE(r.loop.run_until([&] { return r.ends.size() == 1; }));
  CHECK_FALSE(r.ends.at(0).reason);  // the server's handler returned
}
