#pragma once
// Progress of a long command: one line per phase on stderr (what, how far, time since the start), so a log
// shows where a run of several minutes is and never fills with carriage returns. stdout keeps the report.
#include <chrono>
#include <cstdio>
#include <string>

namespace progress {

class phases {
public:
  /// `prog` names the command on each line; `total` is the number of phases (0: not known).
  explicit phases(std::string prog, int total = 0) : prog_(std::move(prog)), total_(total) {}

  /// Starts the next phase: "bench_windows: [2/5] binds, round 2 (3.1 s)".
  void next(const std::string& what) {
    ++done_;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (total_ > 0)
      std::fprintf(stderr, "%s: [%d/%d] %s (%.1f s)\n", prog_.c_str(), done_, total_, what.c_str(), s);
    else
      std::fprintf(stderr, "%s: %s (%.1f s)\n", prog_.c_str(), what.c_str(), s);
  }

private:
  std::string prog_;
  int total_;
  int done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

} // namespace progress
