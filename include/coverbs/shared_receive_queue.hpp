#pragma once
/// @file
/// `shared_receive_queue`: a shared receive queue (SRQ, ibv_create_srq(3), IBA 10.2.9) whose receives are
/// Asio asynchronous operations. Receives are posted once for many queue pairs: a message sent to any
/// queue pair attached to the SRQ consumes the SRQ's oldest posted receive, so a server with N connections
/// needs receive buffers for the messages in flight, not N receive queues' worth.
///
/// @par The completion queue
/// The completion of an SRQ receive arrives on the *receive completion queue of the queue pair the message
/// came to* (IBA 11.4.2.1), which is not known when the receive is posted. coverbs therefore binds an SRQ to
/// one completion queue, `recv_cq`, and every queue pair attached to it must use that queue as its receive
/// completion queue (`queue_pair_options::srq`; otherwise `errc::srq_cq_mismatch`). So every completion of
/// the SRQ is found by the loop that services `recv_cq`, on the SRQ's executor, and completes its handler on
/// the handler's associated executor (default: the SRQ's) — as for a queue pair's receive. The queue pairs
/// may have their own send completion queues (on the same executor).
///
/// @par Receive credits
/// At most `srq_options::max_wr` receives are posted at a time; more `async_recv` calls wait in FIFO order
/// and are posted as receives complete — they never fail for lack of room.
///
/// @par Low watermark
/// `set_limit(n)` arms the SRQ limit (ibv_modify_srq(3), IBV_SRQ_LIMIT): when fewer than `n` receives
/// remain posted, the device raises IBV_EVENT_SRQ_LIMIT_REACHED once and disarms the limit (IBA 11.5.2.4:
/// the limit is one-shot). `async_wait_limit` completes on that event; call `set_limit` again to re-arm.
/// The event is read by the device's `device_events` object: without one nobody reads it and
/// `async_wait_limit` waits until the SRQ is destroyed.
///
/// @par Cancellation
/// A receive still waiting for a credit is cancelled at once (terminal, partial or total) with
/// `operation_aborted`. A posted receive cannot be recalled: verbs has no verb that removes one receive
/// from an SRQ, and unlike a queue pair an SRQ has no error state that would flush it. Cancellation of a
/// posted receive is therefore not supported (ignored): it completes when a message consumes it, or with
/// `operation_aborted` when the SRQ is destroyed. A pending `async_wait_limit` is cancelled at once.
///
/// @par Lifetime
/// The protection domain and `recv_cq` outlive the SRQ. Destroying the SRQ object while queue pairs are still
/// attached to it leaves the SRQ itself alive (ibv_destroy_srq(3) refuses an SRQ in use, and its posted receives
/// still serve them) until the last of them is destroyed. Then, or at once when none is attached, every posted
/// and waiting receive and a pending `async_wait_limit` complete with `operation_aborted` (posted to their
/// executors, never run inside a destructor); completions already in `recv_cq` are delivered first. As every Asio I/O object, it is destroyed before its execution context.
///
/// @par A queue pair that fails
/// A queue pair attached to the SRQ that goes to the error state (its peer vanished, a device event) does
/// not affect the SRQ: receives it had already taken complete with its `qp_num` and `wr_flush_err` (or the
/// device's status); the rest stay posted for the other queue pairs. A server treats such a completion as
/// the end of that connection, not of the SRQ.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use an SRQ (and its queue pairs) from its completion
/// queue's executor.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/fwd.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/detail/ops/results.hpp>
#include <coverbs/detail/ops/scatter_gather.hpp>
#include <coverbs/detail/ops/srq_recv_op.hpp>
#include <coverbs/detail/srq_start.hpp>
#include <coverbs/detail/wr_op.hpp>
#include <coverbs/error.hpp>
#include <coverbs/metrics.hpp>
#include <coverbs/received.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

