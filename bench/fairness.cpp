// bench_fairness: does a busy completion queue let the rest of its io_context run? A 1 ms periodic timer
// shares one io_context (one thread) with a loopback RC pair on one event-driven completion queue, and its
// lateness is measured while the queue is idle and while a stream of RDMA operations keeps it busy.
//
//   bench_fairness [--device NAME] [--duration-ms N] [--size BYTES] [--streams N]
//                  [--max-completions-per-turn N] [--turn-quota-us US] [--json]
//
// The timer is re-armed from its own handler for 1 ms after each wake-up, and lateness = wake-up time −
// deadline (std::chrono::steady_clock): how long an expired timer waits before the loop runs it, i.e.
// how long the completion queue keeps a ready handler waiting. (A schedule of absolute deadlines would
// measure something else once the loop's turn is longer than the period: the backlog of deadlines grows
// by the period every turn, whatever the dispatch does; under emulation one completion's handler costs
// ~200 us, so 32 of them are a 6 ms turn.) The queue's max_completions_per_turn is
// --max-completions-per-turn and its turn_quota --turn-quota-us (default: the library's; 0: no time
// bound). Three modes, each --duration-ms long:
//   idle   the timer alone (the loop's own jitter)
//   read   --streams coroutines `for (;;) co_await qp.async_read(...)` of --size bytes
//   write  --streams chains of completion handlers, each posting the next RDMA write of --size bytes from
//          inside its own completion handler
// The streams stop issuing when the period ends by reading the clock themselves, so the measurement ends
// even when the dispatch never lets the timer run while completions keep coming.
//
// Figures (milliseconds): timer_lateness_{p50,p99,max}_ms_{idle,read,write}; timer_lateness_p99_ms_busy
// = the larger of the read and write p99s; operations_{read,write} = operations completed in the period
// (that the stream ran), and timer_wakeups_in_period_{idle,read,write} = how many of the timer's wake-ups
// happened before the period ended (the rest were held back until the stream stopped).
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include <coverbs_support/json_output.hpp>
#include <coverbs_support/statistics.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using clock_type = std::chrono::steady_clock;
using asio::awaitable;

struct config {
  std::string device;
  int duration_ms = 3000;
  std::size_t size = 8;
  int streams = 1;
  unsigned max_completions_per_turn = cv::completion_queue_options{}.max_completions_per_turn;
  long turn_quota_us = cv::completion_queue_options{}.turn_quota.count();
  bool json = false;
};

