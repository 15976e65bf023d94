#pragma once
/// @file
/// `queue_pair`: a reliable-connected (RC) queue pair whose operations are Asio asynchronous operations.
///
/// Each `async_*` function makes one work request (over one registered span, or a scatter/gather list of
/// several) whose wr_id is the operation itself; the completion queue's loop completes the handler on the
/// handler's associated executor with the handler's associated allocator (docs/architecture.md, "The path of
/// one operation"). Every operation works with any
/// completion token (`deferred` by default, which `co_await` awaits directly in a coroutine; `use_awaitable`,
/// callbacks, `use_future`, `as_tuple`, ...).
///
/// @par When a request is posted, and when it is signaled
/// - Initiated outside a dispatch turn (from `main`, a timer's or a socket's handler, a posted function): the
///   request is posted at once, alone and signaled — a lone operation is never held back.
/// - Initiated inside a dispatch turn — by a completion handler the completion queue runs, or a coroutine that
///   handler resumes — a send-queue request joins its queue pair's list, which is posted before the turn
///   polls the completion queue again (once the handlers of the completions it polled have run) and when the
///   turn ends, as one linked list in one `ibv_post_send` (one doorbell) with only its last request signaled.
///   A list holds at most min(32, max(1, max_send_wr / 2)) requests (a full one is posted at once), so the send
///   queue never holds more unsignaled requests than that in a row and never overruns (credits are taken when
///   a request joins the list). Rebind chains and type-1 binds (`ibv_bind_mw`) are posted at once, after the
///   list the turn holds for their queue pair, so the send queue keeps initiation order; receives are posted at
///   once (the receive queue keeps its own order). A handler that polls a completion queue in place
///   (`completion_queue::poll`) posts every list first, so it can wait in place for its own request; one that
///   runs another `io_context` in place (`poll`, `run_one`) leaves the requests that loop's handlers initiate
///   in the lists until its own turn polls again or ends.
/// - An RC send queue completes in order: when a signaled request completes, every unsignaled request posted
///   before it has completed too. Their handlers run then, in posting order, each exactly once, and their
///   credits come back then. A handler may rely on: every operation initiated earlier on the same queue pair
///   has completed (its handler ran, or runs next in this turn). A failed request produces its own completion
///   even unsignaled: it gets its error, the requests posted after it `wc_errc::wr_flush_err`.
/// - One dispatch turn runs at most `max_completions_per_turn` completions' handlers, each of which may
///   retire up to a list's length of unsignaled operations: the user work of a turn stays bounded.
/// `completion_queue_stats::send_doorbells` / `send_requests` show how long the lists are.
///
/// Send-queue credits: when the send (or receive) queue is full, an operation waits its turn in FIFO order
/// instead of failing. A post that fails completes the handler with the verb's errno — never from inside
/// the initiating function. A send-queue operation on a queue pair that has not reached RTS since it was
/// created or reset (not yet connected) is refused before posting with `errc::queue_pair_not_ready`, the
/// queue pair unchanged.
///
/// Errors: a failed work completion is reported as its `wc_errc`. The first one moves the queue pair to the
/// error state (IBA 10.8.3): every outstanding and every later operation then completes with
/// `wc_errc::wr_flush_err`, and `error()` tells what failed first. Send operations keep initiation order in
/// this too: one that was never posted (waiting for a credit, in a turn's list, or initiated after the error)
/// completes after every send request posted before it has been flushed. Bad requests that would otherwise push a
/// healthy queue pair into the error state are refused before posting with an `errc`.
///
/// @par Per-Operation Cancellation
/// An operation initiated in a dispatch turn and not posted yet (above) is taken out of its queue pair's list
/// and completes at once with `operation_aborted` (terminal, partial or total), nothing else touched.
/// A posted work request cannot be recalled. Only `cancellation_type::terminal` is honoured for it: the
/// queue pair is moved to the error state, the request is flushed, and the handler receives
/// `operation_aborted` once the device has retired it — so its buffers are safe to reuse when the handler
/// runs. The queue pair must then be reset (`reset()`, then connected again) or replaced. An operation still
/// waiting for a send-queue credit is cancelled at once (terminal, partial or total) with `operation_aborted`.
/// A cancellation that finds the operation already complete does nothing: its completion was taken from the
/// completion queue (its handler is about to run, e.g. later in the same dispatch turn, as when the first of
/// `a || b` completes in the batch that also holds the second), or is found there when the cancellation
/// polls the queue before acting. The handler then gets the operation's real result, and the queue pair
/// stays healthy.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use a queue pair from its completion queue's executor.

