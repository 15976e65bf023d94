#pragma once
/// @file
/// `datagram_queue_pair`: an unreliable-datagram (UD) queue pair — one queue pair, one receive queue, any number
/// of peers — whose operations are Asio asynchronous operations, as `queue_pair`'s are.
///
/// A send names its destination (`datagram_destination`: an `address_handle`, the peer's queue pair number
/// and Q_Key); a receive reports its sender (`received_datagram::sender`), from which an `address_handle`
/// answers it. Completion queues, credits, the FIFO of waiting operations, the dispatch turn's lists (a turn's
/// sends go out as one `ibv_post_send`, only the last signaled), completion on the handler's executor, loop
/// pools and device events are those of `queue_pair` (queue_pair.hpp); every operation works with any
/// completion token.
///
/// @par What a datagram does not promise
/// UD is unreliable (IBA 9.8.2): a send's success means the datagram left the port, not that it arrived.
/// Datagrams may be lost, arrive out of order (across paths; one path keeps order but may drop) and arrive
/// twice; the application owns acknowledgements, timeouts and retransmission, and must tolerate duplicates.
/// The receiver's device drops a datagram silently — the sender still sees success — when:
/// - the receiving queue pair has no receive posted (UD has no receiver-not-ready retry);
/// - it carries another Q_Key than the receiving queue pair's (`qkey()`; rxe counts it in the port's
///   `qkey_viol_cntr`);
/// - (impossible through coverbs) it is longer than the path MTU: the sending device would drop it and report
///   success (IBA C10-93.1.1), so coverbs refuses it before posting (`errc::datagram_too_long`).
/// A datagram longer than the receive's spans is not dropped: its first bytes fill them, the rest goes to a
/// scratch area coverbs appends to every receive shorter than `max_datagram_size()`, and the receive completes
/// with `errc::datagram_truncated` (rxe would otherwise fail the receive with loc_qp_op_err and move the queue
/// pair every peer shares to the error state). Post receives of `max_datagram_size()` bytes for whole ones.
///
/// @par The global route header is reserved for you
/// A UD receive's first 40 bytes receive the global route header. coverbs puts a slot of its own in front of
/// your spans, so the payload starts at your first byte and `received_datagram::bytes` counts the payload
/// alone; the header is parsed into the sender. With the scratch area above, a receive takes at most
/// `max_spans_per_operation - 2` spans.
///
/// @par Errors and cancellation, unlike RC
/// Refused before posting (the handler is posted; the queue pair stays healthy): `errc::datagram_too_long`
/// (above `max_datagram_size()`), `errc::invalid_qkey` (a destination Q_Key with bit 31 set),
/// `errc::address_handle_mismatch` (no handle, or one of another protection domain), `errc::too_many_spans`.
/// A send that fails at the device (e.g. a bad lkey) moves the queue pair to the error state, as RC's
/// errors do: every outstanding and later operation completes with `wc_errc::wr_flush_err`, `error()` tells
/// what failed first, `reset()` brings it back. A terminal cancellation of a *posted* request is ignored — the
/// request completes when the device completes it (a receive when a datagram arrives, or the queue pair is
/// reset or destroyed): erroring a queue pair every peer shares to recall one request would take them all
/// down. Operations waiting for a credit or in a turn's list are cancelled at once with `operation_aborted`,
/// as for RC. To stop waiting for a datagram, wait on a timer beside the receive, not by cancelling it.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use a queue pair from its completion queue's executor.

#include <coverbs/address_handle.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/fwd.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/detail/ops/datagram_op.hpp>
#include <coverbs/detail/qp_start.hpp>
#include <coverbs/detail/token_check.hpp>
#include <coverbs/detail/wr_op.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>
#include <coverbs/metrics.hpp>
#include <coverbs/received.hpp>

#include <boost/asio/async_result.hpp>

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

