#pragma once
// Cycle-counter time stamps, as perftest takes them: reading the clock must not cost more than the event
// being timed (in an emulated guest clock_gettime goes to an emulated HPET and costs microseconds). Ticks
// are converted to microseconds with a calibration against steady_clock over the run so far.
#include <x86intrin.h>

#include <chrono>
#include <cstdint>

namespace bench {

class stamp_clock {
public:
  stamp_clock() : t0_(std::chrono::steady_clock::now()), c0_(__rdtsc()) {}
  static std::uint64_t now() noexcept { return __rdtsc(); }
  /// Microseconds per tick, from the run so far (call it at the end of a long run).
  double us_per_tick() const {
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
    return us / static_cast<double>(__rdtsc() - c0_);
  }

private:
  std::chrono::steady_clock::time_point t0_;
  std::uint64_t c0_;
};

}  // namespace bench