#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/fwd.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/detail/ops/atomic_op.hpp>
#include <coverbs/detail/ops/rdma_op.hpp>
#include <coverbs/detail/ops/recv_op.hpp>
#include <coverbs/detail/ops/scatter_gather.hpp>
#include <coverbs/detail/ops/send_op.hpp>
#include <coverbs/detail/qp_start.hpp>
#include <coverbs/detail/token_check.hpp>
#include <coverbs/detail/wr_op.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>
#include <coverbs/metrics.hpp>
#include <coverbs/received.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

namespace coverbs {

class protection_domain;
class shared_receive_queue;

/// What a peer needs to connect to a queue pair (exchanged out of band, e.g. over TCP).
struct queue_pair_address {
  std::uint32_t qp_num = 0;
  std::uint32_t psn = 0;  ///< first packet sequence number (24 bits)
  gid gid_value;          ///< the local GID (RoCE v2 IPv4-mapped by default)
  std::uint16_t lid = 0;  ///< InfiniBand only
};

/// Sizes and connection attributes of a queue pair.
struct queue_pair_options {
  std::uint32_t max_send_wr = 128;  ///< send-queue depth (operations in flight; more wait for credits)
  std::uint32_t max_recv_wr = 128;  ///< receive-queue depth
  std::uint32_t max_send_sge = 1, max_recv_sge = 1;
  /// Sends/writes up to this size are copied into the WQE (IBV_SEND_INLINE): the CPU copies the payload into
  /// the doorbell's descriptor and the NIC skips one DMA read of it (on a NIC, what makes small-message rates;
  /// on rxe the copy is the kernel's either way). A provider may grant more than asked (rxe grants 16 for
  /// 0); coverbs inlines up to what was asked, so 0 turns inlining off.
  std::uint32_t max_inline_data = 64;
  std::uint8_t port = 1;
  int gid_index = -1;               ///< -1: device::default_gid(port)
  ibv_mtu path_mtu = IBV_MTU_4096;  ///< capped at the port's active MTU
  std::uint8_t timeout = 14;        ///< local ACK timeout: 4.096 us * 2^timeout (14: ~67 ms)
  /// Transport retries (0..7) before wc_errc::retry_exc_err. 6, not IBA's maximum 7: Soft-RoCE (rxe) treats
  /// 7 as "retry forever", so a send to a dead peer would never complete; on NICs it costs one retry. On rxe
  /// (kernel 6.1) a send waiting for the peer to post a receive (RNR) also spends these retries: it fails
  /// with retry_exc_err after (retry_cnt + 1) ACK timeouts (~0.5 s at timeout 14) even with rnr_retry 7.
  std::uint8_t retry_cnt = 6;
  std::uint8_t rnr_retry = 7;  ///< receiver-not-ready retries (7: infinite)
  /// How long a peer waits before sending again a message that found no receive posted here (receiver not
  /// ready, IBA 9.7.5.2.8): an RNR NAK timer code, 12 = 0.64 ms (1 = 0.01 ms .. 31 = 491.52 ms; 0 = 655.36 ms,
  /// which rdma_cm would leave). Applied at INIT->RTR by `connect()` and by rdma_cm connections
  /// (`connect_options::qp`, `listener_options::qp`): set it here rather than with a raw ibv_qp_attr.
  std::uint8_t min_rnr_timer = 12;
  std::uint8_t max_rd_atomic = 0;       ///< outstanding reads/atomics as requester; 0: device maximum (<= 16)
  std::uint8_t max_dest_rd_atomic = 0;  ///< as responder; 0: device maximum (<= 16)
  /// What the peer may do to memory through this queue pair (qp_access_flags).
  access remote_access = access::remote_write | access::remote_read | access::remote_atomic;
  /// Attach the queue pair to this shared receive queue (ibv_qp_init_attr::srq): messages to it consume the
  /// SRQ's receives (`shared_receive_queue::async_recv`, reporting this queue pair's qp_num), max_recv_wr and
  /// max_recv_sge are ignored, and `queue_pair::async_recv` fails with `errc::receive_queue_is_shared`. The
  /// receive completion queue must be the SRQ's (`errc::srq_cq_mismatch`), the protection domain too
  /// (`errc::pd_mismatch`); the SRQ outlives the queue pair.
  shared_receive_queue* srq = nullptr;
};

/// A reliable-connected queue pair on a completion queue. Move-only.
///
/// Lifetime: the protection domain and completion queue(s) outlive it. Destroying a queue pair with
/// operations outstanding moves it to the error state and waits (briefly) for the device to flush them;
/// their handlers receive `wr_flush_err` (posted, never run inside the destructor).
class queue_pair {
public:
  using executor_type = completion_queue::executor_type;
  /// What an operation uses when given no token: `detail::default_token_t` of the executor type, `deferred`
  /// (`co_await qp.async_send(buf)` awaits it; `co_spawn` and awaitable operators take `use_awaitable`).
  using default_token = detail::default_token_t<executor_type>;

