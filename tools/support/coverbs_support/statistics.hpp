#pragma once
// Percentiles of timing samples: the one definition the coverbs tool, the benchmarks and the examples report.
//
// Method: linear interpolation between the two closest ranks (Hyndman and Fan's definition 7, the default of
// R's quantile(), NumPy's percentile() and Python's statistics.quantiles(method="inclusive")). Of n values
// sorted as x[0] <= ... <= x[n-1], the p-th percentile lies at rank r = p / 100 * (n - 1):
// x[floor(r)] + (r - floor(r)) * (x[floor(r) + 1] - x[floor(r)]). So p = 0 is the minimum, p = 100 the
// maximum, and p = 50 the median: the middle value of an odd count, the mean of the two middle values of an
// even one.
//
// Why not a Boost library: Boost.Accumulators' quantiles (p_square_quantile, extended_p_square_quantile, the
// median by any of its three features) are estimates made for streams that are never stored, and its
// tail_quantile takes the nearest rank of one tail from a cache sized in advance; Boost.Math's
// statistics::median is exact but gives the median only, and asserts on an empty range. The samples here are
// all kept, so the exact figure is one sort away.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace statistics {

/// The `p`-th percentile of `sorted` (ascending), by linear interpolation (above).
/// @returns 0 when `sorted` is empty (no samples: callers report the count beside the figure).
/// @throws std::invalid_argument when `p` is not in [0, 100] (or is NaN).
inline double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  if (!(p >= 0 && p <= 100))
    throw std::invalid_argument("percentile: p is " + std::to_string(p) + ", not a number from 0 to 100");
  if (sorted.empty()) return 0;
  const double rank = p / 100 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

/// `values` (any range of numbers, e.g. microseconds or cycle-counter ticks) as doubles, sorted ascending.
template <class Range>
std::vector<double> sorted(const Range& values) {
  std::vector<double> v;
  for (const auto& x : values)
    v.push_back(static_cast<double>(x));
  std::sort(v.begin(), v.end());
  return v;
}

/// The `p`-th percentile (p from 0 to 100) of `values`, in any order (left as they are), in their unit.
/// @returns 0 when `values` is empty. @throws std::invalid_argument when `p` is not in [0, 100].
template <class Range>
double percentile(const Range& values, double p) {
  return percentile_of_sorted(sorted(values), p);
}

/// The median of `values` (the 50th percentile); 0 when empty.
template <class Range>
double median(const Range& values) {
  return percentile(values, 50);
}

/// What a report says of a set of samples; every figure 0 when there are none.
struct summary {
  std::size_t count = 0;
  double min = 0, median = 0, p99 = 0, max = 0;
};

/// `values` summarised with one sort.
template <class Range>
summary summarize(const Range& values) {
  const std::vector<double> v = sorted(values);
  return {v.size(), percentile_of_sorted(v, 0), percentile_of_sorted(v, 50), percentile_of_sorted(v, 99),
          percentile_of_sorted(v, 100)};
}

}  // namespace statistics
