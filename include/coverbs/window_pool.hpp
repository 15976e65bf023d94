#pragma once
/// @file
/// `window_pool` and `window_lease`: remote keys handed out as leases.
///
/// ibv_alloc_mw is a system call; binding is a work request. A pool allocates windows ahead of time (and
/// more on demand, up to a bound), so granting a peer access costs one bind on the data path:
///
/// ```cpp
/// coverbs::window_pool pool(pd, {.type = coverbs::window_type::type2});
/// coverbs::window_lease lease =
///     co_await pool.async_lease(qp, mr, {offset, n}, access::remote_write, std::chrono::seconds(5));
/// co_await send_to_peer(lease.key());
/// auto [ec] = co_await lease.async_hold(as_tuple(use_awaitable));   // until the peer is done, or cancelled
/// ```
///
/// A lease's key dies at the first of: its time-to-live, `revoke()`, the lease's destruction, or the peer's
/// send-with-invalidate of it. Local revocation invalidates the key asynchronously (never blocking the
/// loop); the window then returns to the pool.
///
/// Revocation on cancellation: `async_hold` completes when the key dies; cancelling it (any cancellation
/// type, e.g. a request timeout through `||` of awaitable operators or a cancellation signal) revokes the
/// key and completes with `operation_aborted` only once the key is dead — so the exposed buffer can be
/// reused without a late remote read or write touching it.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe. A pool and its leases are used from one executor (the one
/// of the queue pairs the leases are bound through). Not shared across loops: its state is unlocked and
/// its timers run on the queue pair's executor. With a `loop_pool`, make one window pool per member.

#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/memory_window.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace coverbs {

class protection_domain;
class window_lease;

/// How a pool allocates.
struct window_pool_options {
  window_type type = window_type::type2;
  std::size_t initial_windows = 8;  ///< allocated by the constructor
  std::size_t max_windows = 1024;   ///< the bound: windows out on lease plus free ones
};

namespace detail {
struct pool_impl;
struct lease_state;
using lease_handler = boost::asio::any_completion_handler<void(error_code, window_lease)>;
using revoke_handler = boost::asio::any_completion_handler<void(error_code)>;
void start_lease(const std::shared_ptr<pool_impl>& pool, queue_pair& qp, const memory_region& region,
                 window_range range, access rights, std::chrono::steady_clock::duration ttl, lease_handler handler);
/// Queues `handler` until the key is dead; `hold == false` (async_revoke) starts the revocation too. With no
/// state (an empty lease), completes with EBADF through `ex` (the handler's associated executor, else `ex`).
void add_waiter(const std::shared_ptr<lease_state>& state, const queue_pair::executor_type& ex, revoke_handler handler,
                bool hold);
}  // namespace detail

/// An RAII grant of a remote key through a pooled window. Move-only; an empty lease holds nothing.
/// Lifetime: the queue pair it was bound through and the region outlive it.
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
  template <boost::asio::completion_token_for<void(error_code)> Token = queue_pair::default_token>
  auto async_revoke(Token&& token = {}) {
    return async_wait_dead(false, std::forward<Token>(token));
  }

  /// Waits until the key dies.
  /// @par Completion Signature `void(error_code)`: success when the peer invalidated the key
  /// (send-with-invalidate: "done"), `errc::lease_expired` at the time-to-live, `operation_aborted` after
  /// `revoke()` or cancellation; EBADF on an empty lease.
  /// @par Executor The handler runs on its associated executor, else on the lease's (`get_executor()`), never
  /// inside this call. A default-constructed lease has no executor: there a handler without one of its own
  /// (a plain callback) has nowhere to run, and this call throws `system_error` EBADF instead of running it
  /// on a thread of Asio's system executor — bind it (`asio::bind_executor(io, callback)`).
  /// @par Per-Operation Cancellation All types: revokes the key, then completes with `operation_aborted`
  /// once the key is dead.
  template <boost::asio::completion_token_for<void(error_code)> Token = queue_pair::default_token>
  auto async_hold(Token&& token = {}) {
    return async_wait_dead(true, std::forward<Token>(token));
  }

private:
  template <class Token>
  auto async_wait_dead(bool hold, Token&& token) {
    return boost::asio::async_initiate<Token, void(error_code)>(
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

/// Pre-allocated memory windows of one protection domain, handed out as leases. Grows on demand up to
/// `max_windows`. Lifetime: the protection domain outlives the pool; leases keep the pool's state alive.
class window_pool {
public:
  /// Allocates `options.initial_windows` windows.
  /// @throws system_error `errc::mw_type_unsupported`, or the errno of ibv_alloc_mw(3).
  explicit window_pool(protection_domain& pd, const window_pool_options& options = {});
  window_pool(window_pool&&) noexcept = default;
  window_pool& operator=(window_pool&&) noexcept = default;
  ~window_pool();

  /// Windows allocated by the pool (free plus leased) / free now.
  std::size_t size() const noexcept;
  std::size_t free() const noexcept;

  /// Takes an unbound window (allocating one if none is free and the bound allows).
  /// @par Errors `errc::window_pool_exhausted`, the errno of ibv_alloc_mw(3).
  memory_window acquire(error_code& ec);
  /// Gives a window back. A window that is still bound or busy is deallocated instead (its key dies).
  void release(memory_window&& window) noexcept;

  /// Binds a pooled window to `range` of `region` with `rights` through `qp` and grants it as a lease.
  /// @param ttl time-to-live; zero: none (the lease lives until revoked, destroyed or invalidated by the peer).
  /// @par Completion Signature `void(error_code, window_lease)`
  /// @par Errors `errc::window_pool_exhausted`, then those of `bind_mw` (the window returns to the pool).
  /// @par Per-Operation Cancellation As `bind_mw`.
  template <boost::asio::completion_token_for<void(error_code, window_lease)> Token = queue_pair::default_token>
  auto async_lease(queue_pair& qp, const memory_region& region, window_range range, access rights,
                   std::chrono::steady_clock::duration ttl = {}, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(error_code, window_lease)>(
        [this, &qp, &region, range, rights, ttl](auto handler) {
          detail::start_lease(impl_, qp, region, range, rights, ttl, detail::lease_handler(std::move(handler)));
        },
        token);
  }

private:
  std::shared_ptr<detail::pool_impl> impl_;
};

}  // namespace coverbs