  /// Creates an RC queue pair in the RESET state using `cq` for sends and receives.
  /// @throws system_error: `errc::cq_overcommitted` (the queue's depth cannot hold another
  /// max_send_wr + max_recv_wr completions), `errc::device_limit_exceeded` (max_send_wr / max_recv_wr above
  /// the device's max_qp_wr, max_send_sge / max_recv_sge above max_sge, max_rd_atomic above
  /// max_qp_init_rd_atom, max_dest_rd_atomic above max_qp_rd_atom, max_inline_data above what the device
  /// accepts: the text names the option, the value and the limit), or the errno of ibv_create_qp(3).
  queue_pair(protection_domain& pd, completion_queue& cq, const queue_pair_options& options = {});
  /// As above with separate send and receive completion queues. They must be serviced by the same executor
  /// (`==`): otherwise @throws system_error `errc::executor_mismatch` and nothing is created.
  queue_pair(protection_domain& pd, completion_queue& send_cq, completion_queue& recv_cq,
             const queue_pair_options& options = {});

  queue_pair(queue_pair&&) noexcept;
  queue_pair& operator=(queue_pair&&) noexcept;
  queue_pair(const queue_pair&) = delete;
  queue_pair& operator=(const queue_pair&) = delete;
  ~queue_pair();

