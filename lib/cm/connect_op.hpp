#pragma once
// Private to lib/: an `async_connect` in progress (the active side). It lives with its connection
// (`connection_impl::op_`) from the start; its cancellation is carried to the connection's executor.

#include "cm/completion.hpp"
#include "cm/setup_op.hpp"

#include <memory>

namespace coverbs::detail {

struct connect_op final : setup_op, connection_completion {
  /// The connection being set up (resolving, then connecting).
  std::weak_ptr<connection_impl> conn;

  /// Completes the handler with the connection.
  void established(std::shared_ptr<connection_impl> c) override;
  /// Completes the handler with `ec` and an empty connection.
  void failed(error_code ec, bool post) override;
  /// Runs where the cancellation is emitted (the handler's executor); the connection may live on another
  /// executor (a loop_pool member's): it is failed with `operation_aborted` there.
  static void cancel(const std::weak_ptr<connect_op>& weak);
};

}  // namespace coverbs::detail
