#pragma once
// Private to lib/: the state of one message endpoint (include/coverbs/message_endpoint.hpp) — its slots,
// credits, waiting operations and calls — kept alive by the public object, the receives posted on the queue
// pair, and the messages the application holds.
#include "core/io_owner.hpp"
#include "messaging/id_set.hpp"

#include <coverbs/detail/credit_ledger.hpp>
#include <coverbs/detail/message_ops.hpp>
#include <coverbs/detail/wr_node.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/message_endpoint.hpp>

#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace coverbs::detail {

/// A doubly linked FIFO of operations (through message_op::prev/next).
class op_list {
public:
  bool empty() const noexcept { return head_ == nullptr; }
  message_op* front() const noexcept { return head_; }
  void push_back(message_op* op) noexcept;
  void erase(message_op* op) noexcept;
  /// How many operations it holds (walks the list: for outstanding_work, off the data path).
  std::size_t size() const noexcept;
  message_op* pop_front() noexcept {
    message_op* op = head_;
    if (op) erase(op);
    return op;
  }

private:
  message_op* head_ = nullptr;
  message_op* tail_ = nullptr;
};

class endpoint_impl final : public io_owner, public std::enable_shared_from_this<endpoint_impl> {
public:
  /// `hold`: post the receives, send nothing until start_sending().
  endpoint_impl(protection_domain& pd, queue_pair& qp, const message_options& options, bool hold);
  ~endpoint_impl();

  /// Posts every receive and schedules the first credit message (after construction: needs shared_from_this).
  void start();
  void start_op(message_op* op) noexcept;
  /// Ends the hold of the constructor: the first credit message and whatever waits go out.
  void start_sending() noexcept;
  void cancel(message_op* op) noexcept;
  /// Posts a receive slot again (on the endpoint's executor; messages call release_slot, from any thread).
  void release(std::uint32_t slot) noexcept;
  /// The same, `self` being the message's reference to this state, dropped once the receive is posted (which
  /// keeps the state alive from there: posted_self_).
  void release(std::uint32_t slot, std::shared_ptr<endpoint_impl> self) noexcept {
    release(slot);
    self.reset();
  }
  /// Fails the endpoint (or closes it: `operation_aborted`, then `errc::endpoint_closed` for later ones).
  void fail(error_code ec, std::string why) noexcept;
  /// `deregister`: also drop the slots' registrations (message_endpoint::close); else only fail (shutdown).
  void close(bool deregister = true) noexcept;

  void on_context_shutdown() noexcept override;
  /// Calls awaiting replies, operations waiting for a credit or a slot, receive operations waiting for a message,
  /// requests received and not answered (outstanding_work.hpp).
  void describe_work(std::vector<work_holder>& out) const override;

  const message_endpoint::executor_type& executor() const noexcept { return ex_; }
  std::size_t slot_size() const noexcept { return options_.slot_size; }
  queue_pair& qp() const noexcept { return *qp_; }
  std::size_t peer_slot_size() const noexcept { return peer_slot_size_; }
  error_code error() const noexcept { return error_; }
  const std::string& diagnostic() const noexcept { return diagnostic_; }
  message_statistics statistics() const noexcept {
    message_statistics s = stats_;
    s.calls_in_flight = calls_.size() - free_calls_.size();
    return s;
  }
  std::uint32_t credits() const noexcept { return ledger_.data_credits(); }

private:
  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  // A call sent and not answered yet; its id is (generation << 32) | index. A cancelled call frees its entry at
  // once and counts in `late`: a reply that comes for an earlier generation of the entry, or for the current
  // one once freed, is then a late reply to a cancelled call (dropped and counted), one per cancellation.
  struct call_entry {
    message_op* op = nullptr;
    std::uint32_t generation = 0;
    std::uint32_t late = 0;
    enum class state : std::uint8_t { free, awaiting } st = state::free;
  };
  // The work request of one receive slot or send slot, the endpoint's own: made once, reposted with its slot
  // (no allocation, no handler, no reference per message). Its completion reaches on_node; while any is posted,
  // posted_self_ keeps this state (and the node) alive.
  struct slot_node final : wr_node {
    endpoint_impl* endpoint = nullptr;
    std::uint32_t slot = 0;
  };
  // A message received with no operation waiting for it (no shared_ptr: the queue is the endpoint's own).
  struct parked {
    std::uint32_t slot;
    std::uint32_t length;
    std::uint64_t id;
  };

  std::byte* recv_slot(std::uint32_t slot) const noexcept { return recv_mem_.get() + slot * stride_; }
  std::byte* send_slot(std::uint32_t slot) const noexcept { return send_mem_.get() + slot * stride_; }
  inbound_message view(const parked& p) {
    return inbound_message(shared_from_this(), p.slot, {recv_slot(p.slot) + message_header::size, p.length});
  }
  bool healthy() const noexcept { return !error_ && !context_gone(); }

