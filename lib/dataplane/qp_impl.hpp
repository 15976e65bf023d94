#pragma once
// Private to lib/: the state behind a queue_pair — credits, the FIFO of operations waiting for one, the send
// requests of the running dispatch turn and those posted (send_queue.cpp), and the error state.

#include <coverbs/detail/wr_node.hpp>
#include <coverbs/queue_pair.hpp>

#include "core/metrics.hpp"

#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>

#include <memory>
#include <string>

namespace coverbs::detail {

class cq_impl;
class dispatch_turn;
class grh_slots;
struct qp_registration;
class shared_receive_queue_impl;

/// The transport of a queue pair and what only a datagram one has (datagram_queue_pair.cpp).
struct qp_create {
  ibv_qp_type type = IBV_QPT_RC;
  std::uint32_t qkey = 0;        // UD: the queue pair's own Q_Key
  std::uint16_t pkey_index = 0;  // UD: its partition key's index
};

/// A FIFO of nodes linked through wr_node::next.
struct node_fifo {
  wr_node* head = nullptr;
  wr_node* tail = nullptr;
  std::size_t size = 0;
  bool empty() const noexcept { return head == nullptr; }
  void push(wr_node* n) noexcept {
    n->next = nullptr;
    if (tail)
      tail->next = n;
    else
      head = n;
    tail = n;
    ++size;
  }
  wr_node* pop() noexcept {
    wr_node* n = head;
    if (!n) return nullptr;
    head = n->next;
    if (!head) tail = nullptr;
    n->next = nullptr;
    --size;
    return n;
  }
  /// Moves every node of `other` to the back of this one, in order.
  void splice(node_fifo& other) noexcept {
    if (other.empty()) return;
    (tail ? tail->next : head) = other.head;
    tail = other.tail;
    size += other.size;
    other = node_fifo{};
  }
  /// Unlinks `n` wherever it is (a cancellation); false if it is not there.
  bool remove(wr_node* n) noexcept;
};

/// One work queue's accounting (send or receive).
struct work_queue {
  std::uint32_t credits = 0;    // free slots
  std::size_t outstanding = 0;  // work requests posted, not completed (signaled or not)
  node_fifo waiting;            // operations waiting for a credit
  node_fifo flushed;            // in the error state: never posted, failed once `outstanding` is 0
};

class queue_pair_impl {
public:
  /// A UD queue pair (`create.type`) also gets a GRH slot per receive (grh_slots.hpp), one more receive SGE
  /// for it, and datagrams up to the port's active MTU (`max_message_`).
  queue_pair_impl(ibv_pd* pd, cq_impl& send_cq, cq_impl& recv_cq, const queue_pair_options& options,
                  const qp_create& create = {});
  ~queue_pair_impl();

  /// Takes the prepared operation `n`: posts it (or holds it in the running turn's list) when a credit is free,
  /// else queues it; in the error state it is flushed, before RTS a send-queue one is refused.
  void start(wr_node* n);
  /// Completes `n`, whose `prepare` refused it, with `ec` (its handler posted).
  void refuse(wr_node* n, error_code ec);
  [[gnu::cold]] void refuse(wr_node* n, errc e);
  /// A completion for `n`. The common case — a send-queue request that succeeded, heads the posted list, has
  /// nothing retired before it and no operation waiting for a credit — is handled here, inline in the completion
  /// queue's dispatch; anything else goes to on_completion_slow (queue_pair.cpp), which does the same for it.
  [[gnu::always_inline]] inline void on_completion(wr_node* n, const ibv_wc& wc, completion_mode mode);
  void on_completion_slow(wr_node* n, const ibv_wc& wc, completion_mode mode);
  /// Posts the requests the running turn holds back for this queue pair (`batch_`) as one list, the last one
  /// signaled; a request the device refuses fails with the verb's error (its handler posted). Runs no handler.
  void post_batch() noexcept;
  void cancel(wr_node* n, boost::asio::cancellation_type type);
  /// Moves the queue pair to the error state (ibv_modify_qp IBV_QPS_ERR): the device flushes everything.
  void to_error(const error_code& why);
  /// The verb of to_error alone (a failure is reported on stderr).
  void modify_to_error() noexcept;
  /// A device event moved the queue pair to the error state (device_events.cpp): records `cause` as its
  /// error — replacing a wr_flush_err that flushed completions recorded first — and fails the operations
  /// waiting for a credit. Runs on the queue pair's executor.
  void on_async_error(const error_code& cause);
  /// queue_pair::reset: to RESET, forgetting the error; EBUSY (and the reason in `why`, if given) while
  /// requests are outstanding.
  error_code reset(std::string* why) noexcept;
  /// A transition to `state` succeeded: RTS makes the queue pair ready to send, RESET/INIT/RTR not (others,
  /// e.g. ERR or SQD, leave it as it was).
  void note_state(ibv_qp_state state) noexcept {
    if (state == IBV_QPS_RTS)
      gates_ &= ~gate_not_ready;
    else if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR)
      gates_ |= gate_not_ready;
  }

