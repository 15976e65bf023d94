#pragma once
// The --json output of the coverbs tool, the benchmarks and the examples: documents built with Boost.JSON
// (strings escaped, numbers valid JSON), printed as one line on stdout.
#include <boost/json.hpp>

#include <charconv>
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

namespace detail {
/// Appends `v` to `out`. Boost.JSON 1.81 writes every double in exponent form ("1.99E1"); here a double is
/// its shortest decimal form ("19.9", "4286.8", "20", "1200000000", "0.000012"), a non-finite one `null`.
inline void append(std::string& out, const json::value& v) {
  switch (v.kind()) {
  case json::kind::double_: {
    const double x = v.get_double();
    char buf[128];
    if (!std::isfinite(x)) {
      out += "null";
      break;
    }
    // Fixed notation (shortest digits that read back as `x`) over the range any figure here takes; the
    // general form, exponent and all, only beyond it.
    const double a = std::fabs(x);
    const bool fixed = a == 0 || (a >= 1e-6 && a < 1e21);
    const auto r = fixed ? std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed)
                         : std::to_chars(buf, buf + sizeof buf, x);
    out.append(buf, r.ptr);
    break;
  }
  case json::kind::array: {
    out += '[';
    const char* sep = "";
    for (const json::value& e : v.get_array()) {
      out += sep;
      append(out, e);
      sep = ",";
    }
    out += ']';
    break;
  }
  case json::kind::object: {
    out += '{';
    const char* sep = "";
    for (const auto& [key, e] : v.get_object()) {
      out += sep;
      out += json::serialize(key);  // escaped
      out += ':';
      append(out, e);
      sep = ",";
    }
    out += '}';
    break;
  }
  default: out += json::serialize(v);
  }
}
}  // namespace detail

/// `v` as JSON text on one line.
inline std::string text(const json::value& v) {
  std::string out;
  detail::append(out, v);
  return out;
}

/// Prints `v` on stdout as one line and flushes it.
inline void print(const json::value& v) {
  std::printf("%s\n", text(v).c_str());
  std::fflush(stdout);
}

} // namespace json_output