namespace coverbs {

class protection_domain;

/// Sizes of a shared receive queue (ibv_srq_init_attr).
struct srq_options {
  /// Receives posted at a time (ibv_srq_attr::max_wr); at most the device's max_srq_wr. Also reserved in
  /// the completion queue (its depth must hold them with the queue pairs' send queues).
  std::uint32_t max_wr = 1024;
  /// Scatter entries per receive (ibv_srq_attr::max_sge); at most the device's max_srq_sge.
  std::uint32_t max_sge = 1;
  /// Initial low watermark (ibv_srq_attr::srq_limit, see `set_limit`); 0: not armed.
  std::uint32_t limit = 0;
  /// The SRQ serves datagram (UD) queue pairs (`datagram_options::srq`), and only those
  /// (`errc::srq_transport_mismatch` otherwise): as a datagram queue pair's own receive queue, every receive
  /// gets a registered 40-byte GRH slot in front of its span (the device is asked for max_sge + 2 entries) and
  /// a scratch area behind it when shorter than the MTU of `port` (`errc::datagram_truncated`), and reports
  /// `srq_received::sender`.
  bool datagram = false;
  std::uint8_t port = 1;  ///< with `datagram`: the port whose active MTU bounds a datagram
};

/// A shared receive queue on a completion queue. Move-only.
class shared_receive_queue {
public:
  using executor_type = completion_queue::executor_type;
  using default_token = detail::default_token_t<executor_type>;

  /// Creates an SRQ in `pd` whose receives complete through `recv_cq` (see "The completion queue").
  /// @throws system_error: `errc::device_limit_exceeded` (max_wr above the device's max_srq_wr, max_sge
  /// above max_srq_sge, limit above max_wr: the text names the option, the value and the limit),
  /// `errc::cq_overcommitted` (the queue's depth cannot hold max_wr more completions), or the errno of
  /// ibv_create_srq(3).
  shared_receive_queue(protection_domain& pd, completion_queue& recv_cq, const srq_options& options = {});

  shared_receive_queue(shared_receive_queue&&) noexcept;
  shared_receive_queue& operator=(shared_receive_queue&&) noexcept;
  shared_receive_queue(const shared_receive_queue&) = delete;
  shared_receive_queue& operator=(const shared_receive_queue&) = delete;
  ~shared_receive_queue();

  executor_type get_executor() const noexcept;
  ibv_srq* native_handle() const noexcept;
  /// Receives that may be posted at a time (`srq_options::max_wr`).
  std::uint32_t max_wr() const noexcept;
  /// Receives posted and not yet completed / `async_recv` calls waiting for a credit.
  std::size_t posted() const noexcept;
  std::size_t waiting() const noexcept;
  /// Queue pairs created with `queue_pair_options::srq` = this and not yet destroyed.
  std::size_t attached() const noexcept;
  /// The shared receive queue's own counts of operations by kind (posted, completed, failed, bytes) and of credit waits,
  /// counted while `metrics::enable()` is on (all zero when it never was, or in a `-Dmetrics=false` build):
  /// the per-object rows of the process-wide `metrics::snapshot`. @par Thread Safety Any thread, while the
  /// loop runs (relaxed loads: a count made meanwhile may or may not be in it).
  metrics::queue_counters counters() const noexcept;

  /// Posts a receive into `buf` (ibv_post_srq_recv(3)); a message to any attached queue pair may consume it.
  /// @par Completion Signature `void(error_code, srq_received)`: bytes placed, immediate data, invalidated
  /// rkey, and the queue pair it arrived on.
  /// @par Errors `errc::message_too_long` (before posting: `buf` above 2^31 bytes), `wc_errc::loc_len_err`
  /// (the message was larger than `buf`; the queue pair it arrived on goes to the error state),
  /// `wc_errc::wr_flush_err` (the queue pair that had taken the receive went to the error state; the
  /// receive is consumed), `operation_aborted` (the SRQ was destroyed), errno of ibv_post_srq_recv,
  /// `errc::foreign_remote_invalidation` (the message was a send-with-invalidate naming a window not bound
  /// through the queue pair it arrived on: the peer is hostile; the result is still reported, `qp_num`
  /// names the queue pair to disconnect; the queue pair is not moved to the error state).
  template <completion_token_or_handler<void(error_code, srq_received)> Token = default_token>
  auto async_recv(registered_span buf, Token&& token = default_token{}) {
    return detail::initiate_checked<Token, void(error_code, srq_received)>(recv_initiation{this}, token,
                                                                               detail::srq_recv_op{buf});
  }

