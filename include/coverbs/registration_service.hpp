#pragma once
/// @file
/// Asynchronous memory registration: `registration_service` runs ibv_reg_mr(3) / ibv_dereg_mr(3) /
/// ibv_rereg_mr(3) on worker threads, so pinning 512 MiB (tens of milliseconds) never stalls an event
/// loop, and completes each request on the requester's executor:
///
/// @code
/// coverbs::registration_service service(io.get_executor(), {.threads = 2});
/// coverbs::memory_region mr = co_await coverbs::reg_mr(service, pd, buffer, access::local_write);
/// coverbs::shared_region part = co_await coverbs::reg_shared(service, pd, slice, access::local_write);
/// @endcode
///
/// Three modes: pure asynchronous (`reg_mr`, one region per request, owned by the caller), batch
/// (`reg_shared`: requests for overlapping or adjacent ranges with the same PD and rights, made in the same
/// turn of the caller's loop or still queued, share one registration), and prefetch (`buffer_pool`).
///
/// Every request moves through posted → running → completed | failed | cancelled; the transitions are
/// atomic, so a cancellation racing a worker that finishes has exactly one outcome. When a cancellation wins:
///  - queued (no worker has taken the request): always, at once — the handler gets `operation_aborted` from
///    its executor's next turn and the verb never runs (`registration_stats::cancels_queued`);
///  - running a registration: when the verb returns, after deregistering what it produced
///    (`cancels_running`);
///  - running `dereg`/`rereg`, or done (the verb returned, the handler is posted): never, the handler gets the
///    result (`cancels_late`); after the handler ran the cancellation is not seen at all.
/// A cancellation takes effect when the emitting thread delivers it: a busy loop delivers late. Figures of
/// a device run are in docs/registration.md.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/detail/registration_core.hpp>
#include <coverbs/error.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/protection_domain.hpp>
#include <coverbs/registrar.hpp>
#include <coverbs/shared_region.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

namespace coverbs {

/// Retries of ibv_reg_mr answering ENOMEM or EAGAIN (pinning can fail transiently under memory pressure).
struct retry_policy {
  /// Tries in all (1: no retry).
  unsigned attempts = 4;
  /// Pause before the first retry; each further pause is `multiplier` times longer, up to `max_backoff`.
  std::chrono::microseconds first_backoff{1000};
  unsigned multiplier = 4;
  std::chrono::microseconds max_backoff{50000};
};

/// How the workers are scheduled against the threads that wait for them (sched(7)).
enum class worker_scheduling : std::uint8_t {
  /// SCHED_OTHER, like any thread.
  normal,
  /// SCHED_BATCH: a woken worker never preempts the thread that woke it, so an event loop on the same CPU
  /// keeps running while the kernel pins pages; workers still get their fair share of CPU.
  batch,
  /// SCHED_IDLE: any other runnable thread preempts a worker at once; registration may starve while the
  /// CPUs are saturated.
  idle,
};

struct registration_options {
  /// Worker threads (at least 1). Registrations of one process serialize partly in the kernel
  /// (mmap_lock), so more than a few rarely helps.
  std::size_t threads = 1;
  retry_policy retry{};
  /// The workers' scheduling policy (sched(7)).
  worker_scheduling scheduling = worker_scheduling::batch;
};

/// What the service has done; read with `registration_service::stats()`. Counters only grow except the
/// gauges (`held`, `bytes_held`, `shared_live`, `in_flight`).
struct registration_stats {
  std::uint64_t registered = 0;   ///< successful ibv_reg_mr calls
  std::uint64_t deregistered = 0; ///< successful ibv_dereg_mr calls (cancellations, shared regions, dereg)
  std::uint64_t handed_over = 0;  ///< regions whose ownership went to a caller (`reg_mr`, `rereg`)
  std::uint64_t taken_back = 0;   ///< regions callers gave to the service (`dereg`, `rereg`)
  std::int64_t bytes_held = 0;    ///< bytes pinned by registrations the service (or a shared_region) owns
  std::uint64_t shared_live = 0;  ///< shared registrations alive (batch mode, cache)
  std::uint64_t completed = 0, failed = 0, cancelled = 0; ///< requests by outcome
  std::uint64_t retries = 0;                              ///< ENOMEM/EAGAIN retries
  std::uint64_t merged = 0; ///< reg_shared requests served by a registration another request asked for
  /// Merged registrations that failed and were retried request by request (so only the bad requests fail).
  std::uint64_t merges_split = 0;
  std::uint64_t rereg_in_place = 0, rereg_fallbacks = 0;
  /// Cancellations by what they found: the request still queued (it completes with operation_aborted at
  /// once), running (operation_aborted when the verb returns; a registration is undone), or done (the verb
  /// had finished, or a dereg/rereg was running: the request completes with its result). A cancellation
  /// that arrives after the handler ran is not counted.
  std::uint64_t cancels_queued = 0, cancels_running = 0, cancels_late = 0;
  std::uint64_t in_flight = 0; ///< requests not yet completed