namespace coverbs {

class protection_domain;
class shared_receive_queue;

/// The Q_Key rdma_cm gives datagram ids of its UDP port space (RDMA_UDP_QKEY): peers resolved through
/// rdma_cm send with it, so it is `datagram_options::qkey`'s default.
inline constexpr std::uint32_t rdma_cm_udp_qkey = 0x01234567;

/// Where a datagram goes: a path (the address handle, which must outlive the send and belong to the queue
/// pair's protection domain), the peer queue pair's number and its Q_Key (below 2^31).
struct datagram_destination {
  const address_handle* ah = nullptr;
  std::uint32_t qp_num = 0;
  std::uint32_t qkey = rdma_cm_udp_qkey;
};

/// Sizes and attributes of a datagram queue pair.
struct datagram_options {
  std::uint32_t max_send_wr = 128;  ///< send-queue depth (operations in flight; more wait for credits)
  std::uint32_t max_recv_wr = 256;  ///< receive-queue depth, and GRH slots (40 bytes each, one region)
  /// Spans per send / per receive (the receive's GRH slot comes on top: the device is asked for one more).
  std::uint32_t max_send_sge = 1, max_recv_sge = 1;
  std::uint32_t max_inline_data = 64;  ///< as `queue_pair_options::max_inline_data`
  std::uint8_t port = 1;
  int gid_index = -1;  ///< the local GID a receive's sender knows us by (`local_gid()`); -1: device::default_gid
  /// The queue pair's own Q_Key: a datagram carrying another is dropped by the receiving device. Below 2^31
  /// (else `errc::invalid_qkey`).
  std::uint32_t qkey = rdma_cm_udp_qkey;
  std::uint16_t pkey_index = 0;  ///< the partition key's index in the port's P_Key table
  /// Receive from this shared receive queue (made with `srq_options::datagram`, on this queue pair's receive
  /// completion queue, in its protection domain) instead of a receive queue of its own: as
  /// `queue_pair_options::srq`; `async_recv` then fails with `errc::receive_queue_is_shared`.
  shared_receive_queue* srq = nullptr;
};

/// An unreliable-datagram queue pair on a completion queue, ready to send and receive once constructed (UD
/// needs no peer: RESET → INIT → RTR → RTS in the constructor). Move-only.
///
/// Lifetime: the protection domain and completion queue(s) outlive it, and every address handle a send names
/// outlives that send. Destroying it with operations outstanding moves it to the error state and waits
/// (briefly) for the device to flush them; their handlers receive `wr_flush_err` (posted, never run inside the
/// destructor) — receives still posted included.
class datagram_queue_pair {
public:
  using executor_type = completion_queue::executor_type;
  using default_token = detail::default_token_t<executor_type>;

  /// Creates a UD queue pair on `cq` (sends and receives) and brings it to RTS.
  /// @throws system_error: `errc::invalid_qkey` (options.qkey ≥ 2^31), `errc::cq_overcommitted`,
  /// `errc::device_limit_exceeded` (as `queue_pair`), the errno of ibv_reg_mr (the GRH slots),
  /// ibv_create_qp(3) or ibv_modify_qp(3) (naming the transition).
  datagram_queue_pair(protection_domain& pd, completion_queue& cq, const datagram_options& options = {});
  /// As above with separate send and receive completion queues, serviced by the same executor (else
  /// `errc::executor_mismatch`).
  datagram_queue_pair(protection_domain& pd, completion_queue& send_cq, completion_queue& recv_cq,
                      const datagram_options& options = {});

  datagram_queue_pair(datagram_queue_pair&&) noexcept;
  datagram_queue_pair& operator=(datagram_queue_pair&&) noexcept;
  datagram_queue_pair(const datagram_queue_pair&) = delete;
  datagram_queue_pair& operator=(const datagram_queue_pair&) = delete;
  ~datagram_queue_pair();

  executor_type get_executor() const noexcept;
  ibv_qp* native_handle() const noexcept;
  std::uint32_t qp_num() const noexcept;
  /// The queue pair's own counts of operations by kind (posted, completed, failed, bytes) and of credit waits,
  /// counted while `metrics::enable()` is on (all zero when it never was, or in a `-Dmetrics=false` build):
  /// the per-object rows of the process-wide `metrics::snapshot`. @par Thread Safety Any thread, while the
  /// loop runs (relaxed loads: a count made meanwhile may or may not be in it).
  metrics::queue_counters counters() const noexcept;
  /// The queue pair's own Q_Key (`datagram_options::qkey`): what senders put in `datagram_destination::qkey`.
  std::uint32_t qkey() const noexcept;
  /// The local GID and its index (`datagram_options::gid_index`): a receiver reports it as the sender's GID.
  gid_entry local_gid() const;
  std::uint8_t port() const noexcept;
  /// The longest datagram in bytes: the port's active MTU when the queue pair was made
  /// (`port_attributes::active_mtu_bytes()`; 1024 on Soft-RoCE over a 1500-byte Ethernet MTU). Longer sends
  /// are refused before posting with `errc::datagram_too_long`.
  std::size_t max_datagram_size() const noexcept;
  /// The largest send that goes inline (`datagram_options::max_inline_data`, or less if the provider granted less).
  std::uint32_t max_inline_data() const noexcept;
  /// The state as the device reports it (ibv_query_qp(3)).
  ibv_qp_state state() const;
  /// The error that moved the queue pair to the error state (empty while healthy).
  error_code error() const noexcept;
  /// Send requests holding a credit and not yet completed / operations waiting for a send credit.
  std::size_t sends_outstanding() const noexcept;
  std::size_t sends_waiting() const noexcept;
  /// Brings the queue pair back to RTS from any state (RESET, then INIT → RTR → RTS), clearing `error()`.
  /// Every operation must have completed first: @throws system_error `boost::system::errc::device_or_resource_busy`
  /// (EBUSY) naming how many are outstanding, nothing changed; or the errno of ibv_modify_qp naming the transition.
  void reset();
  /// As above; the error in `ec` instead of thrown.
  void reset(error_code& ec) noexcept;

