// The RC data path on a real device (rxe0 in the Soft-RoCE guest): every operation, errors, flushes,
// credits, cancellation, executors, and composition with other Asio I/O.
#include <coverbs/queue_pair.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using asio::use_awaitable;
using namespace boost::asio::experimental::awaitable_operators;
using test::completion;
using test::rc_pair;
using test::test_buffer;

TEST_CASE("send and receive deliver the bytes, with and without immediate data", "[qp][send]") {
  rc_pair p;
  test_buffer out(p.pd, 4096), in(p.pd, 4096);
  out.fill('s');
  completion<cv::received> r1, r2;
  p.b.async_recv(in.span(0, 1000), r1.handler());
  p.b.async_recv(in.span(1000, 1000), r2.handler());
  completion<std::size_t> s1, s2;
  p.a.async_send(out.span(0, 100), s1.handler());
  p.a.async_send_with_imm(out.span(0, 200), 0xC0FFEE, s2.handler());
  REQUIRE(p.run_until([&] { return r1.done() && r2.done() && s1.done() && s2.done(); }));
  CHECK_FALSE(*s1.ec);
  CHECK(s1.value == 100);
  CHECK_FALSE(*s2.ec);
  CHECK(s2.value == 200);
  CHECK_FALSE(*r1.ec);
  CHECK(r1.value.bytes == 100);
  CHECK_FALSE(r1.value.imm);
  CHECK(in.str(0, 100) == std::string(100, 's'));
  CHECK_FALSE(*r2.ec);
  CHECK(r2.value.bytes == 200);
  REQUIRE(r2.value.imm);
  CHECK(*r2.value.imm == 0xC0FFEEu);
  CHECK(in.str(1000, 200) == std::string(200, 's'));
}

TEST_CASE("write and read move the bytes between registered buffers", "[qp][write][read]") {
  rc_pair p;
  test_buffer local(p.pd, 1 << 16), remote(p.pd, 1 << 16);
  for (std::size_t i = 0; i < local.bytes.size(); ++i)
    local.bytes[i] = std::byte(i * 7);
  p.run([&]() -> awaitable<void> {
    // 64 KiB: larger than the MTU, so the device segments it; 16 B: goes inline.
    {
      const auto got = co_await p.a.async_write(local.span(), remote.key());
      CHECK(got == local.bytes.size());
    }
    CHECK(std::memcmp(local.bytes.data(), remote.bytes.data(), local.bytes.size()) == 0);
    {
      const auto got = co_await p.a.async_write(local.span(100, 16), remote.key().slice(5000, 16));
      CHECK(got == 16);
    }
    CHECK(std::memcmp(local.bytes.data() + 100, remote.bytes.data() + 5000, 16) == 0);

    std::memset(remote.bytes.data(), 'r', 4096);
    {
      const auto got = co_await p.a.async_read(local.span(0, 4096), remote.key());
      CHECK(got == 4096);
    }
    CHECK(local.str(0, 4096) == std::string(4096, 'r'));
  });
}

TEST_CASE("write with immediate data lands in memory and reports the immediate to the peer's receive", "[qp][write]") {
  rc_pair p;
  test_buffer local(p.pd, 4096), remote(p.pd, 4096), rx(p.pd, 64);
  local.fill('w');
  completion<cv::received> r;
  p.b.async_recv(rx.span(), r.handler());
  completion<std::size_t> w;
  p.a.async_write_with_imm(local.span(0, 512), remote.key(), 42, w.handler());
  REQUIRE(p.run_until([&] { return r.done() && w.done(); }));
  CHECK_FALSE(*w.ec);
  CHECK_FALSE(*r.ec);
  CHECK(r.value.rdma_with_imm);
  REQUIRE(r.value.imm);
  CHECK(*r.value.imm == 42u);
  CHECK(remote.str(0, 512) == std::string(512, 'w'));
}

TEST_CASE("fetch-add and compare-swap return the old value; a failed compare leaves the target", "[qp][atomic]") {
  rc_pair p;
  test_buffer result(p.pd, 8), target(p.pd, 64);
  std::uint64_t v = 100;
  std::memcpy(target.bytes.data() + 8, &v, 8);
  const cv::remote_key word = target.key().slice(8, 8);
  p.run([&]() -> awaitable<void> {
    {
      const auto got = co_await p.a.async_fetch_add(result.span(), word, 5);
      CHECK(got == 100);
    }
    {
      const auto got = co_await p.a.async_fetch_add(result.span(), word, 1);
      CHECK(got == 105);
    }
    std::uint64_t now = 0;
    std::memcpy(&now, target.bytes.data() + 8, 8);
    CHECK(now == 106);

    {
      const auto got = co_await p.a.async_compare_swap(result.span(), word, 999, 7);
      CHECK(got == 106);
    }
    std::memcpy(&now, target.bytes.data() + 8, 8);
    CHECK(now == 106);
    {
      const auto got = co_await p.a.async_compare_swap(result.span(), word, 106, 7);
      CHECK(got == 106);
    }
    std::memcpy(&now, target.bytes.data() + 8, 8);
    CHECK(now == 7);
    std::uint64_t in_result = 0;
    std::memcpy(&in_result, result.bytes.data(), 8);
    CHECK(in_result == 106);  // the old value is also in the local result buffer
  });
}