  /// Registrations that exist and are not the callers' (0 when nothing is left behind).
  std::int64_t held() const noexcept {
    return static_cast<std::int64_t>(registered + taken_back) - static_cast<std::int64_t>(deregistered + handed_over);
  }
};

/// What `rereg` hands back: the region (the old one, unchanged, when the request failed) and how it
/// was changed.
struct rereg_result {
  memory_region region;
  rereg_method method = rereg_method::in_place;
};

/// What `rereg` changes; unset fields keep the region's current value.
struct rereg_request {
  std::optional<std::span<std::byte>> buffer = std::nullopt; ///< IBV_REREG_MR_CHANGE_TRANSLATION
  std::optional<access> rights = std::nullopt;               ///< IBV_REREG_MR_CHANGE_ACCESS
  protection_domain* pd = nullptr;                           ///< IBV_REREG_MR_CHANGE_PD
};

/// Worker threads that register memory, and the executor requests complete on when their handler has no
/// associated executor.
///
/// Lifetime: protection domains outlive the requests naming them. Destroying the service (or `shutdown()`)
/// completes every request in flight with `operation_aborted`, deregisters what running requests produce,
/// and joins the workers; shared_regions it produced stay valid after it is gone.
/// @par Thread Safety
/// Thread-safe: requests may be made from any thread, and one service may be shared by every loop of a
/// `loop_pool` (its queue and counters are guarded by a mutex; registration runs on its own workers). A
/// request completes on its handler's associated executor — the requesting member's for a coroutine's
/// `use_awaitable` — else on the service's executor, never on a worker thread.
class registration_service {
public:
  using executor_type = boost::asio::any_io_executor;

  /// @param ex        where handlers without an associated executor complete
  /// @param options   worker count and retry policy
  /// @param verbs     the registrar (default: libibverbs)
  explicit registration_service(executor_type ex, const registration_options& options = {},
                                std::shared_ptr<registrar> verbs = verbs_registrar());
  /// As above with `context.get_executor()` (e.g. an `io_context`).
  template <class ExecutionContext>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  explicit registration_service(ExecutionContext& context, const registration_options& options = {},
                                std::shared_ptr<registrar> verbs = verbs_registrar())
      : registration_service(executor_type(context.get_executor()), options, std::move(verbs)) {}
  registration_service(const registration_service&) = delete;
  registration_service& operator=(const registration_service&) = delete;
  ~registration_service();

  executor_type get_executor() const noexcept { return ex_; }
  registration_stats stats() const noexcept { return core_->stats(); }
  /// See the class comment; idempotent. Requests made afterwards complete with operation_aborted.
  void shutdown() noexcept { core_->shutdown(); }

