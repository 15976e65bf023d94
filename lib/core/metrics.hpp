#pragma once
// Private to lib/: where the library counts for coverbs/metrics.hpp. Every counting point is
//   if (metrics_on()) [[unlikely]] note_...(...);
// so that counting off costs the data path one load and one predictable branch per point; the note_
// functions are out of line, and not marked cold (a cold function is built for size, without the inlined
// counting helpers: twice the instructions when counting is on). Objects that keep statistics of their own
// (registration services and caches) enroll a reader of them (enroll_metrics) instead of counting twice.

#include <coverbs/error.hpp>
#include <coverbs/metrics.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

namespace coverbs::detail {

struct wr_node;

/// The switch behind metrics::enable(); hidden, so a test of it is one RIP-relative compare.
[[gnu::visibility("hidden")]] extern std::atomic<bool> metrics_switch;
#ifdef COVERBS_METRICS_COMPILED_OUT
/// Built with -Dmetrics=false: no counting point is compiled in (the baseline of the cost of switching off).
constexpr bool metrics_on() noexcept { return false; }
#else
inline bool metrics_on() noexcept { return metrics_switch.load(std::memory_order_relaxed); }
#endif

/// The counters kept per thread (thread_counters.hpp): the data path's and the connections'.
enum class metric : unsigned {
  empty_polls,
  capped_turns,
  send_credit_waits,
  recv_credit_waits,
  receives_reposted,
  other_errors,
  bytes_registered,
  accepted,
  refused,
  half_open_reaped,
  connected,
  connect_failed,
  disconnected_by_peer,
  disconnected_locally,
  disconnected_on_error,
  count_
};
void note(metric m, std::uint64_t delta = 1) noexcept;

/// Adds one to an object's own statistic `stat` and, while counting is on, to the process-wide `m`.
inline void tally(std::uint64_t& stat, metric m) noexcept {
  ++stat;
  if (metrics_on()) [[unlikely]]
    note(m);
}
/// Counts `m` while counting is on (off the data path).
inline void tally(metric m) noexcept {
  if (metrics_on()) [[unlikely]]
    note(m);
}

/// The counts of one queue pair or shared receive queue (queue_pair::counters()): per operation kind posted,
/// completed, failed and bytes, then the send and receive credit waits. Only the thread that runs the queue
/// writes them (load + store, relaxed: no locked instruction); any thread reads them.
struct queue_counts {
  static constexpr std::size_t send_credit_waits = 4 * metrics::op_kind_count, recv_credit_waits = send_credit_waits + 1;
  std::atomic<std::uint64_t> v[recv_credit_waits + 1] = {};
  void bump(std::size_t i, std::uint64_t delta = 1) noexcept {
    v[i].store(v[i].load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
  /// What queue_pair::counters() returns.
  metrics::queue_counters read() const noexcept;
};

/// The operation `n` ended with `ec` (success: its bytes, from `wc` for a receive; failure: its error),
/// after the device had it (`posted`) or before: counted for the calling thread and, when not null, in
/// `own` (its queue pair's or shared receive queue's counts). Counting the posting here, when the operation
/// ends, spares the data path a second test per operation; an operation in flight is not in `posted` yet.
void note_finished(const wr_node* n, const error_code& ec, const ibv_wc* wc, bool posted, queue_counts* own) noexcept;
/// An operation waits for a credit of its send queue (`recv`: its receive queue): counted for the calling
/// thread and in `own`.
void note_credit_wait(bool recv, queue_counts* own) noexcept;
/// A non-empty poll returned `n` completions (an empty one: note(metric::empty_polls)).
void note_poll(int n) noexcept;
/// A worker's ibv_reg_mr of `bytes` took `microseconds`.
void note_registration(std::uint64_t bytes, std::uint64_t microseconds) noexcept;

/// What an object with statistics of its own (a registration service or cache) adds to a snapshot: its
/// counters, and its gauges unless `retiring`. Called under the registry's lock.
using metrics_reader = std::function<void(metrics::snapshot& out, bool retiring)>;
/// Enrolls `reader` for metrics::read(). Destroying the returned handle withdraws it, first folding its
/// counters (not its gauges) into the retained totals, so the snapshot's counters never go down. Keep the
/// handle as the object's last member: it goes before what the reader reads.
std::shared_ptr<void> enroll_metrics(metrics_reader reader);

/// Fills what the core holds: the per-thread counters and every enrolled source (metrics::read()).
void read_core_metrics(metrics::snapshot& out);

}  // namespace coverbs::detail
