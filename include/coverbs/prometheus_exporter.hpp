#pragma once
/// @file
/// `metrics::prometheus_exporter`: serves `metrics::read()` in Prometheus' text exposition format over HTTP
/// (`GET /metrics`). An optional component: its own library, `coverbs_prometheus` (Meson: dependency
/// `coverbs-prometheus`; CMake: `coverbs::prometheus`), built when Debian's `prometheus-cpp` is found
/// (`-Dprometheus=enabled` requires it). The core library never needs it. Metric names: docs/metrics.md.

#include <coverbs/metrics.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace coverbs::metrics {

/// The snapshot `s` in Prometheus' text exposition format (version 0.0.4): what the exporter serves.
std::string prometheus_text(const snapshot& s);

/// An HTTP server on a thread of its own (prometheus-cpp's civetweb) that converts a fresh snapshot at
/// every scrape. Switches counting on when made (`metrics::enable()`); destroying it stops the server, closes
/// every scraper's connection (kept alive, idle, or still waiting for a server thread: the scraper reads end of
/// file; a scrape under way is cut short) and leaves counting as it is. Destruction takes milliseconds
/// (measured: 11 ms with six scrapers connected; civetweb's own stop took 1.9 s and left a waiting connection
/// open). To find the server's sockets it reads /proc/self/fd; without /proc it stops as civetweb does.
/// @par Thread Safety Scrapes run on the server's threads and read the counters as `read()` does, while the
/// loops run. Distinct objects: safe; one object: const members from any thread.
class prometheus_exporter {
public:
  /// Listens on `address`:`port` (port 0: one the kernel chooses, see `port()`), path `/metrics`. The default
  /// address serves this host only: the counters tell traffic volumes, errors and connection counts, so serving
  /// other hosts (e.g. `"0.0.0.0"`, every interface) is a choice to make explicitly.
  /// @throws std::runtime_error naming the address and port when it cannot listen there (the port is taken, the
  /// address is not this host's).
  explicit prometheus_exporter(std::uint16_t port, const std::string& address = "127.0.0.1");
  ~prometheus_exporter();
  prometheus_exporter(const prometheus_exporter&) = delete;
  prometheus_exporter& operator=(const prometheus_exporter&) = delete;

  /// The port it listens on.
  std::uint16_t port() const noexcept;

private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace coverbs::metrics
