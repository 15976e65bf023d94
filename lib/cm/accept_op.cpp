// A listener::async_accept in progress: cancellation (handed to its listener).

#include "cm/accept_op.hpp"

#include "cm/listener_impl.hpp"

namespace coverbs::detail {

void accept_op::cancel(const std::weak_ptr<accept_op>& weak) {
  auto op = weak.lock();
  if (!op) return;
  if (auto l = op->listener.lock()) l->cancel(op);  // still pending at the listener; else it completed already
}

}  // namespace coverbs::detail
