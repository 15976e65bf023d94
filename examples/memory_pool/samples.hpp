#pragma once
// `samples`: the latencies the server's and the clients' reports give, as text ("median, p99, max (count)")
// and as JSON with every sample, so the results of several processes can be merged.
#include <coverbs_support/json_output.hpp>
#include <coverbs_support/statistics.hpp>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace memory_pool {

namespace json = json_output::json;

/// `x` to a tenth, as the statistics print it.
inline double tenth(double x) { return json_output::rounded(x, 1); }

/// Latency samples in microseconds.
struct samples {
  std::vector<double> values;
  void add(double us) { values.push_back(us); }
  /// "median 120.5, p99 480.2, max 512.0 (1600)" (as coverbs_support/statistics.hpp takes them).
  std::string text() const {
    if (values.empty()) return "none";
    const statistics::summary s = statistics::summarize(values);
    char b[128];
    std::snprintf(b, sizeof b, "median %.1f, p99 %.1f, max %.1f (%zu)", s.median, s.p99, s.max, s.count);
    return b;
  }
  /// {count, median, p99, max, values}: the samples too, so results of several processes can be merged.
  json::object to_json() const {
    const statistics::summary s = statistics::summarize(values);
    json::array all;
    for (double v : values)
      all.push_back(tenth(v));
    return {{"count", s.count},
            {"median", tenth(s.median)},
            {"p99", tenth(s.p99)},
            {"max", tenth(s.max)},
            {"values", std::move(all)}};
  }
};

}  // namespace memory_pool
