// Fair completion dispatch on a real device (rxe0 in the Soft-RoCE guest): a saturating RDMA stream on a
// loop must not keep timers, a lease's time-to-live or io_context::stop() from running. On rxe the next
// completion is usually in the queue by the time a handler returns, so a dispatch turn that drained the
// queue until empty never ended: a 300 ms timer fired after about 5 s and a 300 ms lease stayed usable.
//
// The bounds below are seconds, not microseconds: they tell "the timer ran between batches" from "the
// timer waited for the stream", with room for a slow emulated guest. Speed figures are in
// bench/fairness.cpp.
#include <coverbs/window_pool.hpp>

#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <algorithm>
#include <functional>
#include <map>
#include <vector>
#include <thread>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using asio::use_awaitable;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test::rc_pair;
using test::test_buffer;

namespace {

constexpr auto region_rights = cv::access::local_write | cv::access::remote_read | cv::access::remote_write |
                               cv::access::mw_bind;
constexpr auto tuple = asio::as_tuple(use_awaitable);

/// The completion-queue modes a stream can run under: event-driven, adaptive, busy-polling.
cv::completion_queue_options mode(int i) {
  cv::completion_queue_options o;
  if (i == 1) o.spin = std::chrono::microseconds(50);
  if (i == 2) o.spin = cv::completion_queue_options::spin_forever;
  return o;
}
const char* mode_name(int i) { return i == 0 ? "event-driven" : i == 1 ? "adaptive" : "busy-polling"; }

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

/// A stream of RDMA writes from a's buffer into b's, each posted from the previous one's completion
/// handler (a plain callback: no coroutine, no post in between), until `stop` or `limit` writes.
struct write_stream {
  write_stream(cv::queue_pair& q, cv::registered_span f, cv::remote_key t, std::size_t n)
      : qp(q), from(f), to(t), limit(n) {}
  cv::queue_pair& qp;
  cv::registered_span from;
  cv::remote_key to;
  std::size_t limit;
  bool stop = false;
  std::size_t done = 0;
  cv::error_code error;
  bool finished = false;

  void start() { next(); }
  void next() {
    if (stop || done == limit) {
      finished = true;
      return;
    }
    qp.async_write(from, to, [this](cv::error_code ec, std::size_t) {
      if (ec) {
        error = ec;
        finished = true;
        return;
      }
      ++done;
      next();
    });
  }
};

}  // namespace

