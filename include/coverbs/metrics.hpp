#pragma once
/// @file
/// `metrics`: process-wide counters of the data path, registrations, windows and connections, switched on
/// and off at run time (`metrics::enable()`), read as one `metrics::snapshot` from any thread without
/// stopping the loops. Off (the default), the data path pays one predictable branch per counting point; on,
/// a few relaxed loads and stores in the counting thread's own block (docs/metrics.md has the figures).

#include <coverbs/config.hpp>
#include <coverbs/window_counters.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace coverbs::metrics {

/// Switches counting on (from now on; what happened before is not counted). @par Thread Safety Any thread.
void enable() noexcept;
/// Switches counting off; the counts stay readable and resume from where they were on `enable()`.
void disable() noexcept;
/// Whether counting is on. The environment variable `COVERBS_METRICS=1` switches it on at start-up. A library
/// built with `-Dmetrics=false` has no counting compiled in: `enable()` does nothing and this stays false.
bool enabled() noexcept;

/// What an operation does on the wire (its work request's opcode): the rows of `snapshot::operations`.
enum class op_kind : std::uint8_t {
  send,        ///< send, send_with_imm, send_with_invalidate, a datagram send
  recv,        ///< a receive (a queue pair's or a shared receive queue's)
  write,       ///< RDMA write, write_with_imm
  read,        ///< RDMA read
  atomic,      ///< fetch_add, compare_swap
  bind,        ///< a memory window bind (rebind_mw's chain counts once, as a bind)
  invalidate,  ///< LOCAL_INV of a window's key
};
inline constexpr std::size_t op_kind_count = 7;
/// "send", "recv", "write", "read", "atomic", "bind", "invalidate".
const char* name(op_kind kind) noexcept;

/// A histogram with fixed log2 buckets: `buckets[0]` counts the value 0 or 1 (see each use for the unit),
/// `buckets[i]` (i >= 1) the values in [2^i, 2^(i+1)), the last bucket everything above. `count` is the
/// number of values and `sum` their total (in the same unit), so sum / count is the mean.
struct histogram {
  static constexpr std::size_t bucket_count = 32;
  std::array<std::uint64_t, bucket_count> buckets{};
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
  /// The inclusive upper bound of bucket `i` (1, 3, 7, ...; the last is unbounded: UINT64_MAX).
  static constexpr std::uint64_t upper_bound(std::size_t i) noexcept {
    return i + 1 >= bucket_count ? UINT64_MAX : (std::uint64_t{2} << i) - 1;
  }
};

/// The counters of one operation kind. Every operation that is started ends once: `completed` (success) or
/// `failed` (by the device, refused before posting, flushed, cancelled).
struct op_counters {
  /// Operations the device had (ibv_post_send / ibv_post_recv) and that have ended: counted when they end,
  /// so one in flight is not in it yet (the data path pays one test per operation, not two).
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;  ///< operations that completed successfully
  std::uint64_t failed = 0;     ///< operations that completed with an error
  /// Bytes moved by the successful ones: sends, writes and reads their length, receives the bytes received
  /// (`ibv_wc::byte_len` as the device reports it: a datagram's includes its 40-byte GRH), atomics 8; binds
  /// and invalidations 0.
  std::uint64_t bytes = 0;
};

/// The counts of the data path, summed over every thread (a loop is one thread) and every queue pair,
/// shared receive queue and completion queue, destroyed ones included.
struct data_path_counters {
  std::array<op_counters, op_kind_count> operations{};  ///< indexed by `op_kind`
  /// Failed operations by `wc_errc` value (the `ibv_wc_status` the device reported, or `wr_flush_err`
  /// for one flushed before posting), indexed by the value (`wc_errc::rem_access_err` is 10).
  std::array<std::uint64_t, 32> wc_errors{};
  /// Failed operations by `errc` value (refused by coverbs before posting, e.g. `queue_pair_not_ready`),
  /// indexed by the value; values beyond the array count in `errc_errors.back()`.
  std::array<std::uint64_t, 128> errc_errors{};
  std::uint64_t other_errors = 0;  ///< failed with another code (operation_aborted, an errno of a verb)
  /// Completions each non-empty `ibv_poll_cq` returned (unit: completions; at most 32 per poll).
  histogram completions_per_poll;
  std::uint64_t empty_polls = 0;        ///< `ibv_poll_cq` calls that found nothing
  std::uint64_t capped_turns = 0;       ///< dispatch turns that stopped at `max_completions_per_turn` or `turn_quota`
  std::uint64_t send_credit_waits = 0;  ///< operations that waited for a send-queue credit
  std::uint64_t recv_credit_waits = 0;  ///< receives that waited for a receive-queue credit
  std::uint64_t receives_reposted = 0;  ///< receives a message_endpoint posted again after a message
};

