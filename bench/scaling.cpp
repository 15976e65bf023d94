// bench_scaling: does the message rate grow with the number of event loops? Small RDMA writes and small
// sends over --connections loopback RC connections, all on one loop, then split over two loops.
//
//   bench_scaling [--device NAME] [--connections N] [--depth N] [--size BYTES] [--duration-ms N]
//                 [--mode events|spin] [--json]
//
// A loop is an io_context run by one std::thread, with its own completion queue; every connection (two
// queue pairs on that queue) belongs to one loop. With 1 loop it holds all the connections; with 2 loops
// each holds half. Each connection keeps --depth operations of --size bytes in flight from one side (a
// completion handler posts the next); for send the other side keeps receives posted, re-posting each
// from its completion handler. A loop stops issuing when its own clock read says the period is over (it
// does not rely on a timer getting a turn), then waits for what is in flight.
//
// Figures: {write,send}_msg_per_s_{1,2}_loops = operations completed by all loops / wall time from the
// start until the last loop finished; scaling_2_over_1_{write,send} = the 2-loop rate / the 1-loop rate
// (scaling_2_over_1 = the write figure); {write,send}_cpu_fraction_{1,2}_loops = CPU time of each loop
// thread (CLOCK_THREAD_CPUTIME_ID) / the wall time, one number per loop.
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include <coverbs_support/json_output.hpp>

#include <boost/asio/io_context.hpp>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using clock_type = std::chrono::steady_clock;

struct config {
  std::string device;
  int connections = 8;
  int depth = 32;
  std::size_t size = 8;
  int duration_ms = 3000;
  std::string mode = "events";
  bool json = false;
};