TEST_CASE("a lease expires at its time-to-live while a tight read loop runs through its key", "[fairness][lease]") {
  const int m = GENERATE(0, 1, 2);
  INFO("completion queue: " << mode_name(m));
  rc_pair p({}, mode(m));
  test_buffer region(p.pd, 1 << 16, region_rights), peer(p.pd, 4096);
  cv::window_pool pool(p.pd);
  const auto ttl = milliseconds(300);
  p.run([&]() -> awaitable<void> {
    cv::window_lease lease = co_await pool.async_lease(p.a, region.mr, {0, 4096}, cv::access::remote_read, ttl);
    const auto key = lease.key();
    REQUIRE(lease.expires_at());
    const auto expires = *lease.expires_at();  // the time-to-live runs from the grant
    const auto start = clock_type::now();
    // An ordinary timer on the same loop, due with the lease.
    asio::steady_timer timer(p.io, ttl);
    double timer_fired_ms = -1;
    timer.async_wait([&](cv::error_code) { timer_fired_ms = ms_since(start); });
    // The stream: reads through the lease's key back to back, for up to 20 s on its own.
    std::size_t reads = 0;
    cv::error_code ended;
    while (ms_since(start) < 20'000) {
      auto [ec, n] = co_await p.b.async_read(peer.span(0, 64), key.slice(0, 64), tuple);
      if (ec) {
        ended = ec;
        break;
      }
      ++reads;
    }
    const auto ended_at = clock_type::now();
    const double ended_ms = ms_since(start);
    // The timer may be due a moment after the lease (it was set later): give it its turn.
    while (timer_fired_ms < 0 && ms_since(start) < 5'000) {
      asio::steady_timer tick(p.io, milliseconds(1));
      co_await tick.async_wait(use_awaitable);
    }
    INFO("reads before the key died: " << reads << ", stream ended after " << ended_ms << " ms, timer fired after "
                                        << timer_fired_ms << " ms");
    CHECK(reads > 0);
    CHECK(ended == cv::wc_errc::rem_access_err);  // the key died under the stream
    CHECK(ended_at >= expires);                   // never early
    CHECK(ended_ms < 2'000);                      // unfair dispatch: about 5,000 ms
    CHECK(timer_fired_ms >= 300);
    CHECK(timer_fired_ms < 2'000);
    CHECK_FALSE(lease.active());
  });
  CHECK(p.cq.stats().yields > 0);  // the stream filled turns, and each yielded
}

TEST_CASE("a write-from-handler stream is cancelled by a timer long before it would end", "[fairness][cancel]") {
  const int m = GENERATE(0, 1, 2);
  INFO("completion queue: " << mode_name(m));
  rc_pair p({}, mode(m));
  test_buffer src(p.pd, 4096), dst(p.pd, 4096);
  // 2,000,000 writes would take minutes even natively on rxe.
  write_stream stream{p.a, src.span(0, 64), dst.key().slice(0, 64), 2'000'000};
  const auto start = clock_type::now();
  double timer_fired_ms = -1;
  asio::steady_timer timer(p.io, milliseconds(200));
  timer.async_wait([&](cv::error_code) {
    timer_fired_ms = ms_since(start);
    stream.stop = true;
  });
  stream.start();
  REQUIRE(p.run_until([&] { return stream.finished; }, std::chrono::seconds(60)));
  INFO("writes: " << stream.done << ", timer fired after " << timer_fired_ms << " ms");
  CHECK_FALSE(stream.error);
  CHECK(stream.done > 0);
  CHECK(stream.done < stream.limit);
  CHECK(timer_fired_ms >= 200);
  CHECK(timer_fired_ms < 2'000);  // unfair dispatch: the stream's whole length
  CHECK(p.cq.stats().yields > 0);
}

TEST_CASE("io_context::stop() returns from run() while a stream is running", "[fairness][stop]") {
  const int m = GENERATE(0, 1, 2);
  INFO("completion queue: " << mode_name(m));
  rc_pair p({}, mode(m));
  test_buffer src(p.pd, 4096), dst(p.pd, 4096);
  write_stream stream{p.a, src.span(0, 64), dst.key().slice(0, 64), 2'000'000};
  // A watchdog on another thread ends the stream after 30 s, so a broken build fails instead of hanging.
  std::atomic<bool> returned{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 300 && !returned; ++i)
      std::this_thread::sleep_for(milliseconds(100));
    if (!returned) p.io.stop();
  });
  const auto start = clock_type::now();
  asio::steady_timer timer(p.io, milliseconds(200));
  timer.async_wait([&](cv::error_code) { p.io.stop(); });
  stream.start();
  p.io.restart();
  p.io.run();  // returns once stop() took effect
  const double returned_ms = ms_since(start);
  returned = true;
  watchdog.join();
  INFO("run() returned after " << returned_ms << " ms, " << stream.done << " writes done");
  CHECK(stream.done > 0);
  CHECK_FALSE(stream.finished);  // the stream was still running
  CHECK(returned_ms < 2'000);    // unfair dispatch: never, or only when the watchdog stopped it
  // Finish cleanly: stop the stream and let the last write complete.
  stream.stop = true;
  REQUIRE(p.run_until([&] { return stream.finished; }));
}

TEST_CASE("a dispatch turn handles at most max_completions_per_turn completions", "[fairness][turn]") {
  const int m = GENERATE(0, 1, 2);
  INFO("completion queue: " << mode_name(m));
  cv::completion_queue_options o = mode(m);
  o.max_completions_per_turn = 4;
  rc_pair p({}, o);
  test_buffer src(p.pd, 4096), dst(p.pd, 4096);
  // A probe handler that re-posts itself counts the loop's turns; each completion records the count it
  // saw, so completions that ran between the same two probes ran in one turn of the queue.
  std::size_t probes = 0;
  bool probing = true;
  std::function<void()> probe = [&] {
    ++probes;
    if (probing) asio::post(p.io, probe);
  };
  std::vector<std::size_t> seen;
  for (int i = 0; i < 16; ++i)
    p.a.async_write(src.span(0, 8), dst.key().slice(0, 8), [&](cv::error_code ec, std::size_t) {
      CHECK_FALSE(ec);
      seen.push_back(probes);
    });
  // All 16 completions are in the queue before its first turn runs.
  std::this_thread::sleep_for(milliseconds(300));
  asio::post(p.io, probe);
  REQUIRE(p.run_until([&] { return seen.size() == 16; }));
  probing = false;
  std::map<std::size_t, int> per_turn;
  for (auto s : seen)
    ++per_turn[s];
  int most = 0;
  for (auto [turn, n] : per_turn)
    most = std::max(most, n);
  INFO("turns used: " << per_turn.size());
  CHECK(most <= 4);  // unfair dispatch: all 16 in one turn
  CHECK(p.cq.stats().completions == 16);
  CHECK(p.cq.stats().yields >= 3);
  CHECK(p.cq.poll() == 0);  // nothing left behind
}

TEST_CASE("a bound of zero completions per turn is refused", "[fairness][options]") {
  cv::device dev = cv::device::open();
  asio::io_context io;
  cv::completion_queue_options o;
  o.max_completions_per_turn = 0;
  try {
    cv::completion_queue cq(io, dev, o);
    FAIL("a completion queue with max_completions_per_turn = 0 was created");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errno_code(EINVAL));
    CHECK_THAT(e.what(), Catch::Contains("max_completions_per_turn must be at least 1"));
  }
}
