#pragma once
// How an example runs: its coroutines as a `task_group`, the loop run until they end (with a watchdog in
// self-test mode, and ending early on SIGINT or SIGTERM), and the verdict line with the exit status.
#include "common/command_line.hpp"
#include "common/prelude.hpp"

#include <coverbs_support/timings.hpp>

#include <coverbs/outstanding_work.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <chrono>
#include <csignal>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

namespace example {

/// Coroutines spawned on one executor: how many ended, and how many of them by an exception (printed as
/// `who: what`).
struct task_group {
  int started = 0, finished = 0, failed = 0;

  /// Spawns `task` on `where` (an executor or an io_context).
  template <class Where, class Awaitable>
  void spawn(Where&& where, Awaitable task, const char* who) {
    ++started;
    asio::co_spawn(std::forward<Where>(where), std::move(task), [this, who](std::exception_ptr e) {
      ++finished;
      if (!e) return;
      ++failed;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "%s: %s\n", who, x.what());
      }
    });
  }
  bool all_done() const noexcept { return finished == started; }
};

/// How a run went.
struct run_result {
  bool finished = false;  ///< every task ended
  double elapsed_us = 0;
  int signal = 0;  ///< SIGINT or SIGTERM, when one ended the run; 0 otherwise
};

/// "SIGTERM", "SIGINT".
inline const char* signal_name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

/// In a debug build (NDEBUG not defined), SIGQUIT (Ctrl-\\) prints what keeps the loop busy
/// (coverbs::describe_outstanding_work) to stderr, and the run goes on; release builds leave SIGQUIT alone.
/// `close()` stops listening: the signal wait would keep `run()` busy itself.
class busy_report {
public:
  explicit busy_report(asio::io_context& io) {
#ifndef NDEBUG
    quit_.emplace(io, SIGQUIT);
    wait(io);
#else
    (void)io;
#endif
  }
  void close() {
    if (!quit_) return;
    error_code ignored;
    quit_->cancel(ignored);
  }

private:
  void wait(asio::io_context& io) {
    quit_->async_wait([this, &io](const error_code& ec, int) {
      if (ec) return;
      std::fprintf(stderr, "what keeps run() busy (SIGQUIT):\n%s", coverbs::describe_outstanding_work(io).c_str());
      wait(io);
    });
  }
  std::optional<asio::signal_set> quit_;
};

/// Runs `io` until every task of `tasks` has ended; in self-test mode for `limit` at most (a line then says so).
/// SIGINT or SIGTERM ends the run early (`run_result::signal`): the caller still prints its whole report.
inline run_result run_tasks(asio::io_context& io, const task_group& tasks, const command_line& cmd,
                            std::chrono::seconds limit = std::chrono::seconds(40)) {
  const auto start = clock::now();
  busy_report report(io);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  int stopped_by = 0;
  signals.async_wait([&stopped_by](const error_code& ec, int signal) {
    if (!ec) stopped_by = signal;
  });
  const auto deadline = cmd.self_test() ? start + limit : clock::time_point::max();
  while (!tasks.all_done() && stopped_by == 0 && clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(50));
  }
  signals.cancel();
  report.close();
  if (stopped_by)
    std::printf("  stopped by %s (%d of %d tasks ended)\n", signal_name(stopped_by), tasks.finished, tasks.started);
  else if (!tasks.all_done())
    std::printf("  did not finish within %lld s\n", static_cast<long long>(limit.count()));
  return {tasks.all_done(), statistics::us_since(start), stopped_by};
}

/// Prints the elapsed time, then "`what`: OK" or "`what`: FAILED". @returns the exit status, 0 or 1. When the
/// tasks did not all finish (a watchdog or a signal ended the run), exits the process at once instead, with
/// that status (a run a signal ended is OK when all it did held): their coroutines still hold connections on
/// resources of the caller's frame, which must not be unwound in the wrong order.
inline int verdict(const std::string& what, bool ok, const run_result& run) {
  ok = ok && (run.finished || run.signal != 0);
  std::printf("  elapsed          : %.0f us\n%s: %s\n", run.elapsed_us, what.c_str(), ok ? "OK" : "FAILED");
  if (!run.finished) {
    std::fflush(nullptr);
    std::_Exit(ok ? 0 : 1);
  }
  return ok ? 0 : 1;
}

}  // namespace example
