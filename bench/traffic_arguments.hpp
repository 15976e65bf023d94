#pragma once
// The command-line options of the benchmarks that run a traffic_loop (bench_scaling, bench_rate): the shape
// of the traffic, how long the loop issues and how it waits for completions.
#include "cli.hpp"
#include "traffic_loop.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace bench {

/// What the options set; a benchmark's config derives from it (and may change the defaults first).
struct traffic_arguments {
  int connections = 1;
  int depth = 32;
  std::size_t size = 8;
  int duration_ms = 3000;
  std::string mode = "events";  ///< "events" or "spin"

  /// A loop's options for `loop_connections` of the connections, carrying sends or RDMA writes.
  traffic_options options(int loop_connections, bool send) const {
    traffic_options o;
    o.connections = loop_connections;
    o.depth = depth;
    o.size = size;
    o.send = send;
    o.spin = mode == "spin";
    return o;
  }
};

/// Adds --connections (min_connections..64), --depth (1..256), --size (1..1M), --duration-ms (100..600000)
/// and --mode events|spin to `app`, each writing into `a`, whose values are the defaults --help names.
inline void add_traffic_options(CLI::App& app, traffic_arguments& a, int min_connections) {
  app.add_option("--connections", a.connections,
                 "loopback RC connections (two queue pairs each; default " + std::to_string(a.connections) + ")")
      ->transform(command_line::count(static_cast<std::uint64_t>(min_connections), 64));
  app.add_option("--depth", a.depth, "operations in flight per connection (default " + std::to_string(a.depth) + ")")
      ->transform(command_line::count(1, 256));
  app.add_option("--size", a.size, "bytes per operation (default " + std::to_string(a.size) + ")")
      ->transform(command_line::size(1, 1u << 20));
  app.add_option("--duration-ms", a.duration_ms,
                 "how long a loop issues operations, per figure (default " + std::to_string(a.duration_ms) + ")")
      ->transform(command_line::count(100, 600'000));
  app.add_option("--mode", a.mode, "completion events (default) or busy polling (spin) on each completion queue")
      ->check(command_line::one_of({"events", "spin"}));
}

}  // namespace bench
