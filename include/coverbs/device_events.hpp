#pragma once
/// @file
/// `device_events`: a device's asynchronous events (ibv_get_async_event(3)) as Asio asynchronous
/// operations, and what the runtime does about them.
///
/// The device's async fd (`ibv_context::async_fd`, made O_NONBLOCK) is waited on as an Asio descriptor for
/// as long as the object exists. Each event is copied, acknowledged at once (ibv_ack_async_event(3): verbs
/// that destroy a queue pair, CQ or SRQ wait for the acknowledgement of their events), acted upon, and
/// then handed to the oldest pending `async_wait_event` — or queued for the next one.
///
/// @par What the runtime does for each event
/// | event | action |
/// |---|---|
/// | IBV_EVENT_PORT_ERR | every coverbs queue pair of this device on that port is moved to the error state (ibv_modify_qp IBV_QPS_ERR); `queue_pair::error()` says `errc::port_error` |
/// | IBV_EVENT_DEVICE_FATAL | every coverbs queue pair of this device is moved to the error state; `errc::device_fatal` |
/// | IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR | that queue pair is moved to the error state (the device already did, IBA 11.6.3); `errc::qp_fatal`, `qp_request_error`, `qp_access_error` |
/// | IBV_EVENT_CQ_ERR | the queue pairs using that completion queue are moved to the error state; `errc::cq_error` |
/// | IBV_EVENT_SRQ_LIMIT_REACHED | the SRQ's pending `shared_receive_queue::async_wait_limit` complete (on the SRQ's executor) |
/// | IBV_EVENT_PORT_ACTIVE, IBV_EVENT_QP_LAST_WQE_REACHED, IBV_EVENT_SRQ_ERR, and every other kind | reported only |
///
/// A queue pair in the error state completes everything outstanding with `wc_errc::wr_flush_err` (or the
/// status the device gives), through its own completion queue on its own executor, and fails later
/// operations the same way: nothing waits forever for a port that went down. The flush is started from
/// this object's executor (ibv_modify_qp is thread-safe), whichever thread the queue pair lives on; the
/// queue pair's own bookkeeping (its `error()`, operations waiting for a send-queue credit) is updated by a
/// function posted to the queue pair's executor. Queue pairs created after the event are not affected.
/// Without a `device_events` object nobody reads the events and none of this happens (a requester then
/// fails with `retry_exc_err` after its retries; a posted receive waits).
///
/// @par Queue
/// Events that arrive while nobody waits are queued, at most `device_events_options::queue_limit` of
/// them. When the queue is full the oldest event is dropped (the runtime has already acted on it) and
/// counted in `device_events::dropped()`.
///
/// @par Lifetime
/// The device outlives the object (for rdma_cm connections, make it on `listener::get_device()` or
/// `connection::get_device()`: the context their queue pairs live on). Like a socket read, the pending
/// wait on the async fd keeps `io_context::run()` busy while the object exists: destroy it (or `close()`)
/// to let `run()` return. As every Asio I/O object, it is destroyed before its execution context (a
/// coroutine frame that owns one may be destroyed by the context's destruction). One object per open
/// device: the async fd has one reader.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use it from its executor (one thread, or a strand).

#include <coverbs/detail/token_check.hpp>
#include <coverbs/detail/device_event_channel.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/device_event.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <type_traits>

namespace coverbs {

class device;

/// How events are kept.
struct device_events_options {
  /// Events kept while nobody waits (at least 1). When full, the oldest is dropped and counted.
  std::size_t queue_limit = 64;
};

/// A device's asynchronous events, read on an executor. Move-only.
class device_events {
public:
  using executor_type = boost::asio::any_io_executor;
  using default_token = detail::default_token_t<executor_type>;

  /// Starts reading `dev`'s events on `ex`.
  /// @throws system_error: EBADF (the device is not open), `errc::device_events_busy` (another
  /// device_events reads this device's events), or the errno of fcntl(2) on the async fd.
  device_events(const executor_type& ex, device& dev, const device_events_options& options = {});
  /// As above, on `ctx`'s executor (e.g. an io_context).
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>, int> = 0>
  device_events(ExecutionContext& ctx, device& dev, const device_events_options& options = {})
      : device_events(executor_type(ctx.get_executor()), dev, options) {}

  device_events(device_events&&) noexcept;
  device_events& operator=(device_events&&) noexcept;
  device_events(const device_events&) = delete;
  device_events& operator=(const device_events&) = delete;
  /// Stops reading (as `close()`).
  ~device_events();

  executor_type get_executor() const noexcept;

  /// Waits for the next event (the oldest queued one, if any).
  /// @par Completion Signature `void(error_code, device_event)`
  /// @par Errors `operation_aborted`: the wait was cancelled (a cancellation slot: terminal, partial or
  /// total; nothing is consumed), or the object was closed or destroyed.
  /// The handler runs on its associated executor, never inside this function.
  template <completion_token_or_handler<void(error_code, device_event)> Token = default_token>
  auto async_wait_event(Token&& token = default_token{}) {
    if constexpr (detail::token_fits<Token, void(error_code, device_event)>())
      return checked_channel().async_receive(std::forward<Token>(token));
  }

  /// Events dropped because the queue was full.
  std::uint64_t dropped() const noexcept;
  /// Events read from the device so far.
  std::uint64_t received() const noexcept;

  /// Stops reading events; pending waits complete with `operation_aborted`. Idempotent.
  void close() noexcept;
  bool is_open() const noexcept;

private:
  detail::event_channel& checked_channel() const;
  // The reader (kept alive by its pending wait on the fd) and the queue of events with the pending waits,
  // owned by this object only: a channel must not outlive its io_context, which the reader may.
  std::shared_ptr<detail::device_events_impl> impl_;
  std::unique_ptr<detail::event_channel> channel_;
};

}  // namespace coverbs