/// The counts of one queue pair or shared receive queue (`queue_pair::counters()`,
/// `datagram_queue_pair::counters()`, `shared_receive_queue::counters()`), counted while counting is on:
/// its operations as in `data_path_counters::operations` (a queue pair's receives from a shared receive
/// queue count in the shared receive queue's), and its operations that waited for a credit.
struct queue_counters {
  std::array<op_counters, op_kind_count> operations{};  ///< indexed by `op_kind`
  std::uint64_t send_credit_waits = 0;                  ///< operations that waited for a send-queue credit
  std::uint64_t recv_credit_waits = 0;                  ///< receives that waited for a receive-queue credit
};

/// The data path's counts of one thread (an event loop runs on one thread: a `loop_pool` member's thread,
/// or whichever thread calls `io_context::run()`), while it lives.
struct thread_data_path {
  std::string name;            ///< the thread's name (pthread_getname_np(3)) when it first counted
  std::int64_t thread_id = 0;  ///< its kernel thread id (gettid(2)), as `top -H` and /proc/PID/task show it
  data_path_counters data_path;
};

/// Registrations through every `registration_service` (destroyed ones included) and every
/// `registration_cache`: these are the services' and caches' own `stats()`, summed.
struct registration_counters {
  std::uint64_t registered = 0;        ///< successful ibv_reg_mr calls by the services' workers
  std::uint64_t deregistered = 0;      ///< successful ibv_dereg_mr calls by the services
  std::uint64_t failed = 0;            ///< requests that failed
  std::uint64_t retries = 0;           ///< ENOMEM/EAGAIN retries
  std::uint64_t bytes_registered = 0;  ///< bytes registered by the successful ibv_reg_mr calls (while on)
  std::int64_t bytes_held = 0;         ///< bytes the live services hold now (a gauge)
  /// How long each ibv_reg_mr of a worker took (unit: microseconds; counted while on).
  histogram latency_us;
  std::uint64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0, cache_invalidations = 0;
};

/// What the listeners did with connection requests, and why connections ended (every listener and
/// connection of the process, counted while on).
struct connection_counters {
  std::uint64_t accepted = 0;          ///< connections a listener established
  std::uint64_t refused = 0;           ///< requests a listener rejected or that failed on this side
  std::uint64_t half_open_reaped = 0;  ///< requests dropped unanswered or timed out in the handshake
  std::uint64_t connected = 0;         ///< outgoing connections established (`async_connect`)
  std::uint64_t connect_failed = 0;    ///< outgoing connections that failed
  /// Connections that ended, by cause: the peer disconnected, this side closed, or the device/queue pair
  /// failed (any other error).
  std::uint64_t disconnected_by_peer = 0, disconnected_locally = 0, disconnected_on_error = 0;
};

/// One reading of every counter. Each counter is read with a relaxed load: counts another thread makes
/// while `read()` runs may or may not be in it, and two counters may be a few operations apart.
struct snapshot {
  bool enabled = false;  ///< whether counting was on when it was read
  data_path_counters data_path;
  registration_counters registration;
  window_counters windows;  ///< always counted (window_counters.hpp), on or off
  connection_counters connections;
  /// `data_path` per thread: one entry for each live thread that has counted on the data path, ordered by
  /// `thread_id` (the counts of threads that ended are only in `data_path`; a registration worker, which counts
  /// no operation, is not listed).
  std::vector<thread_data_path> threads;
};

/// Reads every counter: a control-path call (a lock, and a walk over the threads that counted and the live
/// registration services and caches; microseconds). Counters never go down: what a thread, a service or
/// a cache counted stays in the totals after it ends. @par Thread Safety Any thread, while loops run.
snapshot read();

}  // namespace coverbs::metrics