  executor_type get_executor() const noexcept;
  ibv_qp* native_handle() const noexcept;
  std::uint32_t qp_num() const noexcept;
  /// The queue pair's own counts of operations by kind (posted, completed, failed, bytes) and of credit waits,
  /// counted while `metrics::enable()` is on (all zero when it never was, or in a `-Dmetrics=false` build):
  /// the per-object rows of the process-wide `metrics::snapshot`. @par Thread Safety Any thread, while the
  /// loop runs (relaxed loads: a count made meanwhile may or may not be in it).
  metrics::queue_counters counters() const noexcept;
  /// What a peer passes to `connect`.
  queue_pair_address local_address() const;
  /// Moves RESET → INIT → RTR → RTS towards `remote` (ibv_modify_qp(3) three times).
  /// @throws system_error with the errno of ibv_modify_qp naming the transition that failed; the queue pair
  /// stays in the last state it reached.
  void connect(const queue_pair_address& remote);
  /// As above; a failure is reported in `ec` (the errno of ibv_modify_qp) instead of thrown.
  void connect(const queue_pair_address& remote, error_code& ec) noexcept;
  /// Modifies the queue pair (ibv_modify_qp(3)) with `attr` and `mask` (IBV_QP_*), e.g. with attributes
  /// from rdma_init_qp_attr(3). A transition to RESET is `reset()`'s (below): refused while requests are
  /// outstanding, and it clears `error()`. @throws system_error with the verb's errno, naming the transition.
  void modify(ibv_qp_attr& attr, int mask);
  /// As above; the verb's errno in `ec` instead of thrown.
  void modify(ibv_qp_attr& attr, int mask, error_code& ec) noexcept;
  /// Moves the queue pair to RESET from any state (ibv_modify_qp(3) IBV_QPS_RESET), so that `connect` (or
  /// RESET → INIT → RTR → RTS with `modify`) can bring it back, as IBA 10.3.1 allows after an error: `error()`
  /// is cleared, the send and receive queues' credits are whole again, and `local_address()` carries a fresh
  /// PSN (the peer, reset too, connects to it anew). Every operation must have completed first — after an
  /// error, the flushed ones complete with `wc_errc::wr_flush_err` in the next dispatch turns — since RESET
  /// discards what the device still holds: @throws system_error `boost::system::errc::device_or_resource_busy`
  /// (EBUSY) naming how many requests are outstanding (`sends_outstanding()`), nothing changed; or with the
  /// verb's errno.
  /// Every type-2 window bound through the queue pair dies with the old connection (key dead, lease ended).
  void reset();
  /// As above; the error in `ec` instead of thrown.
  void reset(error_code& ec) noexcept;
  /// The state as the device reports it (ibv_query_qp(3)).
  ibv_qp_state state() const;
  /// The error that moved the queue pair to the error state (empty while healthy).
  error_code error() const noexcept;
  /// Send-queue work requests holding a credit and not yet completed (posted, or in the running turn's list) /
  /// operations waiting for a credit.
  std::size_t sends_outstanding() const noexcept;
  std::size_t sends_waiting() const noexcept;
  /// The largest send/write that goes inline: `queue_pair_options::max_inline_data`, or less if the provider
  /// granted less.
  std::uint32_t max_inline_data() const noexcept;
  /// The longest send, write or read in bytes: the port's max_msg_sz (8 MiB on rxe), at most 2^31. Longer
  /// ones are refused before posting with `errc::message_too_long` (the device would fail them and move the
  /// queue pair to the error state).
  std::size_t max_message_size() const noexcept;

  // --- two-sided ---

  /// Sends `buf` to the peer's next posted receive (IBV_WR_SEND).
  /// @par Completion Signature `void(error_code, std::size_t bytes)`
  /// @par Errors `wc_errc` of the completion (rnr_retry_exc_err: the peer posted no receive;
  /// retry_exc_err: the peer is unreachable), `wr_flush_err` after an earlier error, errno of ibv_post_send.
  /// @see ibv_post_send(3)
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send(registered_span buf, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::send_op{buf, IBV_WR_SEND, 0});
  }

