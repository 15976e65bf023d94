// bench_rate: the message rate of small RDMA writes or sends from one event loop, and the CPU time each
// message costs the process.
//
//   bench_rate [--device NAME] [--op write|send] [--connections N] [--depth N] [--size BYTES]
//              [--duration-ms N] [--max-inline BYTES] [--mode events|spin] [--json]
//
// One io_context on the main thread with one completion queue (bench/traffic_loop.hpp): --connections
// loopback RC connections, each keeping --depth operations of --size bytes in flight from one queue pair
// to the other (a completion handler initiates the next one); for sends the receiving queue pair keeps
// receives posted, re-posting each from its completion handler. The loop stops issuing after
// --duration-ms, then waits for what is in flight. --max-inline sets queue_pair_options::max_inline_data
// of every queue pair (default 64, coverbs' own; 0: nothing goes inline).
//
// Figures (--json keys): msg_per_s = operations completed / wall time from the first post until the last
// completion; cpu_us_per_msg = the process's CPU time (getrusage RUSAGE_SELF, user + system, both sides of
// every connection; on rxe the system time holds much of the "NIC's" work) / operations, in microseconds;
// cpu_fraction = that CPU time / the wall time; send_doorbells, send_requests, completions = the completion
// queue's counters over the run (completion_queue_stats; completions include the receives'), and
// requests_per_doorbell = send_requests / send_doorbells where the library counts doorbells.
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include "traffic_arguments.hpp"
#include <coverbs_support/json_output.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

namespace {

namespace cv = coverbs;

struct config : bench::traffic_arguments {
  std::string device;
  std::string op = "write";
  std::size_t max_inline = cv::queue_pair_options{}.max_inline_data;
  bool json = false;
};

constexpr const char* usage_text = "[--device NAME] [--op write|send] [--connections N] [--depth N] [--size BYTES] "
                                   "[--duration-ms N] [--max-inline BYTES] [--mode events|spin] [--json]";

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", "bench_rate"};
  bench::describe(app, usage_text,
                  "Message rate and CPU time per message of small RDMA writes or sends over loopback RC connections "
                  "on one event loop; see the source's header for each figure.");
  app.add_option("--device", c.device, "RDMA device name, as ibv_devices lists it (default: the first)");
  app.add_option("--op", c.op, "RDMA writes or sends into posted receives (default write)")
      ->check(command_line::one_of({"write", "send"}));
  bench::add_traffic_options(app, c, 1);
  app.add_option("--max-inline", c.max_inline,
                 "queue_pair_options::max_inline_data of every queue pair (default 64; 0: nothing inline); the "
                 "device caps it (rxe at 512 bytes) and refuses more with device_limit_exceeded")
      ->transform(command_line::size(0, 4096));
  app.add_flag("--json", c.json, "print one JSON object of the figures instead of a line of text");
  bench::parse(app, argc, argv);
  return c;
}

/// The process's CPU time so far (user, system), in seconds.
struct process_cpu {
  double user = 0, system = 0;
  static process_cpu now() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    const auto s = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
    };
    return {s(u.ru_utime), s(u.ru_stime)};
  }
};

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  try {
    cv::device dev = cv::device::open(c.device);
    cv::protection_domain pd(dev);
    bench::traffic_options o = c.options(c.connections, c.op == "send");
    o.max_inline_data = static_cast<std::uint32_t>(c.max_inline);
    bench::traffic_loop loop(dev, pd, o);
    const auto before = loop.stats();
    const process_cpu cpu0 = process_cpu::now();
    const auto start = bench::traffic_loop::clock_type::now();
    loop.run(start + std::chrono::milliseconds(c.duration_ms));
    const process_cpu cpu1 = process_cpu::now();
    loop.rethrow();
    const auto after = loop.stats();
    const double wall = std::chrono::duration<double>(loop.finished() - start).count();
    const auto messages = loop.completed();
    const double user = cpu1.user - cpu0.user, system = cpu1.system - cpu0.system;
    const double rate = static_cast<double>(messages) / wall;
    const double cpu_us = messages ? (user + system) / static_cast<double>(messages) * 1e6 : 0;
    const auto doorbells = after.send_doorbells - before.send_doorbells;
    const auto requests = after.send_requests - before.send_requests;
    const auto completions = after.completions - before.completions;
    if (c.json) {
      const auto r3 = [](double x) { return json_output::rounded(x, 3); };
      json_output::json::object j{{"device", dev.name()},
                                  {"op", c.op},
                                  {"connections", c.connections},
                                  {"depth", c.depth},
                                  {"size", c.size},
                                  {"duration_ms", c.duration_ms},
                                  {"mode", c.mode},
                                  {"max_inline_data", c.max_inline},
                                  {"max_inline_data_granted", loop.max_inline_data()},
                                  {"messages", messages},
                                  {"seconds", r3(wall)},
                                  {"msg_per_s", json_output::rounded(rate, 1)},
                                  {"cpu_user_seconds", r3(user)},
                                  {"cpu_system_seconds", r3(system)},
                                  {"cpu_us_per_msg", r3(cpu_us)},
                                  {"cpu_fraction", r3((user + system) / wall)},
                                  {"send_doorbells", doorbells},
                                  {"send_requests", requests},
                                  {"completions", completions}};
      if (doorbells) j["requests_per_doorbell"] = r3(static_cast<double>(requests) / static_cast<double>(doorbells));
      json_output::print(j);
    } else {
      std::printf("device %s, %s of %zu B, %d connection(s), %d in flight each, inline up to %u B, %s completion "
                  "queue, %d ms\n",
                  dev.name().c_str(), c.op.c_str(), c.size, c.connections, c.depth, loop.max_inline_data(),
                  c.mode.c_str(), c.duration_ms);
      std::printf("  %.1f messages/s, %.3f us CPU per message (user %.3f s, system %.3f s over %.3f s)\n", rate, cpu_us,
                  user, system, wall);
      std::printf("  %llu doorbells, %llu send requests, %llu completions\n",
                  static_cast<unsigned long long>(doorbells), static_cast<unsigned long long>(requests),
                  static_cast<unsigned long long>(completions));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_rate: %s\n", e.what());
    return 1;
  }
  return 0;
}
