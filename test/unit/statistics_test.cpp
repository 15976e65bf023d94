// The percentiles every report of the tool, the benchmarks and the examples gives (coverbs_support/statistics.hpp):
// linear interpolation between closest ranks, p from 0 to 100, 0 for no samples, input in any order.
#include <coverbs_support/statistics.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

using Catch::Detail::Approx;

TEST_CASE("percentiles of an odd count: the median is the middle value, p0 the minimum, p100 the maximum",
          "[statistics]") {
  const std::vector<double> v{1, 2, 3, 4, 5};
  CHECK(statistics::percentile(v, 0) == 1);
  CHECK(statistics::percentile(v, 50) == 3);
  CHECK(statistics::median(v) == 3);
  CHECK(statistics::percentile(v, 99) == Approx(4.96));  // rank 0.99 * 4 = 3.96
  CHECK(statistics::percentile(v, 100) == 5);
  CHECK(statistics::percentile(v, 25) == 2);
}

TEST_CASE("percentiles of an even count interpolate: the median is the mean of the two middle values", "[statistics]") {
  const std::vector<double> v{10, 20, 30, 40};
  CHECK(statistics::median(v) == 25);
  CHECK(statistics::percentile(v, 0) == 10);
  CHECK(statistics::percentile(v, 99) == Approx(39.7));  // rank 0.99 * 3 = 2.97
  CHECK(statistics::percentile(v, 100) == 40);
}

TEST_CASE("input in any order gives the same figures and is left as it was", "[statistics]") {
  const std::vector<double> v{40, 10, 30, 20};
  CHECK(statistics::median(v) == 25);
  CHECK(statistics::percentile(v, 100) == 40);
  CHECK(v == std::vector<double>{40, 10, 30, 20});
  const std::vector<std::uint64_t> ticks{7, 3, 5};  // cycle-counter ticks, as bench_windows keeps them
  CHECK(statistics::median(ticks) == 5);
}

TEST_CASE("one value is every percentile; no values give 0", "[statistics]") {
  const std::vector<double> one{42.5};
  for (double p : {0.0, 50.0, 99.0, 100.0})
    CHECK(statistics::percentile(one, p) == 42.5);
  const std::vector<double> none;
  CHECK(statistics::percentile(none, 99) == 0);
  CHECK(statistics::median(none) == 0);
  const auto s = statistics::summarize(none);
  CHECK(s.count == 0);
  CHECK((s.min == 0 && s.median == 0 && s.p99 == 0 && s.max == 0));
}

TEST_CASE("a summary gives count, min, median, p99 and max of one sort", "[statistics]") {
  std::vector<double> v;
  for (int i = 100; i >= 0; --i)  // 0..100, descending
    v.push_back(i);
  const auto s = statistics::summarize(v);
  CHECK(s.count == 101);
  CHECK(s.min == 0);
  CHECK(s.median == 50);
  CHECK(s.p99 == Approx(99));
  CHECK(s.max == 100);
}

TEST_CASE("p outside 0..100 is refused, not clamped", "[statistics]") {
  const std::vector<double> v{1, 2, 3};
  CHECK_THROWS_AS(statistics::percentile(v, -1), std::invalid_argument);
  CHECK_THROWS_AS(statistics::percentile(v, 100.5), std::invalid_argument);
  CHECK_THROWS_AS(statistics::percentile(v, std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
  CHECK_THROWS_AS(statistics::percentile(std::vector<double>{}, 101), std::invalid_argument);
  CHECK_THROWS_WITH(statistics::percentile(v, 150), Catch::Contains("from 0 to 100"));
}