constexpr const char* usage_text =
    "[--device NAME] [--duration-ms N] [--size BYTES] [--streams N] [--max-completions-per-turn N] "
    "[--turn-quota-us US] [--json]";

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", "bench_fairness"};
  bench::describe(app, usage_text,
                  "Lateness of a 1 ms periodic timer on the same io_context as a busy completion queue (idle, RDMA "
                  "read stream, write-from-handler stream); see the source's header for each figure.");
  app.add_option("--device", c.device);
  app.add_option("--duration-ms", c.duration_ms)->transform(command_line::count(100, 600'000));
  app.add_option("--size", c.size)->transform(command_line::size(1, 1u << 20));
  app.add_option("--streams", c.streams)->transform(command_line::count(1, 64));
  app.add_option("--max-completions-per-turn", c.max_completions_per_turn)
      ->transform(command_line::count(1, 1'000'000));
  app.add_option("--turn-quota-us", c.turn_quota_us)->check(CLI::Range(0L, 1'000'000L));
  app.add_flag("--json", c.json);
  bench::parse(app, argc, argv);
  return c;
}

/// The 1 ms timer of one period: a sample per deadline in (start, end].
class periodic_timer {
public:
  periodic_timer(asio::io_context& io, clock_type::time_point start, clock_type::time_point end)
      : timer_(io), deadline_(start), end_(end) {}

  void start() { arm(); }
  const std::vector<double>& lateness_ms() const noexcept { return late_; }
  int wakeups_in_period() const noexcept { return in_period_; }

private:
  void arm() {
    deadline_ = std::max(deadline_, clock_type::now()) + std::chrono::milliseconds(1);
    if (deadline_ > end_) return;
    timer_.expires_at(deadline_);
    timer_.async_wait([this](cv::error_code ec) {
      if (ec) throw cv::system_error(ec, "steady_timer");
      const auto now = clock_type::now();
      late_.push_back(std::chrono::duration<double, std::milli>(now - deadline_).count());
      if (now < end_) ++in_period_;
      arm();
    });
  }

  asio::steady_timer timer_;
  clock_type::time_point deadline_, end_;
  std::vector<double> late_;
  int in_period_ = 0;
};

/// A loopback RC pair on one event-driven completion queue; `a` reads from and writes to `b`'s buffer.
struct pair {
  cv::device dev;
  cv::protection_domain pd;
  cv::completion_queue cq;
  cv::queue_pair a, b;
  std::vector<std::byte> bytes;
  cv::memory_region mr;

  pair(asio::io_context& io, const config& c)
      : dev(cv::device::open(c.device)), pd(dev), cq(io, dev, cq_options(c)), a(pd, cq, qp_options(c)),
        b(pd, cq, qp_options(c)), bytes(2 * c.size * static_cast<std::size_t>(c.streams)),
        mr(pd, bytes, cv::access::local_write | cv::access::remote_write | cv::access::remote_read) {
    cv::connect_pair(a, b);
  }
  static cv::completion_queue_options cq_options(const config& c) {
    cv::completion_queue_options o;
    o.max_completions_per_turn = c.max_completions_per_turn;
    o.turn_quota = std::chrono::microseconds(c.turn_quota_us);
    return o;
  }
  static cv::queue_pair_options qp_options(const config& c) {
    cv::queue_pair_options o;
    o.max_send_wr = static_cast<std::uint32_t>(c.streams + 8);
    o.max_recv_wr = 8;
    return o;
  }
  /// Stream `i`'s local half and the remote half it targets.
  cv::registered_span local(const config& c, int i) const {
    return cv::span_of(mr, 2 * c.size * static_cast<std::size_t>(i), c.size);
  }
  cv::remote_key remote(const config& c, int i) const {
    return cv::remote_key_of(mr).slice(2 * c.size * static_cast<std::size_t>(i) + c.size, c.size);
  }
};

/// read mode: `for (;;) co_await async_read` until the period ends.
awaitable<void> read_stream(pair& p, const config& c, int i, clock_type::time_point end, std::uint64_t& ops) {
  for (;;) {
    co_await p.a.async_read(p.local(c, i), p.remote(c, i), asio::use_awaitable);
    ++ops;
    if (clock_type::now() >= end) co_return;
  }
}

/// write mode: each completion handler posts the next write until the period ends.
struct write_stream {
  pair& p;
  const config& c;
  int i;
  clock_type::time_point end;
  std::uint64_t& ops;

  void post() {
    p.a.async_write(p.local(c, i), p.remote(c, i), [this](cv::error_code ec, std::size_t) {
      if (ec) throw cv::system_error(ec, "RDMA write");
      ++ops;
      if (clock_type::now() < end) post();
    });
  }
};

struct mode_result {
  std::vector<double> late;
  int in_period = 0;
  std::uint64_t ops = 0;
};

mode_result run_mode(asio::io_context& io, pair& p, const config& c, const std::string& mode) {
  mode_result r;
  const auto start = clock_type::now(), end = start + std::chrono::milliseconds(c.duration_ms);
  periodic_timer timer(io, start, end);
  timer.start();
  std::vector<write_stream> writers;
  writers.reserve(static_cast<std::size_t>(c.streams));
  std::exception_ptr error;
  for (int i = 0; i < c.streams; ++i) {
    if (mode == "read")
      asio::co_spawn(io, read_stream(p, c, i, end, r.ops), [&error](std::exception_ptr e) {
        if (e && !error) error = e;
      });
    else if (mode == "write")
      writers.push_back(write_stream{p, c, i, end, r.ops});
  }
  for (auto& w : writers)
    w.post();
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  r.late = timer.lateness_ms();
  r.in_period = timer.wakeups_in_period();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  try {
    asio::io_context io(1);  // one thread: the timer, the queue and the streams share it
    pair p(io, c);
    const char* modes[] = {"idle", "read", "write"};
    mode_result r[3];
    for (int m = 0; m < 3; ++m)
      r[m] = run_mode(io, p, c, modes[m]);
    double p50[3], p99[3], max[3];
    for (int m = 0; m < 3; ++m) {
      p50[m] = statistics::median(r[m].late);
      p99[m] = statistics::percentile(r[m].late, 99);
      max[m] = r[m].late.empty() ? 0 : *std::max_element(r[m].late.begin(), r[m].late.end());
    }
    const double busy = std::max(p99[1], p99[2]);
    if (c.json) {
      const auto r3 = [](double x) { return json_output::rounded(x, 3); };
      json_output::json::object o{{"device", p.dev.name()},
                                  {"max_completions_per_turn", c.max_completions_per_turn},
                                  {"turn_quota_us", c.turn_quota_us},
                                  {"duration_ms", c.duration_ms},
                                  {"size", c.size},
                                  {"streams", c.streams}};
      for (int m = 0; m < 3; ++m) {
        const std::string mode = modes[m];
        o["timer_lateness_p50_ms_" + mode] = r3(p50[m]);
        o["timer_lateness_p99_ms_" + mode] = r3(p99[m]);
        o["timer_lateness_max_ms_" + mode] = r3(max[m]);
        o["timer_wakeups_in_period_" + mode] = r[m].in_period;
      }
      o["operations_read"] = r[1].ops;
      o["operations_write"] = r[2].ops;
      o["timer_lateness_p99_ms_busy"] = r3(busy);
      json_output::print(o);
    } else {
      std::printf("device %s, 1 ms timer for %d ms per mode, %zu-byte operations, %d stream(s)\n", p.dev.name().c_str(),
                  c.duration_ms, c.size, c.streams);
      std::printf("  mode    lateness p50 ms    p99 ms     max ms   wake-ups in period   operations\n");
      for (int m = 0; m < 3; ++m)
        std::printf("  %-6s %14.3f %9.3f %10.3f %20d %12llu\n", modes[m], p50[m], p99[m], max[m], r[m].in_period,
                    static_cast<unsigned long long>(r[m].ops));
      std::printf("  timer_lateness_p99_ms_busy %.3f\n", busy);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fairness: %s\n", e.what());
    return 1;
  }
  return 0;
}
