#pragma once
// Private to lib/: the state behind a queue_pair — credits, the FIFO of operations waiting for one, and
// the error state.

#include <coverbs/detail/wr_node.hpp>
#include <coverbs/queue_pair.hpp>

#include <boost/asio/cancellation_type.hpp>

#include <memory>
#include <string>

namespace coverbs::detail {

class cq_impl;
struct qp_registration;
class shared_receive_queue_impl;

/// A FIFO of nodes linked through wr_node::next.
struct node_fifo {
  wr_node* head = nullptr;
  wr_node* tail = nullptr;
  std::size_t size = 0;
  bool empty() const noexcept { return head == nullptr; }
  void push(wr_node* n) noexcept;
  wr_node* pop() noexcept;
  bool remove(wr_node* n) noexcept;
};

/// One work queue's accounting (send or receive).
struct work_queue {
  std::uint32_t credits = 0;    // free slots
  std::size_t outstanding = 0;  // posted, not completed
  node_fifo waiting;            // operations waiting for a credit
};

class queue_pair_impl {
public:
  queue_pair_impl(ibv_pd* pd, cq_impl& send_cq, cq_impl& recv_cq, const queue_pair_options& options);
  ~queue_pair_impl();

  void start(wr_node* n, error_code ec);
  void on_completion(wr_node* n, const ibv_wc& wc, completion_mode mode);
  void cancel(wr_node* n, boost::asio::cancellation_type type);
  /// Moves the queue pair to the error state (ibv_modify_qp IBV_QPS_ERR): the device flushes everything.
  void to_error(const error_code& why);
  /// A device event moved the queue pair to the error state (device_events.cpp): records `cause` as its
  /// error — replacing a wr_flush_err that flushed completions recorded first — and fails the operations
  /// waiting for a credit. Runs on the queue pair's executor.
  void on_async_error(const error_code& cause);
  /// queue_pair::reset: to RESET, forgetting the error; EBUSY (and the reason in `why`, if given) while
  /// requests are outstanding.
  error_code reset(std::string* why) noexcept;

  ibv_qp* qp_ = nullptr;
  cq_impl* send_cq_;
  cq_impl* recv_cq_;
  queue_pair_options options_;
  work_queue sq_, rq_;
  error_code error_;
  bool in_error_ = false;
  std::uint32_t max_inline_ = 0;
  std::size_t max_message_ = 0;  // sends, writes, reads: the port's max_msg_sz, at most 2^31
  bool atomics_ = false;
  std::uint32_t psn_ = 0;
  gid_entry gid_;
  port_attributes port_;
  std::shared_ptr<qp_registration> registration_;  // in the device's registry of live queue pairs
  shared_receive_queue_impl* srq_ = nullptr;       // queue_pair_options::srq: receives come from there

private:
  work_queue& queue_of(const wr_node* n) noexcept { return n->is_recv ? rq_ : sq_; }
  /// Checks and records `queue_pair_options::srq` (called first by the constructor).
  void attach_srq(ibv_pd* pd, shared_receive_queue_impl* srq);
  void post_now(wr_node* n);
  void pump(work_queue& q);
  void flush_waiting(work_queue& q);
  static void fail(wr_node* n, error_code ec);
};

void qp_on_completion(queue_pair_impl* qp, wr_node* node, const ibv_wc& wc, completion_mode mode);
/// Whether the receive completion `wc` consumed a send-with-invalidate (dataplane/ops/recv_op.cpp).
bool received_invalidation(const ibv_wc& wc) noexcept;

}  // namespace coverbs::detail
