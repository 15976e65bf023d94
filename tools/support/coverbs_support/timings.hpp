#pragma once
// Durations taken with the steady clock, in microseconds: the time since a start, and the samples of one
// kind of step summarised for a report as statistics.hpp takes them. Header-only, no coverbs dependency.
#include "statistics.hpp"

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace statistics {

/// Microseconds from `start` to now (steady clock).
inline double us_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

/// Durations of one kind of step, in microseconds, summarised for the report.
class timings {
public:
  void add(std::chrono::steady_clock::duration d) {
    us_.push_back(std::chrono::duration<double, std::micro>(d).count());
  }
  std::size_t count() const noexcept { return us_.size(); }
  /// "n 1600, median 120.5 us, p99 480.2 us".
  std::string summary() const {
    const statistics::summary s = statistics::summarize(us_);
    char text[96];
    std::snprintf(text, sizeof text, "n %zu, median %.1f us, p99 %.1f us", s.count, s.median, s.p99);
    return text;
  }
  void merge(const timings& other) { us_.insert(us_.end(), other.us_.begin(), other.us_.end()); }

private:
  std::vector<double> us_;
};

}  // namespace statistics
