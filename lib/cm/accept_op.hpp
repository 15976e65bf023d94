#pragma once
// Private to lib/: a `listener::async_accept` in progress (the passive side). It waits at the listener
// (`listener_impl::accepts_`) while the handshakes it started run (`handshake_op`); the first of them to be
// established, or one made for an earlier accept with the same options, completes it. Its cancellation is
// handled by the listener.

#include <coverbs/connection_options.hpp>

#include "cm/completion.hpp"

#include <cstddef>
#include <memory>

namespace coverbs::detail {

struct accept_op final : connection_completion {
  /// The queue pair, resources and parameters of the connection the accept is for.
  connection_options options;
  /// While pending at the listener; reset when it completes.
  std::weak_ptr<listener_impl> listener;
  /// Its handshakes in progress. Listener's executor only.
  std::size_t handshakes = 0;

  /// Runs where the cancellation is emitted: the handler's executor, which for an accept is the listener's.
  /// An accept still pending completes with `operation_aborted`; its handshakes go on (`listener_impl::cancel`).
  static void cancel(const std::weak_ptr<accept_op>& weak);
};

}  // namespace coverbs::detail