  /// Posts one receive scattered into `bufs` (a `registered_span_sequence`, buffer.hpp): a message fills them
  /// in order (`srq_received::bytes` is what arrived in all of them); empty spans are left out of the list.
  /// The sequence is copied when the operation is initiated.
  /// @par Errors As for one span, and `errc::too_many_spans` before posting: more spans than
  /// `srq_options::max_sge` (or `max_spans_per_operation`).
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, srq_received)> Token = default_token>
  auto async_recv(const Spans& bufs, Token&& token = default_token{}) {
    return detail::initiate_checked<Token, void(error_code, srq_received)>(
        recv_initiation{this}, token, detail::scatter_srq_recv_op{detail::span_list::of(bufs)});
  }

  /// Arms the low watermark (ibv_modify_srq(3), IBV_SRQ_LIMIT): IBV_EVENT_SRQ_LIMIT_REACHED is raised once
  /// when fewer than `n` receives remain posted; 0 disarms it. Forgets an event that arrived while nobody
  /// waited. @throws system_error `errc::device_limit_exceeded` (`n` above max_wr), or the verb's errno.
  void set_limit(std::uint32_t n);

  /// Waits for the next IBV_EVENT_SRQ_LIMIT_REACHED of this SRQ (one that arrived since the last
  /// `set_limit` while nobody waited completes it at once, posted). Every pending wait completes on one
  /// event. Needs a `device_events` object on the device.
  /// @par Completion Signature `void(error_code)`; `operation_aborted` when cancelled or when the SRQ is
  /// destroyed.
  template <completion_token_or_handler<void(error_code)> Token = default_token>
  auto async_wait_limit(Token&& token = default_token{}) {
    return detail::initiate_checked<Token, void(error_code)>(limit_initiation{this}, token);
  }

private:
  friend struct detail::impl_access;

  struct recv_initiation {
    shared_receive_queue* self;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    /// `Op`: `detail::srq_recv_op` or `detail::scatter_srq_recv_op`.
    template <class Handler, class Op>
    void operator()(Handler&& handler, const Op& op) const {
      using node_type = detail::wr_op<Op, std::decay_t<Handler>, executor_type>;
      node_type* node = node_type::create(std::forward<Handler>(handler), detail::srq_executor(self->impl_.get()));
      node->srq = self->impl_.get();
      const error_code ec = op.prepare(node->srq, *node);
      if (!ec) node->install_cancellation();
      detail::srq_start(node->srq, node, ec);
    }
  };
  /// `async_wait_limit`'s operation: no work request, completed by the device event.
  struct wait_limit_op {
    using completion = detail::status_result;
  };
  struct limit_initiation {
    shared_receive_queue* self;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    template <class Handler>
    void operator()(Handler&& handler) const {
      using node_type = detail::wr_op<wait_limit_op, std::decay_t<Handler>, executor_type>;
      node_type* node = node_type::create(std::forward<Handler>(handler), detail::srq_executor(self->impl_.get()));
      node->srq = self->impl_.get();
      node->install_cancellation();
      detail::srq_start_wait_limit(node->srq, node);
    }
  };

  // Shared with the queue pairs attached to it: destroyed before them, the SRQ lives on until the last is gone.
  std::shared_ptr<detail::shared_receive_queue_impl> impl_;
};

}  // namespace coverbs