  /// Resets `n` for its next post and hands it to the queue pair (queue_pair_impl::start: posted, or held in the
  /// dispatch turn's list, or waiting for a credit; in the error state flushed, its completion posted).
  void start_node(slot_node& n) noexcept;
  void post_receive(std::uint32_t slot) noexcept;
  /// A slot node's wr_node::complete: calls on_node directly when the dispatch turn runs on this thread inside
  /// the endpoint's io_context (completion_mode::invoke), else posts or dispatches it there with a reference.
  static void complete_node(wr_node* node, const error_code& ec, const ibv_wc* wc, completion_mode mode);
  /// A slot node's completion, on the endpoint's executor: the node's hold on this state ends when it returns.
  void on_node(slot_node& n, error_code ec, std::size_t bytes) noexcept;
  /// A slot node's completion posted to the endpoint's executor; destroyed unrun (its io_context shut down),
  /// it ends the node's hold all the same.
  struct node_completion;
  /// Ends one node's hold (posted_self_ goes with the last one).
  void drop_hold() noexcept;
  void on_receive(std::uint32_t slot, error_code ec, std::size_t bytes) noexcept;
  void on_send(std::uint32_t slot, error_code ec) noexcept;
  /// A failed work completion's error as the endpoint reports it: a flush (`wc_errc::wr_flush_err`) is only the
  /// consequence of what moved the queue pair to the error state, so it becomes the queue pair's `error()` when
  /// that names a cause (an rdma_cm connection's `errc::connection_reset` or `errc::device_removed`, a device
  /// event's, another request's failed completion); without one (or for a cancelled request's
  /// `operation_aborted`, which is not the endpoint's) it stays `wr_flush_err`, and so once the endpoint is closed or
  /// failed (its queue pair may be destroyed by then: it is not read).
  error_code cause_of(error_code status) const noexcept;
  /// Posts what waits while credits and send slots last. Inline: most calls (a completion, a release) find
  /// nothing waiting, and the test is all they pay.
  void pump() noexcept {
    if (!outbox_.empty()) pump_outbox();
  }
  /// pump() when an operation waits.
  void pump_outbox() noexcept;
  void post_message(std::uint32_t slot, message_type type, std::uint64_t id, message_op* op) noexcept;
  /// A standalone credit message, later in this turn, when one is due (credit_ledger::update_due). Inline: most
  /// calls (every completion, start and release) find none due.
  void schedule_credit_check() noexcept {
    if (!check_scheduled_ && ledger_.update_due(!outbox_.empty())) post_credit_check();
  }
  /// schedule_credit_check() when an update is due: posts the check unless one is posted already, the endpoint
  /// holds its sends, or it is closed or failed.
  void post_credit_check() noexcept;
  void credit_check() noexcept;
  message_op* take_waiter(message_op_kind kind) noexcept;
  /// Completes `op` (which the endpoint does not hold) with `ec`, posted; `diagnostic()` says `why`.
  void refuse_op(message_op* op, error_code ec, std::string why) noexcept;
  /// Refuses `op`, too long for the peer's slots (errc::message_too_large).
  void refuse_for_peer(message_op* op) noexcept;
  std::uint32_t add_call(message_op* op);

  queue_pair* qp_;
  message_endpoint::executor_type ex_;
  message_options options_;
  std::size_t stride_;
  std::uint32_t recv_count_;
  std::unique_ptr<std::byte, free_deleter> recv_mem_, send_mem_;
  memory_region recv_mr_, send_mr_;
  std::uint32_t recv_lkey_ = 0, send_lkey_ = 0;  // the regions' (0 once deregistered: nothing is posted then)
  std::unique_ptr<slot_node[]> recv_nodes_, send_nodes_;  // one per receive slot, one per send slot
  std::uint32_t posted_ = 0;                              // slot nodes handed to the queue pair, not completed
  std::shared_ptr<endpoint_impl> posted_self_;            // this state, while posted_ > 0
  credit_ledger ledger_;
  bool holding_;  // constructed with hold_sends and start_sending() not called yet: nothing is posted
  std::vector<std::uint32_t> free_send_;
  std::vector<message_op*> in_flight_;  // per send slot: the send or reply operation it carries
  std::vector<call_entry> calls_;
  std::vector<std::uint32_t> free_calls_;
  op_list outbox_;  // sends, replies and calls waiting for a credit or a slot
  op_list request_waiters_, message_waiters_;
  std::deque<parked> requests_, messages_;
  // The correlation ids of the requests received and not answered yet: a reply must take one (one reply per
  // request; a second would reach the peer as a reply no call awaits and fail its endpoint). The ids are the
  // peer's: the set hashes them with a secret of its own (id_set.hpp), and max_unanswered bounds it.
  id_set unanswered_;
  /// More requests than this received and not answered ends the endpoint (protocol_violation): the peer's ids are
  /// unique per call in flight, and no server defers this many answers on one connection; a bound keeps a peer
  /// (or a server that drops requests unanswered) from growing the set without end.
  static constexpr std::size_t max_unanswered = 65536;
  std::size_t peer_slot_size_ = 0;  // from the peer's headers; 0 until its first one (no credit before it)
  error_code error_;
  std::string diagnostic_;
  bool check_scheduled_ = false;
  message_statistics stats_;
};

}  // namespace coverbs::detail
