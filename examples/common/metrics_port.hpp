#pragma once
// --metrics-port N: coverbs' metrics (coverbs/metrics.hpp) served at http://127.0.0.1:N/metrics in Prometheus'
// text format while the example runs, through the optional exporter library coverbs_prometheus (built when
// prometheus-cpp is found). Read them with `curl localhost:N/metrics` or `coverbs stats localhost:N`.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>

#if COVERBS_EXAMPLES_PROMETHEUS
#include <coverbs/prometheus_exporter.hpp>
#endif

namespace example {

/// The usage line of the option, for the examples' --help.
inline constexpr const char* metrics_port_usage =
    "  --metrics-port N     serve coverbs' metrics at http://127.0.0.1:N/metrics (Prometheus text; read them\n"
    "                       with curl or `coverbs stats HOST:N`); counting is on while it is given\n";

/// Serves the metrics on `port` while it lives (0: not at all; counting stays off).
class metrics_port {
public:
  /// @throws std::runtime_error when the port cannot be listened on, or the example was built without the
  /// exporter.
  metrics_port(std::uint64_t port, const char* name) {
    if (port == 0) return;
#if COVERBS_EXAMPLES_PROMETHEUS
    exporter_.emplace(static_cast<std::uint16_t>(port));
    std::printf("%s: metrics at http://127.0.0.1:%u/metrics\n", name, static_cast<unsigned>(exporter_->port()));
    std::fflush(stdout);
#else
    (void)name;
    throw std::runtime_error(
        "--metrics-port: this build has no Prometheus exporter (install prometheus-cpp-dev and configure with "
        "-Dprometheus=enabled)");
#endif
  }

private:
#if COVERBS_EXAMPLES_PROMETHEUS
  std::optional<coverbs::metrics::prometheus_exporter> exporter_;
#endif
};

}  // namespace example
