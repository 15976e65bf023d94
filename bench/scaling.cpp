// bench_scaling: does the message rate grow with the number of event loops? Small RDMA writes and small
// sends over --connections loopback RC connections, all on one loop, then split over two loops.
//
//   bench_scaling [--device NAME] [--connections N] [--depth N] [--size BYTES] [--duration-ms N]
//                 [--mode events|spin] [--json]
//
// A loop (bench/traffic_loop.hpp) is an io_context run by one std::thread, with its own completion queue;
// every connection (two queue pairs on that queue) belongs to one loop. With 1 loop it holds all the
// connections; with 2 loops each holds half. Each connection keeps --depth operations of --size bytes in
// flight from one side (a completion handler posts the next); for send the other side keeps receives
// posted, re-posting each from its completion handler. A loop stops issuing when its own clock read says
// the period is over (it does not rely on a timer getting a turn), then waits for what is in flight.
//
// Figures: {write,send}_msg_per_s_{1,2}_loops = operations completed by all loops / wall time from the
// start until the last loop finished; scaling_2_over_1_{write,send} = the 2-loop rate / the 1-loop rate
// (scaling_2_over_1 = the write figure); {write,send}_cpu_fraction_{1,2}_loops = CPU time of each loop
// thread (CLOCK_THREAD_CPUTIME_ID) / the wall time, one number per loop.
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include "traffic_arguments.hpp"
#include <coverbs_support/json_output.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace cv = coverbs;
using clock_type = bench::traffic_loop::clock_type;

struct config : bench::traffic_arguments {
  std::string device;
  bool json = false;
  config() { connections = 8; }
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
  bench::add_traffic_options(app, c, 2);
  app.add_flag("--json", c.json);
  bench::parse(app, argc, argv);
  if (c.connections % 2) bench::usage_error(app, "--connections takes an even number (half go to each of two loops)");
  return c;
}

struct outcome {
  double msg_per_s = 0;
  std::vector<double> cpu_fraction;
};

/// `loops` loops with connections / loops connections each, every loop on its own thread.
outcome measure(cv::device& dev, cv::protection_domain& pd, const config& c, int loops, bool send) {
  const bench::traffic_options t = c.options(c.connections / loops, send);
  std::vector<std::unique_ptr<bench::traffic_loop>> ls;
  for (int i = 0; i < loops; ++i)
    ls.push_back(std::make_unique<bench::traffic_loop>(dev, pd, t));
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
