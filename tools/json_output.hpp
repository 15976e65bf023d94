#pragma once
// The --json output of the coverbs tool, the benchmarks and the examples: documents built with Boost.JSON
// (strings escaped, numbers valid JSON), printed as one line on stdout.
#include <boost/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>

namespace json_output {

namespace json = boost::json;

/// `x` rounded to `decimals` places, so a figure prints as "12.345" rather than every digit of the double.
inline double rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}

/// `v` as JSON text on one line.
inline std::string text(const json::value& v) { return json::serialize(v); }

/// Prints `v` on stdout as one line and flushes it.
inline void print(const json::value& v) {
  std::printf("%s\n", text(v).c_str());
  std::fflush(stdout);
}

} // namespace json_output
