#pragma once
// Private to lib/: the dispatch turn running on this thread, and the queue pairs whose send requests it holds
// back until it ends (doorbell batching; queue_pair.hpp, "When a request is posted").

#include <cstddef>

namespace coverbs::detail {

class queue_pair_impl;

/// One dispatch turn of a completion queue (cq_impl::drain), as a scope on the stack of the thread that runs it.
/// While it lives, a send-queue operation initiated on this thread joins its queue pair's list
/// (queue_pair_impl::batch_) instead of being posted; the queue pair enrolls here once per turn. When the turn
/// ends — normally or through a handler's exception — every enrolled queue pair posts its list, one
/// ibv_post_send each. Turns nest (a handler calling completion_queue::poll): a nested turn first posts the
/// lists of the turns around it (`end_all`), so a handler that waits in place for its own request sees it
/// complete.
class dispatch_turn {
public:
  /// `loop`: the io_context whose run() this thread is inside, running the turn's handlers in place
  /// (completion_mode::invoke), or null.
  explicit dispatch_turn(const void* loop = nullptr) noexcept : loop_(loop), outer_(running_) { running_ = this; }
  ~dispatch_turn() {
    end();
    running_ = outer_;
  }
  dispatch_turn(const dispatch_turn&) = delete;
  dispatch_turn& operator=(const dispatch_turn&) = delete;

  /// Posts every enrolled queue pair's list now; returns how many queue pairs posted (0: the turn's
  /// handlers initiated no send request). The turn goes on: later initiations enroll again.
  std::size_t end() noexcept { return head_ ? post_enrolled() : 0; }
  /// The innermost turn running on this thread, or null (an initiating function called outside any turn).
  static dispatch_turn* current() noexcept { return running_; }
  /// Whether this thread runs a turn in place inside the io_context `loop` (non-null): then it is inside that
  /// context's run(), and a handler of the context may be called directly. One thread-local read, where Asio's
  /// running_in_this_thread() costs a call of the default TLS model and a walk of its call stack.
  static bool in_place_on(const void* loop) noexcept { return loop && running_ && running_->loop_ == loop; }
  /// Posts the lists of every turn running on this thread (a nested turn is about to poll: what a handler
  /// initiated before polling in place must reach the device first).
  static void end_all() noexcept {
    for (dispatch_turn* t = running_; t; t = t->outer_)
      t->end();
  }
  /// Adds `qp` (not enrolled in any turn: `qp.turn_` null) to the queue pairs posted when this turn ends.
  inline void enroll(queue_pair_impl& qp) noexcept;
  /// Removes `qp` (a queue pair being destroyed during the turn) without posting its list.
  void withdraw(queue_pair_impl& qp) noexcept;

private:
  /// end() when a queue pair is enrolled.
  inline std::size_t post_enrolled() noexcept;
  // initial-exec: the data path reads it once per operation; a call to __tls_get_addr would cost more than
  // the rest of the check.
  [[gnu::tls_model("initial-exec")]] static constinit thread_local dispatch_turn* running_;
  queue_pair_impl* head_ = nullptr;  // linked through queue_pair_impl::turn_next_
  const void* loop_;  // the io_context this turn runs in place inside, or null
  dispatch_turn* outer_;
};

}  // namespace coverbs::detail

#include "dataplane/qp_impl.hpp"

namespace coverbs::detail {

inline std::size_t dispatch_turn::post_enrolled() noexcept {
  // Posting runs no handler: a request the device refuses completes through a posted handler.
  std::size_t n = 0;
  while (queue_pair_impl* qp = head_) {
    head_ = qp->turn_next_;
    qp->turn_next_ = nullptr;
    qp->turn_ = nullptr;
    qp->post_batch();
    ++n;
  }
  return n;
}

inline void dispatch_turn::enroll(queue_pair_impl& qp) noexcept {
  qp.turn_ = this;
  qp.turn_next_ = head_;
  head_ = &qp;
}

}  // namespace coverbs::detail