  /// Sends `buf` with 32 bits of immediate data (IBV_WR_SEND_WITH_IMM); `imm` in host byte order.
  /// @par Completion Signature `void(error_code, std::size_t bytes)`
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send_with_imm(registered_span buf, std::uint32_t imm, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::send_op{buf, IBV_WR_SEND_WITH_IMM, imm});
  }

  /// Sends `buf` and invalidates `rkey` at the peer (IBV_WR_SEND_WITH_INV); the peer's receive reports it
  /// in `received::invalidated_rkey`.
  /// @par Completion Signature `void(error_code, std::size_t bytes)`
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send_with_invalidate(registered_span buf, std::uint32_t rkey, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::send_op{buf, IBV_WR_SEND_WITH_INV, rkey});
  }

  /// Posts a receive into `buf` (ibv_post_recv(3)).
  /// @par Completion Signature `void(error_code, received)`: bytes placed, immediate data, invalidated rkey.
  /// @par Errors `wc_errc::loc_len_err` (the message was larger than `buf`; rxe reports `loc_qp_op_err`, and
  /// the sender gets `rem_op_err`: both queue pairs go to the error state), `wr_flush_err`,
  /// `errc::receive_queue_is_shared` (before posting: the queue pair is attached to a shared receive queue),
  /// `errc::foreign_remote_invalidation` (the message was a send-with-invalidate naming a window not bound
  /// through this queue pair: a hostile peer; the queue pair stays healthy, `window_statistics()` counts it).
  template <completion_token_or_handler<void(error_code, received)> Token = default_token>
  auto async_recv(registered_span buf, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::recv_op{buf});
  }

  // --- one-sided ---

  /// Writes `local` to the start of `remote` (IBV_WR_RDMA_WRITE). Zero-length writes are allowed.
  /// @par Completion Signature `void(error_code, std::size_t bytes)`
  /// @par Errors `errc::remote_range_too_small` (before posting: `remote.length` < `local.size()`),
  /// `wc_errc::rem_access_err` (bad or revoked rkey, range outside it, no remote_write right).
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_write(registered_span local, remote_key remote, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::rdma_op{local, remote, IBV_WR_RDMA_WRITE, 0});
  }

  /// As `async_write`, and consumes a receive at the peer that reports `imm` (host byte order).
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_write_with_imm(registered_span local, remote_key remote, std::uint32_t imm,
                            Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::rdma_op{local, remote, IBV_WR_RDMA_WRITE_WITH_IMM, imm});
  }

  /// Reads `local.size()` bytes from the start of `remote` into `local` (IBV_WR_RDMA_READ); `local` needs
  /// a region with local_write.
  /// @par Completion Signature `void(error_code, std::size_t bytes)`
  template <completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_read(registered_span local, remote_key remote, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::rdma_op{local, remote, IBV_WR_RDMA_READ, 0});
  }

  /// Atomically adds `add` to the 8-byte word at `remote.addr` (IBV_WR_ATOMIC_FETCH_AND_ADD). The old value
  /// is written to `result` (8 bytes of a local_write region) and passed to the handler.
  /// @par Completion Signature `void(error_code, std::uint64_t old_value)`
  /// @par Errors `errc::misaligned_atomic` (remote address not 8-byte aligned, IBA o9-21),
  /// `errc::buffer_too_small`, `errc::atomics_unsupported` — all before posting.
  template <completion_token_or_handler<void(error_code, std::uint64_t)> Token = default_token>
  auto async_fetch_add(registered_span result, remote_key remote, std::uint64_t add, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::atomic_op{result, remote, IBV_WR_ATOMIC_FETCH_AND_ADD, add, 0});
  }

  /// Atomically replaces the 8-byte word at `remote.addr` with `swap` if it equals `compare`
  /// (IBV_WR_ATOMIC_CMP_AND_SWP). The old value goes to `result` and the handler either way; the swap took
  /// place exactly when old value == `compare`.
  /// @par Completion Signature `void(error_code, std::uint64_t old_value)`
  template <completion_token_or_handler<void(error_code, std::uint64_t)> Token = default_token>
  auto async_compare_swap(registered_span result, remote_key remote, std::uint64_t compare, std::uint64_t swap,
                          Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token),
                    detail::atomic_op{result, remote, IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap});
  }

  // --- over several registered spans (scatter/gather) ---
  //
  // Each takes a `registered_span_sequence` (buffer.hpp) instead of one span: one work request whose
  // scatter/gather list has one entry per span, in order — a header and a payload in two registered buffers go
  // out as one message. At most `queue_pair_options::max_send_sge` spans (sends, writes, reads) or
  // `max_recv_sge` (receives), and at most `max_spans_per_operation`; more are refused before posting with
  // `errc::too_many_spans` (the queue pair stays healthy). The sequence is copied when the operation is
  // initiated; the memory it names must stay registered until the handler runs. Completion signatures,
  // errors and cancellation as for the single-span forms above; a length is the total over the spans.

  /// Sends the concatenation of `bufs` as one message (IBV_WR_SEND).
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send(const Spans& bufs, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::gather_send_op{detail::span_list::of(bufs), IBV_WR_SEND, 0});
  }

  /// Sends the concatenation of `bufs` with 32 bits of immediate data (IBV_WR_SEND_WITH_IMM).
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_send_with_imm(const Spans& bufs, std::uint32_t imm, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token),
                    detail::gather_send_op{detail::span_list::of(bufs), IBV_WR_SEND_WITH_IMM, imm});
  }

  /// Posts one receive scattered into `bufs`: the message fills them in order (`received::bytes` is what
  /// arrived in all of them); a message longer than their total fails as for one span (`loc_len_err`, on rxe
  /// `loc_qp_op_err`). Empty spans add nothing and are left out of the list.
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, received)> Token = default_token>
  auto async_recv(const Spans& bufs, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::scatter_recv_op{detail::span_list::of(bufs)});
  }

  /// Writes the concatenation of `local` to the start of `remote` (IBV_WR_RDMA_WRITE).
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_write(const Spans& local, remote_key remote, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token),
                    detail::scatter_gather_rdma_op{detail::span_list::of(local), remote, IBV_WR_RDMA_WRITE, 0});
  }

  /// As `async_write` over several spans, consuming a receive at the peer that reports `imm`.
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_write_with_imm(const Spans& local, remote_key remote, std::uint32_t imm, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token), detail::scatter_gather_rdma_op{detail::span_list::of(local), remote,
                                                                               IBV_WR_RDMA_WRITE_WITH_IMM, imm});
  }

  /// Reads from the start of `remote` into `local`, filled in order (IBV_WR_RDMA_READ).
  template <registered_span_sequence Spans,
            completion_token_or_handler<void(error_code, std::size_t)> Token = default_token>
  auto async_read(const Spans& local, remote_key remote, Token&& token = default_token{}) {
    return initiate(std::forward<Token>(token),
                    detail::scatter_gather_rdma_op{detail::span_list::of(local), remote, IBV_WR_RDMA_READ, 0});
  }

