#pragma once
/// @file
/// `completion_queue`: a CQ whose completion channel is serviced by an Asio executor, so work requests
/// posted by `queue_pair` operations complete as ordinary Asio asynchronous operations.
///
/// How completions are found (docs/architecture.md, "The path of one operation"): the channel fd (O_NONBLOCK) is
/// waited on as an Asio descriptor while work is outstanding; on readiness every pending event is taken
/// with ibv_get_cq_event, events are acknowledged in batches (ibv_ack_cq_events), the CQ is re-armed
/// (ibv_req_notify_cq) and polled until empty *after* arming, so a completion that lands between the last
/// poll and the arming is never lost. Spurious wake-ups are harmless, and so is a wait that ends with an
/// error the channel did not cause (`completion_queue_stats::stray_wakeups`): the queue looks and waits again. Each
/// completion's wr_id is the operation it belongs to, whose handler then runs on its associated executor.
///
/// With `completion_queue_options::spin` > 0 the queue polls for that long after the last completion
/// before it arms and sleeps (adaptive mode); `spin_forever` busy-polls while work is outstanding (the
/// lowest latency, one core per loop: what perftest does by default).
///
/// @par Fairness
/// The queue shares its executor with timers, sockets and every other handler, so it never keeps the loop
/// to itself. One *dispatch turn* (one handler of the queue's own, run by the executor) takes at most
/// `completion_queue_options::max_completions_per_turn` completions from the queue, and fewer when they take
/// longer than `turn_quota` (checked every 4 completions), and completes their operations; when it stopped at
/// either bound it queues its continuation on the executor (`defer`) and returns, so
/// every handler that was ready before (a timer's expiry, a lease's time-to-live, a socket read,
/// `io_context::stop()`) runs before the next batch. In every mode — event-driven, adaptive, busy-polling —
/// at most `max_completions_per_turn` completions of one queue run between two chances of the rest of the
/// loop, and with slow handlers at most `turn_quota` plus seven handlers (see `turn_quota`). A completion whose handler
/// is associated with the queue's executor runs inside the turn (dispatch); one associated with another executor (a
/// strand, another loop) is posted there. The drain-after-arm guarantee is kept: after arming, the queue is polled
/// again, in bounded turns, before the queue waits on its channel. Handlers never run inside an initiating function.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use the queue and its queue pairs from its executor
/// (one thread, or a strand).

#include <coverbs/detail/fwd.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

struct ibv_cq;

namespace coverbs {

class device;
/// How a completion queue is created and how it waits.
struct completion_queue_options {
  /// Busy-poll while work is outstanding, never sleeping on the channel.
  static constexpr std::chrono::nanoseconds spin_forever = std::chrono::nanoseconds::max();