  ibv_qp* qp_ = nullptr;
  cq_impl* send_cq_;
  cq_impl* recv_cq_;
  queue_pair_options options_;
  work_queue sq_, rq_;
  error_code error_;
  /// What stops a request in start(), one byte so that the common case (neither) costs one test:
  /// `gate_in_error`, the error state (requests are flushed); `gate_not_ready`, not in RTS since it was made or
  /// last reset (cleared by the transitions to RTS: connect, modify, a datagram queue pair's constructor; set
  /// by reset and by a move back to RESET/INIT/RTR): a send-queue operation is refused before posting
  /// (`errc::queue_pair_not_ready`), since a provider may refuse a list without saying which requests it took
  /// (rxe answers EINVAL with bad_wr NULL).
  enum : std::uint8_t { gate_in_error = 1, gate_not_ready = 2 };
  std::uint8_t gates_ = gate_not_ready;
  bool in_error() const noexcept { return gates_ & gate_in_error; }
  std::uint32_t max_inline_ = 0;
  std::size_t max_message_ = 0;  // sends, writes, reads: the port's max_msg_sz, at most 2^31
  bool atomics_ = false;
  std::uint32_t psn_ = 0;
  gid_entry gid_;
  port_attributes port_;
  std::shared_ptr<qp_registration> registration_;  // in the device's registry of live queue pairs
  // queue_pair_options::srq: receives come from there; kept alive until this queue pair is destroyed
  std::shared_ptr<shared_receive_queue_impl> srq_;
  // The send queue's posting rule (send_queue.cpp; queue_pair.hpp, "When a request is posted").
  node_fifo batch_;            // send operations of the running turn, credits taken, not posted yet
  node_fifo sent_;             // posted send operations in posting order: the queue completes them in this order
  node_fifo retired_;          // completed send operations whose handlers have yet to run, in posting order
  bool* destroyed_ = nullptr;  // set by the destructor for the innermost run_retired() running
  // Expires when this queue pair is destroyed: what outlives it and posted through it (a window_lease's
  // revocation) learns it is gone.
  std::shared_ptr<const bool> life_ = std::make_shared<const bool>(true);
  std::uint32_t batch_cap_ = 1;           // the longest list one ibv_post_send carries
  dispatch_turn* turn_ = nullptr;         // the turn this queue pair is enrolled in while `batch_` fills
  queue_pair_impl* turn_next_ = nullptr;  // the next queue pair enrolled in `turn_`
  // A datagram queue pair's (datagram_queue_pair.hpp): three rules differ from RC. A failed send moves it to
  // the error state (the device only stops its send queue); a receive carries no remote invalidation; a
  // terminal cancellation of a posted request is ignored (the queue pair serves every peer).
  qp_create create_;
  std::unique_ptr<grh_slots> grh_;  // UD: where each posted receive's global route header lands
  queue_counts counts_;             // queue_pair::counters(): counted while metrics are on (core/metrics.hpp)

private:
  work_queue& queue_of(const wr_node* n) noexcept { return n->is_recv ? rq_ : sq_; }
  /// Checks and records `queue_pair_options::srq` (called first by the constructor).
  void attach_srq(ibv_pd* pd, shared_receive_queue_impl* srq);
  /// start() without a gate closed: `n` takes its credits and is submitted, or waits for a credit.
  [[gnu::always_inline]] inline void start_open(wr_node* n);
  /// start() with a gate closed (queue_pair.cpp): flushed, refused, or a receive before RTS (start_open).
  [[gnu::noinline, gnu::cold]] void start_gated(wr_node* n);
  /// `n` waits in `q` for a credit (queue_pair.cpp).
  [[gnu::noinline]] void wait_for_credit(wr_node* n, work_queue& q);
  /// Takes `n`'s credits and posts it, or adds it to `batch_` (a send inside a turn). send_queue.cpp.
  void submit(wr_node* n);
  void post_recv_now(wr_node* n);
  /// Posts the send operation `n` (credits taken) alone, signaled. send_queue.cpp.
  void post_send_now(wr_node* n);
  /// post_batch for two requests or more: one linked list, the last signaled.
  [[gnu::noinline]] void post_list() noexcept;
  /// post_batch's lone request `n` was refused by the provider with `rc`: its credit back, it fails.
  [[gnu::noinline, gnu::cold]] void refused_alone(wr_node* n, int rc) noexcept;
  /// A send completion for `n`: retires every operation posted before it (completed, unsignaled) into
  /// `retired` and gives back their credits. send_queue.cpp.
  void retire_before(const wr_node* n, node_fifo& retired) noexcept;
  /// Runs the handlers of `retired_`, in order, until it is empty.
  void run_retired(completion_mode mode);
  void pump(work_queue& q);
  /// Fails every operation not posted yet (waiting for a credit, or in `batch_`) with wr_flush_err, once
  /// every request posted on its queue has completed (`work_queue::flushed`): handlers keep initiation order.
  void fail_unposted();
  /// `n` (not posted) fails with wr_flush_err: at once, or after its queue's posted requests.
  void flush_after_posted(wr_node* n);
  /// Fails the operations of `q.flushed` (their handlers posted).
  static void fail_flushed(work_queue& q);
  static void fail(wr_node* n, error_code ec);
};