private:
  friend struct detail::impl_access;

  // RESET -> INIT -> RTR -> RTS; on failure sets `ec` and returns the transition that failed.
  const char* connect_steps(const queue_pair_address& remote, error_code& ec) noexcept;

  struct initiation {
    queue_pair* self;
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

  /// Initiates the operation kind `Op` (detail/ops/: how its work request is filled, what its handler
  /// receives) with credits, posting, flushing and cancellation as for every queue-pair operation. The one
  /// place an operation starts; window operations reach it through `detail::impl_access`.
  template <class Token, class Op>
  auto initiate(Token&& token, Op op) {
    return detail::initiate_checked<Token, typename Op::completion::signature>(initiation{this}, token, std::move(op));
  }

  std::unique_ptr<detail::queue_pair_impl> impl_;
  /// The send completion queue's executor (it outlives this queue pair): what an operation's node keeps, read
  /// here without a call into the library.
  const executor_type* io_executor_ = nullptr;
};

/// Connects two queue pairs to each other without rdma_cm (both in this process; for tests and benches).
/// @throws system_error as `queue_pair::connect`.
void connect_pair(queue_pair& a, queue_pair& b);
/// As above; the first failure in `ec` (`a` is connected first: when it fails, `b` is left untouched).
void connect_pair(queue_pair& a, queue_pair& b, error_code& ec) noexcept;

}  // namespace coverbs