TEST_CASE("zero-length write and read complete successfully with zero bytes", "[qp][write][read]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  p.run([&]() -> awaitable<void> {
    {
      const auto got = co_await p.a.async_write(local.span(0, 0), remote.key());
      CHECK(got == 0);
    }
    {
      const auto got = co_await p.a.async_read(local.span(0, 0), remote.key());
      CHECK(got == 0);
    }
  });
  CHECK_FALSE(p.a.error());
}

TEST_CASE("a wrong rkey fails with rem_access_err; later and outstanding operations are flushed, none hangs",
          "[qp][errors]") {
  rc_pair p;
  test_buffer local(p.pd, 4096), remote(p.pd, 4096);
  cv::remote_key bad = remote.key();
  bad.rkey ^= 0x5a5a00;
  completion<std::size_t> w_bad, w_after[4];
  completion<cv::received> recv;
  p.a.async_recv(local.span(0, 64), recv.handler());  // outstanding receive: flushed too
  p.a.async_write(local.span(0, 64), bad, w_bad.handler());
  for (auto& w : w_after)
    p.a.async_write(local.span(0, 64), remote.key(), w.handler());
  REQUIRE(p.run_until([&] {
    return w_bad.done() && recv.done() &&
           std::all_of(std::begin(w_after), std::end(w_after), [](auto& w) { return w.done(); });
  }));
  CHECK(*w_bad.ec == cv::wc_errc::rem_access_err);
  CHECK(*recv.ec == cv::wc_errc::wr_flush_err);
  for (auto& w : w_after)
    CHECK(*w.ec == cv::wc_errc::wr_flush_err);
  CHECK(p.a.error() == cv::wc_errc::rem_access_err);
  CHECK(p.a.state() == IBV_QPS_ERR);

  // An operation started after the error completes at once with wr_flush_err, through the handler.
  completion<std::size_t> later;
  p.a.async_write(local.span(0, 8), remote.key(), later.handler());
  CHECK_FALSE(later.done());
  REQUIRE(p.run_until([&] { return later.done(); }));
  CHECK(*later.ec == cv::wc_errc::wr_flush_err);
  CHECK(p.cq.outstanding() == 0);
}