constexpr const char* usage_text =
    "[--device NAME] [--connections N] [--depth N] [--size BYTES] [--duration-ms N] [--mode events|spin] [--json]";

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", "bench_scaling"};
  bench::describe(app, usage_text,
                  "Message rate of small RDMA writes and sends over loopback RC connections on one event loop and on "
                  "two; see the source's header for each figure.");
  app.add_option("--device", c.device);
  app.add_option("--connections", c.connections)->transform(command_line::count(2, 64));
  app.add_option("--depth", c.depth)->transform(command_line::count(1, 256));
  app.add_option("--size", c.size)->transform(command_line::size(1, 1u << 20));
  app.add_option("--duration-ms", c.duration_ms)->transform(command_line::count(100, 600'000));
  app.add_option("--mode", c.mode)->check(command_line::one_of({"events", "spin"}));
  app.add_flag("--json", c.json);
  bench::parse(app, argc, argv);
  if (c.connections % 2) bench::usage_error(app, "--connections takes an even number (half go to each of two loops)");
  return c;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// One event loop and its connections.
class loop {
public:
  loop(cv::device& dev, cv::protection_domain& pd, const config& c, int connections, bool send)
      : c_(c), send_(send), cq_(io_, dev, cq_options(c, connections)),
        bytes_(2 * c.size * static_cast<std::size_t>(connections)),
        mr_(pd, bytes_, cv::access::local_write | cv::access::remote_write) {
    cv::queue_pair_options o;
    o.max_send_wr = static_cast<std::uint32_t>(c.depth + 8);
    o.max_recv_wr = static_cast<std::uint32_t>(recv_depth(c) + 8);
    for (int i = 0; i < connections; ++i) {
      auto& k = *conns_.emplace_back(std::make_unique<connection>(pd, cq_, o));
      cv::connect_pair(k.a, k.b);
      k.local = cv::span_of(mr_, 2 * c.size * static_cast<std::size_t>(i), c.size);
      k.landing = cv::span_of(mr_, 2 * c.size * static_cast<std::size_t>(i) + c.size, c.size);
      k.remote = cv::remote_key_of(mr_).slice(2 * c.size * static_cast<std::size_t>(i) + c.size, c.size);
    }
  }

  /// Runs the traffic on the calling thread until `end`, then until what is in flight has completed.
  void run(clock_type::time_point end) {
    end_ = end;
    const double cpu0 = thread_cpu_seconds();
    try {
      for (auto& k : conns_) {
        if (send_)
          for (int i = 0; i < recv_depth(c_); ++i)
            recv(*k);
        for (int i = 0; i < c_.depth; ++i)
          issue(*k);
      }
      io_.run();
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_ = clock_type::now();
    cpu_seconds_ = thread_cpu_seconds() - cpu0;
  }

  std::uint64_t completed() const noexcept { return completed_; }
  double cpu_seconds() const noexcept { return cpu_seconds_; }
  clock_type::time_point finished() const noexcept { return finished_; }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

private:
  struct connection {
    cv::queue_pair a, b;  // a writes or sends to b
    cv::registered_span local, landing;
    cv::remote_key remote;
    connection(cv::protection_domain& pd, cv::completion_queue& cq, const cv::queue_pair_options& o)
        : a(pd, cq, o), b(pd, cq, o) {}
  };

  static int recv_depth(const config& c) { return 4 * c.depth; }
  static cv::completion_queue_options cq_options(const config& c, int connections) {
    cv::completion_queue_options o;
    o.depth = connections * 2 * (c.depth + 8 + recv_depth(c) + 8) + 64;
    o.spin = c.mode == "spin" ? cv::completion_queue_options::spin_forever : std::chrono::nanoseconds(0);
    return o;
  }

  /// Reads the clock every 16 completions: past the end, the loop stops issuing.
  bool stopping() {
    if (!stop_ && ++checks_ % 16 == 0 && clock_type::now() >= end_) stop_ = true;
    return stop_;
  }

  void issue(connection& k) {
    ++in_flight_;
    auto done = [this, &k](cv::error_code ec, std::size_t) {
      if (ec) throw cv::system_error(ec, send_ ? "send" : "RDMA write");
      --in_flight_;
      ++completed_;
      if (!stopping())
        issue(k);
      else if (in_flight_ == 0)
        io_.stop();  // the receives still posted keep the queue waiting; they are flushed at destruction
    };
    if (send_)
      k.a.async_send(k.local, done);
    else
      k.a.async_write(k.local, k.remote, done);
  }

  void recv(connection& k) {
    k.b.async_recv(k.landing, [this, &k](cv::error_code ec, cv::received) {
      if (ec == asio::error::operation_aborted) return;  // flushed when the queue pair is destroyed
      if (ec) throw cv::system_error(ec, "receive");
      if (!stop_) recv(k);
    });
  }

  const config& c_;
  const bool send_;
  asio::io_context io_{1};
  cv::completion_queue cq_;
  std::vector<std::byte> bytes_;
  cv::memory_region mr_;
  std::vector<std::unique_ptr<connection>> conns_;
  clock_type::time_point end_, finished_;
  bool stop_ = false;
  std::uint64_t checks_ = 0, completed_ = 0;
  int in_flight_ = 0;
  double cpu_seconds_ = 0;
  std::exception_ptr error_;
};

struct outcome {
  double msg_per_s = 0;
  std::vector<double> cpu_fraction;
};

/// `loops` loops with connections / loops connections each, every loop on its own thread.
outcome measure(cv::device& dev, cv::protection_domain& pd, const config& c, int loops, bool send) {
  std::vector<std::unique_ptr<loop>> ls;
  for (int i = 0; i < loops; ++i)
    ls.push_back(std::make_unique<loop>(dev, pd, c, c.connections / loops, send));
  const auto start = clock_type::now(), end = start + std::chrono::milliseconds(c.duration_ms);
  std::vector<std::thread> threads;
  for (auto& l : ls)
    threads.emplace_back([&l, end] { l->run(end); });
  for (auto& t : threads)
    t.join();
  outcome o;
  std::uint64_t total = 0;
  auto last = start;
  for (auto& l : ls) {
    l->rethrow();
    total += l->completed();
    last = std::max(last, l->finished());
  }
  const double wall = std::chrono::duration<double>(last - start).count();
  o.msg_per_s = static_cast<double>(total) / wall;
  for (auto& l : ls)
    o.cpu_fraction.push_back(l->cpu_seconds() / wall);
  return o;
}

std::string list(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  try {
    cv::device dev = cv::device::open(c.device);
    cv::protection_domain pd(dev);
    const char* ops[] = {"write", "send"};
    outcome r[2][2];  // [write|send][1|2 loops]
    for (int op = 0; op < 2; ++op)
      for (int l = 0; l < 2; ++l)
        r[op][l] = measure(dev, pd, c, l + 1, op == 1);
    const double scale[2] = {r[0][1].msg_per_s / r[0][0].msg_per_s, r[1][1].msg_per_s / r[1][0].msg_per_s};
    if (c.json) {
      const auto r3 = [](double x) { return json_output::rounded(x, 3); };
      json_output::json::object o{{"device", dev.name()}, {"connections", c.connections}, {"depth", c.depth},
                                  {"size", c.size},       {"duration_ms", c.duration_ms}, {"mode", c.mode}};
      for (int op = 0; op < 2; ++op)
        for (int l = 0; l < 2; ++l) {
          const std::string loops = std::to_string(l + 1) + "_loops";
          json_output::json::array cpu;
          for (const double f : r[op][l].cpu_fraction)
            cpu.push_back(r3(f));
          o[std::string(ops[op]) + "_msg_per_s_" + loops] = json_output::rounded(r[op][l].msg_per_s, 1);
          o[std::string(ops[op]) + "_cpu_fraction_" + loops] = std::move(cpu);
        }
      o["scaling_2_over_1_write"] = r3(scale[0]);
      o["scaling_2_over_1_send"] = r3(scale[1]);
      o["scaling_2_over_1"] = r3(scale[0]);
      json_output::print(o);
    } else {
      std::printf("device %s, %d connections, %d in flight each, %zu B, %d ms per figure, %s completion queues\n",
                  dev.name().c_str(), c.connections, c.depth, c.size, c.duration_ms, c.mode.c_str());
      std::printf("  op     loops       msg/s   CPU per loop thread (fraction of wall time)\n");
      for (int op = 0; op < 2; ++op)
        for (int l = 0; l < 2; ++l)
          std::printf("  %-6s %5d %11.1f   %s\n", ops[op], l + 1, r[op][l].msg_per_s,
                      list(r[op][l].cpu_fraction).c_str());
      std::printf("  scaling_2_over_1 write %.3f, send %.3f\n", scale[0], scale[1]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_scaling: %s\n", e.what());
    return 1;
  }
  return 0;
}
