#include "dataplane/dispatch_turn.hpp"

#include "dataplane/qp_impl.hpp"

namespace coverbs::detail {

constinit thread_local dispatch_turn* dispatch_turn::running_ = nullptr;

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
