#pragma once
// Private to lib/: the state behind a shared_receive_queue — receive credits, the FIFO of receives waiting
// for one, the list of posted receives (to abort them when the SRQ is destroyed), and the low watermark.

#include <coverbs/shared_receive_queue.hpp>

#include "dataplane/qp_impl.hpp"

#include <boost/asio/cancellation_type.hpp>

#include <memory>
#include <utility>
#include <vector>

namespace coverbs::detail {

class cq_impl;
class grh_slots;
struct srq_registration;

/// Owned by the public object and by every queue pair attached to it (`queue_pair_impl::srq_`): the last owner
/// destroys the SRQ, after every attached queue pair is destroyed.
class shared_receive_queue_impl : public std::enable_shared_from_this<shared_receive_queue_impl> {
public:
  shared_receive_queue_impl(ibv_pd* pd, cq_impl& cq, const srq_options& options);
  ~shared_receive_queue_impl();

  void start(wr_node* n, error_code ec);
  void on_completion(wr_node* n, const ibv_wc& wc, completion_mode mode);
  void cancel(wr_node* n, boost::asio::cancellation_type type);
  void set_limit(std::uint32_t n);
  void start_wait_limit(wr_node* n);
  void on_limit_reached();
  /// A queue pair was created on it / destroyed; a datagram queue pair's Q_Key is what its receives' senders carried.
  void attach(std::uint32_t qp_num, std::uint32_t qkey);
  void detach(std::uint32_t qp_num) noexcept;
  /// A datagram SRQ's receive of `n`, whose spans are in n.sg[1 .. entries] (`total` bytes): the GRH slot's
  /// place in front, the overflow area behind when they hold less than a datagram.
  void fill_datagram_recv(wr_node& n, std::size_t entries, std::size_t total) const noexcept;
  /// The Q_Key of the attached datagram queue pair `qp_num` (0 if none).
  std::uint32_t qkey_of(std::uint32_t qp_num) const noexcept;

  ibv_pd* pd_;
  ibv_srq* srq_ = nullptr;
  cq_impl* cq_;
  srq_options options_;
  std::uint32_t credits_ = 0;
  std::size_t posted_ = 0;
  std::size_t attached_ = 0;        // queue pairs created on it and not yet destroyed
  node_fifo waiting_;               // receives waiting for a credit
  node_fifo limit_waiters_;         // pending async_wait_limit
  bool limit_reached_ = false;      // an event arrived while nobody waited
  bool closing_ = false;            // being destroyed: nothing more is posted
  std::unique_ptr<grh_slots> grh_;  // a datagram SRQ's GRH slots and overflow area (srq_options::datagram)
  std::size_t max_datagram_ = 0;    // with grh_: the port's active MTU in bytes
  std::vector<std::pair<std::uint32_t, std::uint32_t>> qkeys_;  // attached datagram queue pairs: (qp_num, Q_Key)
  queue_counts counts_;  // shared_receive_queue::counters(): counted while metrics are on

private:
  void post_now(wr_node* n);
  void link_posted(wr_node* n) noexcept;
  void unlink_posted(wr_node* n) noexcept;
  /// `posted`: the receive was posted to the device (counted as posted in the metrics).
  static void fail(wr_node* n, error_code ec, bool posted = false);

  wr_node* posted_head_ = nullptr;  // doubly linked through wr_node::next / prev
  std::shared_ptr<srq_registration> registration_;
};

void srq_on_completion(shared_receive_queue_impl* srq, wr_node* node, const ibv_wc& wc, completion_mode mode);
void srq_cancel(shared_receive_queue_impl* srq, wr_node* node, boost::asio::cancellation_type type);

}  // namespace coverbs::detail