void qp_on_completion(queue_pair_impl* qp, wr_node* node, const ibv_wc& wc, completion_mode mode);

/// Completes `n` (its last completion arrived, or it was retired by a later one) with its `first_error`,
/// reported operation_aborted when a terminal cancellation moved the queue pair to the error state for it.
/// Always inlined: a call of its own costs every operation more than the metrics' test it holds. The error is
/// the node's own field, handed on by reference: no copy of it per operation.
[[gnu::always_inline]] inline void finish_node(wr_node* n, const ibv_wc* wc, completion_mode mode) {
  error_code& ec = n->first_error;
  if (ec && n->cancelled) [[unlikely]]
    ec = boost::asio::error::operation_aborted;
  if (n->on_complete) n->on_complete(n, ec);
  if (metrics_on()) [[unlikely]]
    note_finished(n, ec, wc, true, n->qp ? &n->qp->counts_ : nullptr);
  n->state = node_state::done;
  n->complete(n, ec, wc, mode);
}

inline void queue_pair_impl::start_open(wr_node* n) {
  work_queue& q = queue_of(n);
  if (!q.waiting.empty() || q.credits < n->credits) [[unlikely]]
    return wait_for_credit(n, q);
  submit(n);
}

inline void queue_pair_impl::on_completion(wr_node* n, const ibv_wc& wc, completion_mode mode) {
  // The slow path's steps for this case: the credit back, nothing to retire, pump or flush; `n` leaves the
  // posted list and its handler runs directly (nothing retired before it).
  if (wc.status == IBV_WC_SUCCESS && !n->is_recv && sent_.head == n && n->pending == 1 && retired_.empty() &&
      sq_.waiting.empty() && sq_.flushed.empty()) [[likely]] {
    ++sq_.credits;
    --sq_.outstanding;
    n->pending = 0;
    sent_.pop();
    return finish_node(n, nullptr, mode);
  }
  on_completion_slow(n, wc, mode);
}
/// Whether an operation's `prepare` refused it: an `errc` (errc{}: accepted; what the data path's kinds return,
/// in a register, so that qp_start needs no frame of its own) or an `error_code`.
inline bool refused(errc e) noexcept { return e != errc{}; }
inline bool refused(const error_code& ec) noexcept { return static_cast<bool>(ec); }

template <class Op>
void qp_start(queue_pair_impl* qp, wr_node* node, const Op& op) {
  const auto refusal = op.prepare(qp, *node);
  if (refused(refusal)) [[unlikely]]
    return qp->refuse(node, refusal);
  qp->start(node);
}

/// Whether the receive completion `wc` consumed a send-with-invalidate (dataplane/ops/recv_op.cpp).
bool received_invalidation(const ibv_wc& wc) noexcept;

}  // namespace coverbs::detail