  /// @private
  const std::shared_ptr<detail::registration_core>& core() const noexcept { return core_; }

private:
  executor_type ex_;
  std::shared_ptr<detail::registration_core> core_;
};

/// The process-wide service the `reg_mr` overloads without a service argument use: one worker. Created on
/// first use. Its own executor is Asio's system executor (it has no loop of its own), so those overloads
/// never fall back on it: see them. A request made on it directly with a handler that has no associated
/// executor completes on a thread of the system executor.
registration_service& default_registration_service();

/// Registers `buffer` with `pd` granting `rights`, on a worker thread.
/// @param buffer  the bytes (page granularity is the kernel's business; any range works)
/// @par Completion Signature
/// `void(error_code, memory_region)`; the region is the caller's (deregistered by its destructor, or
/// asynchronously with `dereg`).
/// @par Errors
/// From ibv_reg_mr(3), after classification: `errc::rights_need_local_write`, `errc::empty_buffer`,
/// `errc::invalid_registration` (EINVAL), `errc::buffer_not_mapped` (EFAULT),
/// `errc::mw_bind_needs_writable_memory` (EFAULT: read-only pages with mw_bind), `errc::memlock_exhausted`
/// (ENOMEM after the retries; the message prints RLIMIT_MEMLOCK), EAGAIN after the retries, EOPNOTSUPP (a
/// right the device lacks), `operation_aborted` (cancelled, or the service shut down).
/// @par Per-Operation Cancellation
/// All types. Still queued: completes with operation_aborted at once (posted to the handler's executor; the
/// verb never runs). Running: completes with operation_aborted when the verb returns, after deregistering
/// what it registered. Done (the verb returned): completes with the result.
/// @par Thread Safety
/// Any thread. The handler runs on its associated executor (else the service's), never inside this call.
/// @see ibv_reg_mr(3)
template <completion_token_or_handler<void(error_code, memory_region)> CompletionToken =
              detail::default_token_t<registration_service::executor_type>>
auto reg_mr(registration_service& service, protection_domain& pd, std::span<std::byte> buffer, access rights,
            CompletionToken&& token = {});
/// `reg_mr` on `default_registration_service()`, for handlers that bring their executor: a coroutine's
/// `use_awaitable` (it completes on the coroutine's executor), `asio::bind_executor(ex, callback)`, a strand,
/// `use_future`. A handler without an associated executor (a plain callback, `detached`) is refused at compile
/// time — nothing would say which loop runs it; use the overloads below that name the executor.
template <completion_token_or_handler<void(error_code, memory_region)> CompletionToken =
              boost::asio::use_awaitable_t<>>
auto reg_mr(protection_domain& pd, std::span<std::byte> buffer, access rights, CompletionToken&& token = {});
/// `reg_mr` on `default_registration_service()`; the handler runs on its associated executor, else on `ex`
/// (as an Asio I/O object's executor), never inside this call and never on the worker.
template <typename Executor, completion_token_or_handler<void(error_code, memory_region)> CompletionToken =
                                  detail::default_token_t<Executor>>
  requires detail::is_any_executor_v<Executor>
auto reg_mr(const Executor& ex, protection_domain& pd, std::span<std::byte> buffer, access rights,
            CompletionToken&& token = {});
/// As above with `context.get_executor()` (e.g. an `io_context`).
template <typename ExecutionContext, completion_token_or_handler<void(error_code, memory_region)>
                                        CompletionToken = boost::asio::use_awaitable_t<>>
  requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
auto reg_mr(ExecutionContext& context, protection_domain& pd, std::span<std::byte> buffer, access rights,
            CompletionToken&& token = {});

/// Batch mode: like `reg_mr`, but the registration may be shared. Requests with the same PD and rights whose
/// ranges overlap or touch, made in the same turn of the caller's executor or still queued when a worker
/// gets to them, are served by one registration of their union.
/// @par Completion Signature
/// `void(error_code, shared_region)`: the requested bytes inside the shared registration.
/// @par Errors
/// As `reg_mr`. When the registration of a merged batch fails (e.g. EFAULT: one request's pages are read-only
/// while `rights` asks for write access), each request is registered on its own, so only the requests at
/// fault fail (`registration_stats::merges_split`).
/// @par Per-Operation Cancellation
/// As `reg_mr`; a cancelled request gives up its share (the registration lives on while others hold it).
/// @see ibv_reg_mr(3)
template <completion_token_or_handler<void(error_code, shared_region)> CompletionToken =
              detail::default_token_t<registration_service::executor_type>>
auto reg_shared(registration_service& service, protection_domain& pd, std::span<std::byte> buffer, access rights,
                CompletionToken&& token = {});

/// Deregisters `region` on a worker thread.
/// @par Completion Signature
/// `void(error_code, memory_region)`: on success the region is empty; on failure it is handed back, still
/// registered: `errc::region_has_bound_windows` (memory windows are still bound to it — invalidate them
/// first; checked before the verb runs, as `memory_region::deregister`), or the errno of ibv_dereg_mr(3).
/// @par Per-Operation Cancellation
/// All types, only before the verb runs (the region is handed back); a running deregistration completes.
/// @see ibv_dereg_mr(3)
template <completion_token_or_handler<void(error_code, memory_region)> CompletionToken =
              detail::default_token_t<registration_service::executor_type>>
auto dereg(registration_service& service, memory_region&& region, CompletionToken&& token = {});

/// Changes the translation (buffer), rights or PD of `region` on a worker thread: ibv_rereg_mr(3) where
/// the provider supports it, else (EOPNOTSUPP, as rxe) registers the new region first and then deregisters
/// the old one, so a failure leaves the old region intact. `rereg_result::method` says which happened.
/// @par Completion Signature
/// `void(error_code, rereg_result)`.
/// @par Errors
/// `errc::region_has_bound_windows` (memory windows are still bound to the region: invalidate them first;
/// nothing runs); as `reg_mr` for the new parameters; the errno of ibv_rereg_mr(3) other than EOPNOTSUPP.
/// @par Per-Operation Cancellation
/// All types, only before the verb runs; a running rereg completes.
/// @see ibv_rereg_mr(3)
template <completion_token_or_handler<void(error_code, rereg_result)> CompletionToken =
              detail::default_token_t<registration_service::executor_type>>
auto rereg(registration_service& service, memory_region&& region, const rereg_request& change,
           CompletionToken&& token = {});

} // namespace coverbs

#include <coverbs/impl/registration_service.hpp>
