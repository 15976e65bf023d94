// Device asynchronous events on a real device (rxe0 in the Soft-RoCE guest, where tests run as root):
// taking veth0 down raises IBV_EVENT_PORT_ERR on rxe0 port 1, and bringing it up IBV_EVENT_PORT_ACTIVE.
// Every case that takes the link down brings it back up (and waits until the port is usable again)
// before it ends, whatever happened, so later cases in this binary work.
#include <coverbs/device_events.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using namespace boost::asio::experimental::awaitable_operators;
using test::completion;
using test::rc_pair;
using test::test_buffer;

namespace {

constexpr auto generous = std::chrono::seconds(90);  // "works" vs "hangs", under emulation

void set_link(bool up) {
  const int rc = std::system(up ? "ip link set veth0 up" : "ip link set veth0 down");
  REQUIRE(rc == 0);
}

/// Brings veth0 back up when the test case ends, and waits until rxe0 port 1 is active with its RoCE v2
/// IPv4-mapped GID back, so the next case can connect queue pairs.
struct link_restorer {
  ~link_restorer() {
    std::system("ip link set veth0 up");
    cv::device dev = cv::device::open();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        if (dev.query_port(1).active() && dev.default_gid(1).value.is_ipv4_mapped()) return;
      } catch (const cv::system_error&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::fprintf(stderr, "device_events_test: rxe0 port 1 did not come back within 60 s\n");
  }
};

/// Waits for the next event of `type`, skipping others (a link change may also raise GID changes).
awaitable<cv::device_event> next_of(cv::device_events& ev, ibv_event_type type) {
  for (;;) {
    cv::device_event e = co_await ev.async_wait_event();
    if (e.type == type) co_return e;
  }
}

}  // namespace

TEST_CASE("a port going down reaches async_wait_event as IBV_EVENT_PORT_ERR, and its return as PORT_ACTIVE",
          "[events][port]") {
  link_restorer restore;
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::device_events ev(loop.io, dev);
  REQUIRE(ev.is_open());
  const cv::device_event down = loop.run(
      [&]() -> awaitable<cv::device_event> {
        set_link(false);
        co_return co_await next_of(ev, IBV_EVENT_PORT_ERR);
      },
      generous);
  CHECK(down.type == IBV_EVENT_PORT_ERR);
  CHECK(down.port == 1);
  CHECK(down.port_event());
  CHECK_FALSE(down.qp_event());
  CHECK(std::string(down.name()) == ibv_event_type_str(IBV_EVENT_PORT_ERR));
  CHECK(down.queue_pairs_failed == 0);  // no queue pairs here
  CHECK(dev.query_port(1).state != IBV_PORT_ACTIVE);

  // Events that arrive while nobody waits are queued; a wait for one completes on the loop, not inside
  // the initiating function.
  set_link(true);
  REQUIRE(loop.run_until([&] { return ev.received() >= 2; }, generous));
  completion<cv::device_event> got;
  ev.async_wait_event(got.handler());
  CHECK(got.calls == 0);
  REQUIRE(loop.run_until([&] { return got.done(); }, generous));
  CHECK_FALSE(*got.ec);
  CHECK(got.value.port == 1);
  const cv::device_event up = got.value.type == IBV_EVENT_PORT_ACTIVE
                                  ? got.value
                                  : loop.run([&] { return next_of(ev, IBV_EVENT_PORT_ACTIVE); }, generous);
  CHECK(up.type == IBV_EVENT_PORT_ACTIVE);
  CHECK(up.port == 1);
  CHECK(ev.dropped() == 0);
}

TEST_CASE("after the port goes down, every outstanding operation of its queue pairs completes with an error, "
          "on the queue pairs' own loop; none hangs",
          "[events][qp]") {
  link_restorer restore;
  rc_pair p;
  test_buffer out(p.pd, 4096), in(p.pd, 4096), remote(p.pd, 1 << 20);
  // The events are read on a loop of their own, on another thread: the flush crosses threads.
  asio::io_context events_io;
  auto guard = asio::make_work_guard(events_io);
  cv::device_events ev(events_io, p.dev);
  std::atomic<bool> port_err{false};
  std::atomic<std::size_t> failed{0};
  ev.async_wait_event([&](cv::error_code ec, cv::device_event e) {
    if (!ec && e.type == IBV_EVENT_PORT_ERR) {
      failed = e.queue_pairs_failed;
      port_err = true;
    }
  });
  std::thread events_thread([&] { events_io.run(); });

  // Receives that no send will ever match, on both queue pairs, and writes posted just before the link
  // goes down (they may still complete successfully; they must complete).
  std::vector<completion<cv::received>> recvs(8);
  for (std::size_t i = 0; i < recvs.size(); ++i)
    (i % 2 ? p.a : p.b).async_recv(in.span(i * 512, 512), recvs[i].handler());
  std::vector<completion<std::size_t>> writes(4);
  for (auto& w : writes)
    p.a.async_write(out.span(), remote.key(), w.handler());
  const auto main_thread = std::this_thread::get_id();
  std::thread::id recv_thread;
  completion<cv::received> watched;
  p.a.async_recv(in.span(0, 8), [&](cv::error_code ec, cv::received r) {
    recv_thread = std::this_thread::get_id();
    watched.handler()(ec, r);
  });
  set_link(false);

  auto all_done = [&] {
    for (auto& r : recvs)
      if (!r.done()) return false;
    for (auto& w : writes)
      if (!w.done()) return false;
    return watched.done();
  };
  const bool finished = p.run_until(all_done, generous);
  guard.reset();
  ev.close();
  events_thread.join();
  REQUIRE(finished);
  CHECK(port_err);
  CHECK(failed >= 2);  // a and b (other queue pairs of this process on rxe0 port 1 count too)
  for (auto& r : recvs) {
    CHECK(r.calls == 1);
    CHECK(*r.ec == cv::wc_errc::wr_flush_err);
  }
  for (auto& w : writes)
    CHECK(w.calls == 1);
  CHECK(*watched.ec == cv::wc_errc::wr_flush_err);
  CHECK(recv_thread == main_thread);
  CHECK(p.a.error() == cv::errc::port_error);
  CHECK(p.b.error() == cv::errc::port_error);
  CHECK(p.a.state() == IBV_QPS_ERR);
  CHECK(p.b.state() == IBV_QPS_ERR);

  // Later operations fail at once, through the handler.
  completion<std::size_t> later;
  p.a.async_send(out.span(0, 8), later.handler());
  REQUIRE(p.run_until([&] { return later.done(); }, generous));
  CHECK(*later.ec == cv::wc_errc::wr_flush_err);
}

