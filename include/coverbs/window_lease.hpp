#pragma once
/// @file
/// `window_lease`: an RAII remote key granted through a pooled window (`window_pool::async_lease`,
/// window_pool.hpp).
///
/// A lease's key dies at the first of: its time-to-live, `revoke()`, the lease's destruction, the peer's
/// send-with-invalidate of it, or (type-2 windows, whose key serves that queue pair only) the reset or
/// destruction of the queue pair it was bound through. Local revocation invalidates the key asynchronously (never blocking the
/// loop); the window then returns to the pool.
///
/// Revocation on cancellation: `async_hold` completes when the key dies; cancelling it (any cancellation
/// type, e.g. a request timeout through `||` of awaitable operators or a cancellation signal) revokes the
/// key and completes with `operation_aborted` only once the key is dead — so the exposed buffer can be
/// reused without a late remote read or write touching it.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe. Used from the executor of the queue pair it is bound
/// through.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/detail/lease_wait.hpp>
#include <coverbs/error.hpp>
#include <coverbs/queue_pair.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>

namespace coverbs {

/// An RAII grant of a remote key through a pooled window. Move-only; an empty lease holds nothing.
/// Lifetime: the region outlives it. The queue pair it was bound through may go first (destroyed, e.g. with
/// its session): a type-2 key dies with it; a type-1 key lives on until the lease is revoked, expires or is
/// destroyed, and is then killed by deallocating the window (there is no queue pair left to post on).
///
/// Like an Asio I/O object, a lease has an executor: the one of the queue pair it was bound through, where
/// its handlers run unless they have an associated executor of their own. An empty lease that `async_lease`
/// produced (a failed grant), and a moved-from lease, keep that executor; only a default-constructed lease
/// has none (see `async_hold`).
class window_lease {
public:
  using executor_type = queue_pair::executor_type;

  /// An empty lease without an executor.
  window_lease() noexcept = default;
  /// An empty lease whose operations complete on `ex` (as a failed grant's).
  explicit window_lease(executor_type ex) noexcept : ex_(std::move(ex)) {}
  /// A granted lease; its executor is its queue pair's.
  explicit window_lease(std::shared_ptr<detail::lease_state> state) noexcept;
  /// Moves the grant; `other` keeps its executor (as a moved-from Asio socket does).
  window_lease(window_lease&& other) noexcept : ex_(other.ex_), state_(std::move(other.state_)) {}
  window_lease& operator=(window_lease&& other) noexcept;
  window_lease(const window_lease&) = delete;
  window_lease& operator=(const window_lease&) = delete;
  /// Revokes the key (asynchronously) if it is still live.
  ~window_lease();

  /// The key to hand to the peer: address, length in bytes, rkey.
  remote_key key() const noexcept;
  /// True while the key is live (not yet revoked, expired or invalidated by the peer).
  bool active() const noexcept;
  /// Where handlers without an associated executor of their own run (empty for a default-constructed lease).
  executor_type get_executor() const noexcept { return ex_; }
  /// When the time-to-live ends, if the lease has one.
  std::optional<std::chrono::steady_clock::time_point> expires_at() const noexcept;
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// Starts invalidating the key; returns at once. The window returns to the pool when it is dead.
  void revoke() noexcept;

  /// Revokes the key and completes once it is dead (at once, via post, if it already is).
  /// @par Completion Signature `void(error_code)`: success — the key is dead; EBADF on an empty lease.
  /// @par Executor As `async_hold`.
  /// @par Per-Operation Cancellation Not cancellable (it completes within one invalidation).
  template <completion_token_or_handler<void(error_code)> Token = queue_pair::default_token>
  auto async_revoke(Token&& token = {}) {
    return async_wait_dead(false, std::forward<Token>(token));
  }

  /// Waits until the key dies.
  /// @par Completion Signature `void(error_code)`: success when the peer invalidated the key
  /// (send-with-invalidate: "done"), `errc::lease_expired` at the time-to-live, `operation_aborted` after
  /// `revoke()`, cancellation, or the reset or destruction of a type-2 window's queue pair; EBADF on an empty
  /// lease.
  /// @par Executor The handler runs on its associated executor, else on the lease's (`get_executor()`), never
  /// inside this call. A default-constructed lease has no executor: there a handler without one of its own
  /// (a plain callback) has nowhere to run, and this call throws `system_error` EBADF instead of running it
  /// on a thread of Asio's system executor — bind it (`asio::bind_executor(io, callback)`).
  /// @par Per-Operation Cancellation All types: revokes the key, then completes with `operation_aborted`
  /// once the key is dead.
  template <completion_token_or_handler<void(error_code)> Token = queue_pair::default_token>
  auto async_hold(Token&& token = {}) {
    return async_wait_dead(true, std::forward<Token>(token));
  }

private:
  template <class Token>
  auto async_wait_dead(bool hold, Token&& token) {
    return detail::initiate_checked<Token, void(error_code)>(
        [hold](auto handler, std::shared_ptr<detail::lease_state> s, executor_type ex) {
          if (!s && !ex) {  // default-constructed: only the handler's own executor can run it
            if constexpr (detail::has_associated_executor_v<decltype(handler)>)
              return boost::asio::post(boost::asio::append(std::move(handler), errno_code(EBADF)));
            else
              throw_no_executor();
          }
          detail::add_waiter(s, ex, detail::revoke_handler(std::move(handler)), hold);
        },
        token, state_, ex_);
  }
  [[noreturn]] static void throw_no_executor();

  executor_type ex_;
  std::shared_ptr<detail::lease_state> state_;
};

}  // namespace coverbs