  /// Sends `buf` as one datagram to `to` (IBV_WR_SEND with wr.ud).
  /// @par Completion Signature `void(error_code, std::size_t bytes)`: success once it left the port.
  /// @par Errors before posting as the file comment says; `wr_flush_err` after an earlier error; the errno of
  /// ibv_post_send.
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send_to(const datagram_destination& to, registered_span buf, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), send_op(to, buf, IBV_WR_SEND, 0));
  }

  /// Sends the concatenation of `bufs` (at most `max_send_sge` spans) as one datagram to `to`.
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send_to(const datagram_destination& to, const Spans& bufs, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), send_op(to, detail::span_list::of(bufs), IBV_WR_SEND, 0));
  }

  /// As `async_send_to`, with 32 bits of immediate data (IBV_WR_SEND_WITH_IMM; host byte order), which the
  /// receive reports in `received::imm`.
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send_to_with_imm(const datagram_destination& to, registered_span buf, std::uint32_t imm,
                              Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), send_op(to, buf, IBV_WR_SEND_WITH_IMM, imm));
  }

  /// As above over several spans.
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send_to_with_imm(const datagram_destination& to, const Spans& bufs, std::uint32_t imm,
                              Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), send_op(to, detail::span_list::of(bufs), IBV_WR_SEND_WITH_IMM, imm));
  }

  /// Posts a receive into `buf` (behind coverbs' GRH slot): the payload lands from `buf`'s first byte.
  /// @par Completion Signature `void(error_code, received_datagram)`: payload bytes, immediate data, sender.
  /// @par Errors `wr_flush_err` (an earlier error, `reset()` or destruction), `errc::too_many_spans`,
  /// `errc::datagram_truncated` (a datagram longer than `buf` came: `bytes` is `buf`'s size, the queue pair is
  /// healthy).
  template <completion_token_or_handler<void(error_code, received_datagram)> Token = default_token>
  auto async_recv(registered_span buf, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::datagram_recv_op<registered_span>{buf});
  }

  /// Posts one receive scattered into `bufs` (at most `max_recv_sge`, and `max_spans_per_operation - 2`).
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, received_datagram)> Token = default_token>
  auto async_recv(const Spans& bufs, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token),
                    detail::datagram_recv_op<detail::span_list>{detail::span_list::of(bufs)});
  }

private:
  friend struct detail::impl_access;

  template <class Buffers>
  static detail::datagram_send_op<Buffers> send_op(const datagram_destination& to, const Buffers& bufs,
                                                   ibv_wr_opcode opcode, std::uint32_t imm) noexcept {
    return {bufs, to.ah ? to.ah->native_handle() : nullptr, to.qp_num, to.qkey, opcode, imm};
  }

  // RESET -> INIT -> RTR -> RTS; on failure sets `ec` and returns the transition that failed.
  const char* ready_steps(error_code& ec) noexcept;

  struct initiation {
    datagram_queue_pair* self;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    template <class Handler, class Op>
    void operator()(Handler&& handler, const Op& op) const {
      using node_type = detail::wr_op<Op, std::decay_t<Handler>, executor_type>;
      node_type* node = node_type::create(std::forward<Handler>(handler), *self->io_executor_);
      node->qp = self->impl_.get();
      node->install_cancellation();  // a refused operation completes at once, which clears the slot again
      detail::qp_start(node->qp, node, op);
    }
  };

  template <class Token, class Op>
  auto initiate(Token&& token, Op op) {
    return detail::initiate_checked<Token, typename Op::completion::signature>(initiation{this}, token, std::move(op));
  }

  std::unique_ptr<detail::queue_pair_impl> impl_;
  /// The send completion queue's executor (it outlives this queue pair): what an operation's node keeps, read
  /// here without a call into the library.
  const executor_type* io_executor_ = nullptr;
};

}  // namespace coverbs
