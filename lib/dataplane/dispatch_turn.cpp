#include "dataplane/dispatch_turn.hpp"

#include "dataplane/qp_impl.hpp"

namespace coverbs::detail {

thread_local dispatch_turn* dispatch_turn::running_ = nullptr;

std::size_t dispatch_turn::post_enrolled() noexcept {
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

void dispatch_turn::withdraw(queue_pair_impl& qp) noexcept {
  for (queue_pair_impl** p = &head_; *p; p = &(*p)->turn_next_) {
    if (*p != &qp) continue;
    *p = qp.turn_next_;
    break;
  }
  qp.turn_next_ = nullptr;
  qp.turn_ = nullptr;
}

}  // namespace coverbs::detail