TEST_CASE("a pending async_wait_event is cancelled with operation_aborted, and the object keeps working",
          "[events][cancel]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::device_events ev(loop.io, dev);

  asio::cancellation_signal signal;
  completion<cv::device_event> w;
  ev.async_wait_event(asio::bind_cancellation_slot(signal.slot(), w.handler()));
  loop.io.poll();
  CHECK_FALSE(w.done());
  signal.emit(asio::cancellation_type::terminal);
  CHECK(w.calls == 0);  // completes on the loop, not inside emit
  REQUIRE(loop.run_until([&] { return w.done(); }));
  CHECK(*w.ec == asio::error::operation_aborted);

  // The awaitable operators cancel the losing wait.
  const bool timer_won = loop.run([&]() -> awaitable<bool> {
    asio::steady_timer t(loop.io, std::chrono::milliseconds(200));
    auto r = co_await (ev.async_wait_event(asio::use_awaitable) || t.async_wait(asio::use_awaitable));
    co_return r.index() == 1;
  });
  CHECK(timer_won);
  CHECK(ev.is_open());

  // Closing aborts pending waits; later waits fail the same way.
  completion<cv::device_event> a, b;
  ev.async_wait_event(a.handler());
  ev.close();
  ev.async_wait_event(b.handler());
  CHECK(a.calls + b.calls == 0);
  REQUIRE(loop.run_until([&] { return a.done() && b.done(); }));
  CHECK(*a.ec == asio::error::operation_aborted);
  CHECK(*b.ec == asio::error::operation_aborted);
  CHECK_FALSE(ev.is_open());
}

TEST_CASE("one reader per device: a second device_events is refused until the first is gone", "[events]") {
  asio::io_context io;
  cv::device dev = cv::device::open();
  std::optional<cv::device_events> first(std::in_place, io, dev);
  try {
    cv::device_events second(io, dev);
    FAIL("a second device_events on one device was accepted");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errc::device_events_busy);
  }
  first.reset();
  CHECK_NOTHROW(cv::device_events(io, dev));
  // Another open of the device is another context with its own async fd.
  cv::device other = cv::device::open();
  cv::device_events on_other(io, other);
  cv::device_events on_first(io, dev);
}

TEST_CASE("destroying the io_context with a wait pending is clean, whichever object goes first", "[events][lifetime]") {
  cv::device dev = cv::device::open();
  auto token = std::make_shared<int>(0);  // its use count tells whether handlers were destroyed

  SECTION("the device_events object first, then the io_context without running it") {
    auto io = std::make_unique<asio::io_context>();
    {
      cv::device_events ev(*io, dev);
      ev.async_wait_event([token](cv::error_code, cv::device_event) {});
      io->poll();
    }
    io.reset();
  }
  SECTION("the io_context destroys a coroutine that owns the device_events and waits on it") {
    auto io = std::make_unique<asio::io_context>();
    asio::co_spawn(
        *io,
        [&dev, token]() -> awaitable<void> {
          cv::device_events ev(co_await asio::this_coro::executor, dev);
          (void)co_await ev.async_wait_event();
        },
        asio::detached);
    io->run_for(std::chrono::milliseconds(200));
    io.reset();
  }
  SECTION("a pending wait keeps the object's state alive after the object is gone; running the loop ends it") {
    asio::io_context io;
    completion<cv::device_event> w;
    {
      cv::device_events ev(io, dev);
      ev.async_wait_event(w.handler());
      io.poll();
    }
    io.restart();
    io.run();  // returns: nothing is left waiting
    CHECK(*w.ec == asio::error::operation_aborted);
  }
  CHECK(token.use_count() == 1);
  // Every reader is gone: the device takes a new one.
  asio::io_context io;
  CHECK_NOTHROW(cv::device_events(io, dev));
}

TEST_CASE("with a full queue the oldest event is dropped and counted", "[events][port][queue]") {
  link_restorer restore;
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::device_events_options o;
  o.queue_limit = 1;
  cv::device_events ev(loop.io, dev, o);
  set_link(false);
  REQUIRE(loop.run_until([&] { return ev.received() >= 1; }, generous));
  set_link(true);
  REQUIRE(loop.run_until([&] { return ev.received() >= 2; }, generous));
  CHECK(ev.dropped() == ev.received() - 1);
  const cv::device_event last = loop.run([&] { return ev.async_wait_event(asio::use_awaitable); });
  CHECK(last.type != IBV_EVENT_PORT_ERR);  // the first event (PORT_ERR) was dropped
}