  /// Completion-queue entries (`cqe` of ibv_create_cq). Every queue pair using the queue reserves its
  /// send and receive depths from it, so it never overflows; creation fails with `errc::cq_overcommitted`
  /// when they would not fit.
  int depth = 4096;
  /// 0: event-driven (arm, sleep on the channel). > 0: adaptive — poll for this long after the last
  /// completion before arming. `spin_forever`: busy polling.
  std::chrono::nanoseconds spin{0};
  /// Completion vector (interrupt) of the channel; 0 .. num_comp_vectors-1.
  int comp_vector = 0;
  /// Events taken before they are acknowledged with one ibv_ack_cq_events call.
  unsigned ack_batch = 64;
  /// Completions one dispatch turn handles at most before it yields the loop (see Fairness above);
  /// at least 1 (0 is refused with EINVAL). Smaller: less delay for other handlers on the loop (each
  /// completion's handler runs inside the turn); larger: fewer trips through the loop's scheduler per
  /// completion under load (natively, a yield costs about 700 instructions: Asio's scheduler round trip, its
  /// mutex and the io_uring poll, and the re-posted step). 16 is UCX's per-progress default
  /// (`UCX_IB_TX_MAX_POLL` / `RX_MAX_POLL`).
  unsigned max_completions_per_turn = 16;
  /// How long a dispatch turn may run before it yields, in microseconds; 0: no time bound (the count alone).
  /// A turn reads the clock only from its third completion on (a turn of one or two — a lone operation's —
  /// never does): after the third it takes the time, and after every fourth (the 4th, 8th, 12th, ...) it stops
  /// when more than `turn_quota` has passed since then: at worst three handlers before the reading, handlers
  /// until the quota is over, and four more (the quota plus seven handlers), and never more than
  /// `max_completions_per_turn`. `poll()` is bounded by the count alone. So where handlers are cheap (natively, a
  /// completion and its handler take well under a microsecond) a turn runs up to `max_completions_per_turn`, and where
  /// they are slow it stops at four or eight: in the emulated Soft-RoCE guest (a completion and its handler take
  /// 40-200 us there) the p99 lateness of a 1 ms timer beside a saturating read / write stream measured 2.7 /
  /// 1.4 ms with these defaults (7 Dec 2026; the fairness target is 5 ms), against 14.3 / 8.4 ms with a bound
  /// of 16 and no quota (`bench_fairness --max-completions-per-turn --turn-quota-us`). Lower it where other
  /// handlers on the loop are latency-sensitive; 0 turns the time bound off. Negative: EINVAL.
  std::chrono::microseconds turn_quota{50};
};

/// Counters of a completion queue's dispatch loop.
struct completion_queue_stats {
  std::uint64_t events = 0;            ///< channel events taken (ibv_get_cq_event)
  std::uint64_t spurious_wakeups = 0;  ///< readiness with no event pending
  /// Readiness waits on the channel that ended with an error the channel did not cause, each handled as a
  /// wake-up (then usually also counted in spurious_wakeups). Boost 1.81's io_uring backend hands the result of
  /// its own cancellation and timeout-removal requests (after `cancel()`, or a `run_for` woken early) to
  /// whichever operation last used their submission entry; fixed in Boost 1.82. 0 with the epoll backend.
  std::uint64_t stray_wakeups = 0;
  std::uint64_t arms = 0;         ///< ibv_req_notify_cq calls
  std::uint64_t polls = 0;        ///< ibv_poll_cq calls
  std::uint64_t completions = 0;  ///< work completions dispatched
  std::uint64_t yields = 0;       ///< dispatch turns that stopped at max_completions_per_turn or turn_quota
  /// For the queue pairs whose send completion queue this is: ibv_post_send calls (doorbells), and the
  /// send work requests they posted (requests / doorbells = the mean list length; see queue_pair.hpp,
  /// "When a request is posted").
  std::uint64_t send_doorbells = 0;
  std::uint64_t send_requests = 0;
};

/// A completion queue bound to an executor. Move-only.
///
/// Lifetime: the device outlives the queue; the queue outlives every queue pair that uses it.
/// Destruction acknowledges every event taken and never blocks on the channel.
class completion_queue {
public:
  using executor_type = boost::asio::any_io_executor;

  /// Creates the queue and its completion channel on `dev`, serviced by `ex`.
  /// @throws system_error: `errc::device_limit_exceeded` for a depth above the device's max_cqe (the text
  /// names both); the errno of ibv_create_comp_channel(3) / ibv_create_cq(3) (EINVAL: a bad comp_vector);
  /// EINVAL for a depth below 1, max_completions_per_turn of 0 or a negative turn_quota.
  completion_queue(const executor_type& ex, device& dev, const completion_queue_options& options = {});
  /// As above, serviced by `ctx`'s executor (e.g. an io_context).
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>, int> = 0>
  completion_queue(ExecutionContext& ctx, device& dev, const completion_queue_options& options = {})
      : completion_queue(executor_type(ctx.get_executor()), dev, options) {}

  completion_queue(completion_queue&&) noexcept;
  completion_queue& operator=(completion_queue&&) noexcept;
  completion_queue(const completion_queue&) = delete;
  completion_queue& operator=(const completion_queue&) = delete;
  ~completion_queue();

  executor_type get_executor() const noexcept;
  ibv_cq* native_handle() const noexcept;
  /// Entries the queue holds (as created; the provider may have rounded it up).
  int depth() const noexcept;
  /// Work requests posted through queue pairs on this queue whose completion has not been dispatched.
  std::size_t outstanding() const noexcept;
  completion_queue_stats stats() const noexcept;

  /// Polls now, without waiting, and dispatches what it finds, at most `max_completions_per_turn` (`turn_quota`
  /// does not apply: call again while it returns that many). @returns completions dispatched.
  /// For callers that drive their own polling loop; the queue polls by itself otherwise.
  std::size_t poll();

private:
  friend struct detail::impl_access;
  std::shared_ptr<detail::cq_impl> impl_;
};

}  // namespace coverbs