TEST_CASE("a receive posted after the device moved the queue pair to the error state, before coverbs read the error, "
          "is flushed too",
          "[qp][errors]") {
  // rxe flushes a queue pair's receives when it enters the error state; one posted later (a user-space post
  // rings no doorbell) waits for another transition. Here the device fails the queue pair (a NAK) while the
  // loop is not running, and a receive is posted before the loop reads the error: coverbs, learning of the
  // error, moves the queue pair to the error state again, which flushes it.
  rc_pair p;
  test_buffer local(p.pd, 4096), remote(p.pd, 4096);
  cv::remote_key bad = remote.key();
  bad.rkey ^= 0x5a5a00;
  completion<std::size_t> w_bad;
  completion<cv::received> before, after;
  p.a.async_recv(local.span(0, 64), before.handler());
  p.a.async_write(local.span(0, 64), bad, w_bad.handler());
  for (int i = 0; i < 500 && p.a.state() != IBV_QPS_ERR; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(p.a.state() == IBV_QPS_ERR);
  CHECK_FALSE(p.a.error());  // not read yet
  p.a.async_recv(local.span(64, 64), after.handler());
  REQUIRE(p.run_until([&] { return w_bad.done() && before.done() && after.done(); }, std::chrono::seconds(5)));
  CHECK(*w_bad.ec == cv::wc_errc::rem_access_err);
  CHECK(*before.ec == cv::wc_errc::wr_flush_err);
  CHECK(*after.ec == cv::wc_errc::wr_flush_err);
  CHECK(p.cq.outstanding() == 0);
}

TEST_CASE("with the default retry count, a write to a queue pair that is gone fails with retry_exc_err",
          "[qp][errors][retry]") {
  // The peer's queue pair is destroyed without a word: its packets are dropped by the responder's device,
  // so the requester retries. rxe takes a retry count of 7 as "retry forever"; coverbs' default (6) must
  // end in retry_exc_err after its retries x the ACK timeout (~0.5 s at timeout 14), not never.
  rc_pair p;
  CHECK(cv::queue_pair_options{}.retry_cnt == 6);
  test_buffer local(p.pd, 4096), remote(p.pd, 4096);
  { cv::queue_pair gone = std::move(p.b); }
  completion<std::size_t> w, after;
  p.a.async_write(local.span(0, 64), remote.key(), w.handler());
  p.a.async_write(local.span(0, 64), remote.key(), after.handler());
  // Without a bounded retry count this never completes: the limit turns that into a failure.
  REQUIRE(p.run_until([&] { return w.done() && after.done(); }, std::chrono::seconds(60)));
  CHECK(*w.ec == cv::wc_errc::retry_exc_err);
  CHECK(*after.ec == cv::wc_errc::wr_flush_err);
  CHECK(p.a.error() == cv::wc_errc::retry_exc_err);
}

TEST_CASE("bad requests are refused before posting and the queue pair stays healthy", "[qp][errors]") {
  rc_pair p;
  test_buffer local(p.pd, 4096), remote(p.pd, 4096);
  p.run([&]() -> awaitable<void> {
    auto [e1, n1] = co_await p.a.async_write(local.span(), remote.key().slice(0, 100), asio::as_tuple(use_awaitable));
    CHECK(e1 == cv::errc::remote_range_too_small);
    CHECK(n1 == 0);
    auto [e2, v2] =
        co_await p.a.async_fetch_add(local.span(0, 8), remote.key().slice(4, 8), 1, asio::as_tuple(use_awaitable));
    CHECK(e2 == cv::errc::misaligned_atomic);
    auto [e3, v3] = co_await p.a.async_fetch_add(local.span(0, 4), remote.key(), 1, asio::as_tuple(use_awaitable));
    CHECK(e3 == cv::errc::buffer_too_small);
    (void)v2;
    (void)v3;
    {
      const auto got = co_await p.a.async_write(local.span(0, 128), remote.key());
      CHECK(got == 128);
    }
  });
  CHECK_FALSE(p.a.error());
  CHECK(p.a.state() == IBV_QPS_RTS);
}

TEST_CASE("a burst of ten times the send-queue depth completes through credits, every completion accounted for",
          "[qp][credits]") {
  cv::queue_pair_options o;
  o.max_send_wr = 16;
  rc_pair p(o);
  test_buffer local(p.pd, 4096), remote(p.pd, 160 * 16);
  for (std::size_t i = 0; i < 4096; ++i)
    local.bytes[i] = std::byte(i);
  constexpr int burst = 160;
  std::vector<int> order;
  int failures = 0;
  std::size_t max_waiting = 0;
  for (int i = 0; i < burst; ++i) {
    p.a.async_write(local.span(static_cast<std::size_t>(i), 16),
                    remote.key().slice(static_cast<std::uint64_t>(i) * 16, 16),
                    [&, i](cv::error_code ec, std::size_t n) {
                      if (ec || n != 16) ++failures;
                      order.push_back(i);
                    });
    max_waiting = std::max(max_waiting, p.a.sends_waiting());
  }
  CHECK(p.a.sends_outstanding() == 16);
  CHECK(max_waiting == burst - 16);
  REQUIRE(p.run_until([&] { return order.size() == burst; }));
  CHECK(failures == 0);
  CHECK(std::is_sorted(order.begin(), order.end()));  // FIFO
  for (int i = 0; i < burst; ++i)
    CHECK(std::memcmp(remote.bytes.data() + i * 16, local.bytes.data() + i, 16) == 0);
  CHECK(p.a.sends_outstanding() == 0);
  CHECK(p.cq.outstanding() == 0);
}

TEST_CASE("a completion queue shared by many queue pairs drains everything after a single event", "[cq]") {
  boost::asio::io_context rx_io, tx_io;
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue rx_cq(rx_io, dev), tx_cq(tx_io, dev);
  constexpr int pairs = 8;
  cv::queue_pair_options o;
  o.max_send_wr = o.max_recv_wr = 8;
  std::vector<cv::queue_pair> rx, tx;
  for (int i = 0; i < pairs; ++i) {
    rx.emplace_back(pd, rx_cq, o);
    tx.emplace_back(pd, tx_cq, o);
    cv::connect_pair(rx.back(), tx.back());
  }
  test_buffer buf(pd, 4096);
  int received = 0;
  for (auto& q : rx)
    q.async_recv(buf.span(0, 64), [&](cv::error_code ec, cv::received r) { received += (!ec && r.bytes == 8); });
  rx_io.poll();  // arms the receive queue: one event will follow the first completion
  REQUIRE(rx_cq.stats().arms == 1);
  int sent = 0;
  for (auto& q : tx)
    q.async_send(buf.span(1024, 8), [&](cv::error_code ec, std::size_t) { sent += !ec; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (sent < pairs && std::chrono::steady_clock::now() < deadline) {
    tx_io.restart();
    tx_io.run_for(std::chrono::milliseconds(10));
  }
  REQUIRE(sent == pairs);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // every receive has landed in rx_cq by now
  rx_io.restart();
  // The one readiness handler, then the dispatch turns it posts (max_completions_per_turn and turn_quota bound a
  // turn, fairness): however many turns the 8 completions take, no second event is needed.
  rx_io.poll();
  CHECK(received == pairs);
  CHECK(rx_cq.stats().events == 1);
  CHECK(rx_cq.stats().completions == pairs);
  CHECK(rx_cq.outstanding() == 0);
}

TEST_CASE("the handler runs on its associated executor and is never called inside the initiating function",
          "[qp][executor]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  auto strand = asio::make_strand(p.io);
  bool in_strand = false, called = false;
  p.a.async_write(local.span(0, 8), remote.key(), asio::bind_executor(strand, [&](cv::error_code ec, std::size_t) {
                    in_strand = strand.running_in_this_thread();
                    called = !ec;
                  }));
  CHECK_FALSE(called);

  // A request refused before posting (the queue pair is not connected) completes through the handler too.
  cv::queue_pair unconnected(p.pd, p.cq);
  completion<std::size_t> refused;
  unconnected.async_write(local.span(0, 8), remote.key(), refused.handler());
  CHECK_FALSE(refused.done());
  REQUIRE(p.run_until([&] { return called && refused.done(); }));
  CHECK(in_strand);
  CHECK(*refused.ec == cv::errc::queue_pair_not_ready);
}

TEST_CASE("an operation waiting for a credit is cancelled at once; a posted one only terminally, after the flush",
          "[qp][cancel]") {
  cv::queue_pair_options o;
  o.max_send_wr = 1;
  o.rnr_retry = 7;  // infinite: a send without a receive at the peer stays outstanding
  o.retry_cnt = 7;  // on rxe the RNR wait also spends transport retries; 7 is "forever" there
  rc_pair p(o);
  test_buffer buf(p.pd, 64);
  completion<std::size_t> stuck, waiting;
  asio::cancellation_signal stuck_signal, waiting_signal;
  p.a.async_send(buf.span(0, 8), asio::bind_cancellation_slot(stuck_signal.slot(), stuck.handler()));
  p.a.async_send(buf.span(0, 8), asio::bind_cancellation_slot(waiting_signal.slot(), waiting.handler()));
  CHECK(p.a.sends_waiting() == 1);
  p.run_until([] { return false; }, std::chrono::seconds(1));
  CHECK_FALSE(stuck.done());

  waiting_signal.emit(asio::cancellation_type::total);
  REQUIRE(p.run_until([&] { return waiting.done(); }, std::chrono::seconds(5)));
  CHECK(*waiting.ec == asio::error::operation_aborted);
  CHECK_FALSE(stuck.done());

  stuck_signal.emit(asio::cancellation_type::partial);  // not honoured for a posted request
  p.run_until([] { return false; }, std::chrono::seconds(1));
  CHECK_FALSE(stuck.done());

  stuck_signal.emit(asio::cancellation_type::terminal);
  REQUIRE(p.run_until([&] { return stuck.done(); }));
  CHECK(*stuck.ec == asio::error::operation_aborted);
  CHECK(p.a.state() == IBV_QPS_ERR);
  CHECK(p.a.error() == asio::error::operation_aborted);
}

TEST_CASE("destroying a queue pair with operations outstanding flushes them to their handlers", "[qp][lifetime]") {
  rc_pair p;
  test_buffer buf(p.pd, 64);
  completion<cv::received> r1, r2;
  cv::queue_pair peer(p.pd, p.cq);
  {
    cv::queue_pair q(p.pd, p.cq);
    cv::connect_pair(q, peer);
    q.async_recv(buf.span(), r1.handler());
    q.async_recv(buf.span(), r2.handler());
    p.io.restart();
    p.io.poll();
    REQUIRE(p.cq.outstanding() == 2);
  }
  CHECK_FALSE(r1.done());  // handlers are posted, not run inside the destructor
  REQUIRE(p.run_until([&] { return r1.done() && r2.done(); }));
  CHECK(*r1.ec == cv::wc_errc::wr_flush_err);
  CHECK(*r2.ec == cv::wc_errc::wr_flush_err);
  CHECK(p.cq.outstanding() == 0);
}

TEST_CASE("two coroutines share one loop with an Asio timer and a TCP loopback socket", "[qp][compose]") {
  rc_pair p;
  test_buffer local(p.pd, 4096), remote(p.pd, 4096), rx(p.pd, 4096);
  int rdma_rounds = 0, messages = 0;
  bool timer_fired = false, tcp_done = false;

  auto rdma_writer = [&]() -> awaitable<void> {
    for (int i = 0; i < 50; ++i) {
      local.bytes[0] = std::byte(i);
      co_await p.a.async_write(local.span(0, 256), remote.key());
      CHECK(remote.bytes[0] == std::byte(i));
      ++rdma_rounds;
    }
  };
  auto messenger = [&]() -> awaitable<void> {
    for (int i = 0; i < 20; ++i) {
      local.bytes[1000] = std::byte(i);
      // The receive is posted first, then the send; both are awaited together.
      auto [r, sent] = co_await (p.b.async_recv(rx.span(), asio::use_awaitable) &&
                                 p.a.async_send(local.span(1000, 1), asio::use_awaitable));
      CHECK(sent == 1);
      CHECK(r.bytes == 1);
      CHECK(rx.bytes[0] == std::byte(i));
      ++messages;
    }
  };
  auto timer = [&]() -> awaitable<void> {
    asio::steady_timer t(p.io, std::chrono::milliseconds(20));
    co_await t.async_wait(use_awaitable);
    timer_fired = true;
  };
  auto tcp = [&]() -> awaitable<void> {
    asio::ip::tcp::acceptor acceptor(p.io, {asio::ip::make_address("127.0.0.1"), 0});
    asio::ip::tcp::socket client(p.io);
    co_await client.async_connect(acceptor.local_endpoint(), use_awaitable);
    asio::ip::tcp::socket server = co_await acceptor.async_accept(use_awaitable);
    co_await asio::async_write(client, asio::buffer("ping", 4), use_awaitable);
    char got[4];
    co_await asio::async_read(server, asio::buffer(got), use_awaitable);
    tcp_done = std::memcmp(got, "ping", 4) == 0;
  };
  auto rethrow = [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  };
  asio::co_spawn(p.io, rdma_writer(), rethrow);
  asio::co_spawn(p.io, messenger(), rethrow);
  asio::co_spawn(p.io, timer(), rethrow);
  asio::co_spawn(p.io, tcp(), rethrow);
  REQUIRE(p.run_until([&] { return rdma_rounds == 50 && messages == 20 && timer_fired && tcp_done; }));
}

TEST_CASE("adaptive and busy-polling queues complete the same operations", "[cq][spin]") {
  for (auto spin : {std::chrono::nanoseconds(50'000), cv::completion_queue_options::spin_forever}) {
    cv::completion_queue_options co;
    co.spin = spin;
    rc_pair p({}, co);
    test_buffer local(p.pd, 4096), remote(p.pd, 4096);
    p.run([&]() -> awaitable<void> {
      for (int i = 0; i < 100; ++i) {
        const auto got = co_await p.a.async_write(local.span(0, 64), remote.key());
        CHECK(got == 64);
      }
    });
    CHECK(p.cq.stats().completions == 100);
    if (spin == cv::completion_queue_options::spin_forever) CHECK(p.cq.stats().events == 0);
  }
}

TEST_CASE("a completion queue too small for another queue pair is refused up front", "[cq][errors]") {
  boost::asio::io_context io;
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue_options co;
  co.depth = 300;
  cv::completion_queue cq(io, dev, co);
  cv::queue_pair first(pd, cq);  // 128 + 128
  try {
    cv::queue_pair second(pd, cq);
    FAIL("the second queue pair fit");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errc::cq_overcommitted);
  }
  cv::queue_pair_options small;
  small.max_send_wr = small.max_recv_wr = 8;
  CHECK_NOTHROW(cv::queue_pair(pd, cq, small));
}

namespace {
/// The number after "limit of device NAME, " in an exception's text (0 if absent).
std::uint64_t named_limit(const std::string& what) {
  const auto at = what.find("limit of device ");
  if (at == std::string::npos) return 0;
  const auto comma = what.find(", ", at);
  return comma == std::string::npos ? 0 : std::strtoull(what.c_str() + comma + 2, nullptr, 10);
}

/// Runs `make`, which must throw `errc::device_limit_exceeded`; returns the exception's text.
template <class F>
std::string refusal_of(F make) {
  try {
    make();
  } catch (const cv::system_error& e) {
    INFO(e.what());
    CHECK(e.code() == cv::errc::device_limit_exceeded);
    CHECK(e.code() == boost::system::errc::invalid_argument);
    return e.what();
  }
  FAIL("a size above the device's limit was accepted");
  return {};
}
}  // namespace

TEST_CASE("sizes above the device's limits are refused naming the option, the value and the limit",
          "[qp][cq][errors][limits]") {
  boost::asio::io_context io;
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue cq(io, dev);
  cv::queue_pair_options o;
  o.max_send_wr = o.max_recv_wr = 8;
  SECTION("max_inline_data: the limit is found and named, and the named limit works") {
    o.max_inline_data = 1 << 16;
    const std::string what = refusal_of([&] { cv::queue_pair qp(pd, cq, o); });
    INFO(what);
    CHECK(what.find("max_inline_data = 65536") != std::string::npos);
    CHECK(what.find("lower max_inline_data") != std::string::npos);
    const auto limit = named_limit(what);
    CHECK(limit > 0);
    CHECK(limit < 65536);
    o.max_inline_data = static_cast<std::uint32_t>(limit);
    CHECK_NOTHROW(cv::queue_pair(pd, cq, o));
    o.max_inline_data = static_cast<std::uint32_t>(limit + 1);
    CHECK_THROWS_AS(cv::queue_pair(pd, cq, o), cv::system_error);
  }
  SECTION("max_send_sge above max_sge") {
    o.max_send_sge = dev.caps().max_sge + 1;
    const std::string what = refusal_of([&] { cv::queue_pair qp(pd, cq, o); });
    CHECK(what.find("max_send_sge = " + std::to_string(o.max_send_sge)) != std::string::npos);
    CHECK(named_limit(what) == dev.caps().max_sge);
  }
  SECTION("max_rd_atomic above max_qp_init_rd_atom: refused at creation, not as EINVAL at connect()") {
    const auto limit = dev.caps().max_qp_init_rd_atom;
    INFO("max_qp_init_rd_atom " << limit);
    if (limit < 255) {
      o.max_rd_atomic = static_cast<std::uint8_t>(limit + 1);
      CHECK(named_limit(refusal_of([&] { cv::queue_pair qp(pd, cq, o); })) == limit);
    }
  }
  SECTION("a completion queue deeper than max_cqe") {
    cv::completion_queue_options co;
    co.depth = static_cast<int>(dev.caps().max_cqe) + 1;
    const std::string what = refusal_of([&] { cv::completion_queue big(io, dev, co); });
    CHECK(what.find("depth = " + std::to_string(co.depth)) != std::string::npos);
    CHECK(named_limit(what) == dev.caps().max_cqe);
  }
}

TEST_CASE("a send, write or read above the port's max_msg_sz is refused before posting; the queue pair stays healthy",
          "[qp][errors][limits]") {
  rc_pair p;
  const std::size_t limit = p.a.max_message_size();
  INFO("max_message_size " << limit);
  REQUIRE(limit > 0);
  REQUIRE(limit <= (std::size_t{1} << 31));
  REQUIRE(limit < (std::size_t{64} << 20));  // rxe: 8 MiB; the buffers below are twice this
  test_buffer local(p.pd, limit + 4096), remote(p.pd, limit + 4096);
  p.run([&]() -> awaitable<void> {
    constexpr auto tuple = asio::as_tuple(use_awaitable);
    auto [e1, n1] = co_await p.a.async_write(local.span(0, limit + 1), remote.key(), tuple);
    CHECK(e1 == cv::errc::message_too_long);
    CHECK(n1 == 0);
    auto [e2, n2] = co_await p.a.async_read(local.span(0, limit + 1), remote.key(), tuple);
    CHECK(e2 == cv::errc::message_too_long);
    auto [e3, n3] = co_await p.a.async_send(local.span(0, limit + 1), tuple);
    CHECK(e3 == cv::errc::message_too_long);
    CHECK(cv::error_code(cv::errc::message_too_long).message().find("max_msg_sz") != std::string::npos);
    const auto got = co_await p.a.async_write(local.span(0, 128), remote.key());
    CHECK(got == 128);
  });
  CHECK_FALSE(p.a.error());
  CHECK(p.a.state() == IBV_QPS_RTS);
}

TEST_CASE("connect and modify report a refused transition in error_code& without throwing", "[qp][errors][ec]") {
  rc_pair p;  // a and b are in RTS
  cv::error_code ec;
  // RTS -> INIT is no transition the IBA allows: ibv_modify_qp refuses it (EINVAL); nothing is thrown and the
  // queue pair keeps its state.
  p.a.connect(p.b.local_address(), ec);
  CHECK(ec == std::errc::invalid_argument);
  CHECK(p.a.state() == IBV_QPS_RTS);
  CHECK_THROWS_AS(p.a.connect(p.b.local_address()), cv::system_error);
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  p.a.modify(init, IBV_QP_STATE, ec);
  CHECK(ec == std::errc::invalid_argument);
  // A fresh queue pair connects through the error_code& overload; ec is cleared on success.
  cv::queue_pair c(p.pd, p.cq), d(p.pd, p.cq);
  ec = std::make_error_code(std::errc::interrupted);
  cv::connect_pair(c, d, ec);
  CHECK_FALSE(ec);
  CHECK(d.state() == IBV_QPS_RTS);
  cv::connect_pair(c, d, ec);  // again: RTS -> INIT refused for c, d untouched
  CHECK(ec == std::errc::invalid_argument);
  CHECK(c.state() == IBV_QPS_RTS);
  // A valid modify: RTS -> ERR.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  c.modify(err, IBV_QP_STATE, ec);
  CHECK_FALSE(ec);
  CHECK(c.state() == IBV_QPS_ERR);
}

TEST_CASE("use_future from another thread: the initiation is handed to the queue pair's executor", "[qp][future]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  local.fill('f');
  auto work = asio::make_work_guard(p.io);
  std::thread loop([&] { p.io.run(); });  // the loop runs elsewhere; this thread only waits
  // What docs/programming-model.md shows: the operation is started on the object's executor (its
  // objects are used only there), the future is waited on from a thread that is not the loop's.
  std::future<std::size_t> f = asio::co_spawn(
      p.a.get_executor(),
      [&]() -> awaitable<std::size_t> { co_return co_await p.a.async_write(local.span(0, 16), remote.key()); },
      asio::use_future);
  const bool ready = f.wait_for(test::scaled(std::chrono::seconds(30))) == std::future_status::ready;
  work.reset();
  if (!ready) p.io.stop();
  loop.join();
  REQUIRE(ready);
  CHECK(f.get() == 16);
  CHECK(remote.str(0, 16) == std::string(16, 'f'));
}

// --- a cancellation that finds the operation complete (issue: `write || write` killed a healthy queue pair) ---

namespace {
/// Lets the device retire what was posted without running the loop (so nothing polls the completion
/// queue): afterwards one poll takes every completion, in one batch. rxe retires a loopback write in well
/// under a millisecond; half a second leaves room for a slow emulated guest.
void let_device_retire() { std::this_thread::sleep_for(std::chrono::milliseconds(500)); }

/// The queue pair `p.a` is healthy (no error, RTS) and goes on working: a write completes.
void check_healthy(rc_pair& p, test_buffer& local, test_buffer& remote) {
  CHECK_FALSE(p.a.error());
  CHECK(p.a.state() == IBV_QPS_RTS);
  completion<std::size_t> after;
  p.a.async_write(local.span(0, 8), remote.key(), after.handler());
  REQUIRE(p.run_until([&] { return after.done(); }));
  CHECK_FALSE(*after.ec);
}
}  // namespace

TEST_CASE("a terminal cancellation from a handler, on an operation completed in the same batch, does nothing",
          "[qp][cancel][race]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  local.fill('x');
  completion<std::size_t> first, second;
  asio::cancellation_signal second_signal;
  // The first one's handler cancels the second, as `a || b` does: both completions are in one polled batch.
  p.a.async_write(local.span(0, 8), remote.key(), [&](cv::error_code ec, std::size_t n) {
    first.ec = ec;
    first.value = n;
    second_signal.emit(asio::cancellation_type::terminal);
  });
  p.a.async_write(local.span(8, 8), remote.key(), asio::bind_cancellation_slot(second_signal.slot(), second.handler()));
  let_device_retire();  // both retired by the device before any poll
  REQUIRE(p.run_until([&] { return first.done() && second.done(); }));
  CHECK_FALSE(*first.ec);
  CHECK_FALSE(*second.ec);  // it was complete: its real result
  CHECK(second.value == 8);
  check_healthy(p, local, remote);
}

TEST_CASE("a terminal cancellation of an operation whose completion waits in the queue does nothing",
          "[qp][cancel][race]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  completion<std::size_t> w;
  asio::cancellation_signal signal;
  p.a.async_write(local.span(0, 8), remote.key(), asio::bind_cancellation_slot(signal.slot(), w.handler()));
  let_device_retire();  // its completion waits in the queue, not polled: the loop has not run
  signal.emit(asio::cancellation_type::terminal);  // e.g. a timer's `||` between two dispatch turns
  REQUIRE(p.run_until([&] { return w.done(); }));
  CHECK_FALSE(*w.ec);
  CHECK(w.value == 8);
  CHECK_FALSE(p.a.error());
  CHECK(p.a.state() == IBV_QPS_RTS);
}

TEST_CASE("co_await (write || write) leaves the queue pair healthy, round after round", "[qp][cancel][race]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  local.fill('y');
  p.run([&]() -> awaitable<void> {
    for (int round = 0; round < 10; ++round) {
      INFO("round " << round);
      auto r = co_await (p.a.async_write(local.span(0, 8), remote.key(), use_awaitable) ||
                         p.a.async_write(local.span(8, 8), remote.key(), use_awaitable));
      CHECK(r.index() <= 1);
      CHECK_FALSE(p.a.error());
      const std::size_t n = co_await p.a.async_write(local.span(16, 8), remote.key(), use_awaitable);
      CHECK(n == 8);
    }
  });
  CHECK(p.a.state() == IBV_QPS_RTS);
  CHECK(remote.str(0, 8) == std::string(8, 'y'));  // every write lands at the key's start
}

// --- reset and reuse (IBA 10.3.1: ERROR -> RESET -> INIT -> RTR -> RTS) ---

TEST_CASE("a queue pair reset after an error connects again and carries operations; error() is cleared",
          "[qp][reset]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  cv::remote_key bad = remote.key();
  bad.rkey ^= 0x5a5a00;
  completion<std::size_t> failed, flushed;
  p.a.async_write(local.span(0, 8), bad, failed.handler());
  p.a.async_write(local.span(0, 8), remote.key(), flushed.handler());
  REQUIRE(p.run_until([&] { return failed.done() && flushed.done(); }));
  REQUIRE(*failed.ec == cv::wc_errc::rem_access_err);
  REQUIRE(p.a.error() == cv::wc_errc::rem_access_err);
  const std::uint32_t old_psn = p.a.local_address().psn;

  // The input: ibv_modify_qp to RESET through modify(), as a verbs user writes it.
  for (cv::queue_pair* qp : {&p.a, &p.b}) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RESET;
    qp->modify(attr, IBV_QP_STATE);
  }
  CHECK(p.a.state() == IBV_QPS_RESET);
  CHECK_FALSE(p.a.error());
  CHECK(p.a.local_address().psn != old_psn);  // 1 in 2^24 to collide
  cv::connect_pair(p.a, p.b);
  CHECK(p.a.state() == IBV_QPS_RTS);

  local.fill('r');
  completion<std::size_t> again;
  completion<cv::received> got;
  test_buffer inbox(p.pd, 64);
  p.b.async_recv(inbox.span(0, 64), got.handler());
  p.a.async_write(local.span(0, 16), remote.key(), again.handler());
  completion<std::size_t> sent;
  p.a.async_send(local.span(0, 4), sent.handler());
  REQUIRE(p.run_until([&] { return again.done() && got.done() && sent.done(); }));
  CHECK_FALSE(*again.ec);
  CHECK(again.value == 16);
  CHECK(remote.str(0, 16) == std::string(16, 'r'));
  CHECK_FALSE(*sent.ec);
  CHECK_FALSE(*got.ec);
  CHECK(got.value.bytes == 4);
  CHECK_FALSE(p.a.error());

  // reset() is the same transition.
  p.a.reset();
  CHECK(p.a.state() == IBV_QPS_RESET);
}

TEST_CASE("reset is refused while operations are outstanding, and changes nothing", "[qp][reset][errors]") {
  cv::queue_pair_options o;
  o.rnr_retry = 7;  // a send without a receive at the peer stays outstanding
  o.retry_cnt = 7;
  rc_pair p(o);
  test_buffer buf(p.pd, 64);
  completion<std::size_t> stuck;
  p.a.async_send(buf.span(0, 8), stuck.handler());
  p.run_until([] { return false; }, std::chrono::seconds(1));
  REQUIRE_FALSE(stuck.done());
  cv::error_code ec;
  p.a.reset(ec);
  CHECK(ec == boost::system::errc::device_or_resource_busy);
  CHECK(p.a.state() == IBV_QPS_RTS);
  try {
    p.a.reset();
    FAIL("reset() with a send outstanding did not throw");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == boost::system::errc::device_or_resource_busy);
    CHECK(std::string(e.what()).find("1 send and 0 receive requests are still outstanding") != std::string::npos);
  }
  // The stuck send is still served: a receive at the peer lets it complete.
  completion<cv::received> got;
  p.b.async_recv(buf.span(32, 32), got.handler());
  REQUIRE(p.run_until([&] { return stuck.done() && got.done(); }));
  CHECK_FALSE(*stuck.ec);
  CHECK_FALSE(p.a.error());
}

TEST_CASE("a terminal cancellation of an operation whose completion is far back in the queue does nothing",
          "[qp][cancel][race]") {
  // More completions wait in front of it than a polled batch holds (32): the fairness bound of 4 per turn
  // makes such a backlog ordinary under load.
  cv::queue_pair_options o;
  o.max_send_wr = 64;
  rc_pair p(o, [] {
    cv::completion_queue_options co;
    co.depth = 1024;  // two queue pairs: 64 sends and the default receives each
    return co;
  }());
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  constexpr int writes = 40;
  completion<std::size_t> w[writes];
  asio::cancellation_signal last_signal;
  for (int i = 0; i + 1 < writes; ++i)
    p.a.async_write(local.span(0, 8), remote.key(), w[i].handler());
  p.a.async_write(local.span(0, 8), remote.key(),
                  asio::bind_cancellation_slot(last_signal.slot(), w[writes - 1].handler()));
  let_device_retire();  // all 40 wait in the queue: the loop has not run
  last_signal.emit(asio::cancellation_type::terminal);
  REQUIRE(p.run_until([&] { return std::all_of(std::begin(w), std::end(w), [](auto& c) { return c.done(); }); }));
  for (auto& c : w) {
    CHECK_FALSE(*c.ec);
    CHECK(c.calls == 1);
  }
  check_healthy(p, local, remote);
}

// --- a queue pair that is not ready to send ---

TEST_CASE("send-queue operations on a queue pair not yet in RTS are refused before posting, alone or in a turn's list",
          "[qp][errors]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  cv::queue_pair fresh(p.pd, p.cq);  // RESET: never connected
  completion<std::size_t> lone;
  fresh.async_write(local.span(0, 8), remote.key(), lone.handler());
  // Initiated inside a dispatch turn (from a completion handler), two sends go out as one list: rxe refuses a
  // list on a queue pair below RTS with EINVAL and no bad_wr, so they must be refused before posting.
  completion<std::size_t> first, second;
  completion<std::size_t> trigger;
  p.a.async_write(local.span(0, 8), remote.key(), [&](cv::error_code ec, std::size_t n) {
    trigger.handler()(ec, n);
    fresh.async_send(local.span(0, 4), first.handler());
    fresh.async_send(local.span(4, 4), second.handler());
  });
  REQUIRE(p.run_until([&] { return lone.done() && trigger.done() && first.done() && second.done(); },
                      std::chrono::seconds(10)));
  CHECK(*lone.ec == cv::errc::queue_pair_not_ready);
  CHECK(*first.ec == cv::errc::queue_pair_not_ready);
  CHECK(*second.ec == cv::errc::queue_pair_not_ready);
  CHECK(*lone.ec == boost::system::errc::not_connected);
  CHECK(fresh.sends_outstanding() == 0);
  CHECK_FALSE(fresh.error());  // refused, not failed: the queue pair is as healthy as before
  CHECK(std::string(lone.ec->message()).find("connect it first") != std::string::npos);

  // Once connected, sends work and receives are filled; after reset(), sends are refused again.
  cv::queue_pair peer(p.pd, p.cq);
  cv::connect_pair(fresh, peer);
  test_buffer inbox(p.pd, 64);
  completion<cv::received> got;
  fresh.async_recv(inbox.span(0, 64), got.handler());
  completion<std::size_t> sent;
  completion<cv::received> peer_got;
  test_buffer peer_inbox(p.pd, 64);
  peer.async_recv(peer_inbox.span(0, 64), peer_got.handler());
  fresh.async_send(local.span(0, 4), sent.handler());
  completion<std::size_t> peer_sent;
  peer.async_send(local.span(0, 3), peer_sent.handler());
  REQUIRE(p.run_until([&] { return sent.done() && got.done() && peer_got.done() && peer_sent.done(); }));
  CHECK_FALSE(*sent.ec);
  CHECK_FALSE(*got.ec);
  CHECK(got.value.bytes == 3);
  fresh.reset();
  completion<std::size_t> after_reset;
  fresh.async_write(local.span(0, 8), remote.key(), after_reset.handler());
  REQUIRE(p.run_until([&] { return after_reset.done(); }));
  CHECK(*after_reset.ec == cv::errc::queue_pair_not_ready);
}
