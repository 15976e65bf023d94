#pragma once
/// @file
/// `window_pool`: memory windows allocated ahead of time, handed out as leases (window_lease.hpp).
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
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe. A pool and its leases are used from one executor (the one
/// of the queue pairs the leases are bound through). Not shared across loops: its state is unlocked and
/// its timers run on the queue pair's executor. With a `loop_pool`, make one window pool per member.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/access.hpp>
#include <coverbs/detail/window_pool_start.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/memory_window.hpp>
#include <coverbs/queue_pair.hpp>
#include <coverbs/window_lease.hpp>

#include <boost/asio/async_result.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace coverbs {

class protection_domain;

/// How a pool allocates.
struct window_pool_options {
  window_type type = window_type::type2;
  std::size_t initial_windows = 8;  ///< allocated by the constructor
  std::size_t max_windows = 1024;   ///< the bound: windows out on lease plus free ones
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
  template <completion_token_or_handler<void(error_code, window_lease)> Token = queue_pair::default_token>
  auto async_lease(queue_pair& qp, const memory_region& region, window_range range, access rights,
                   std::chrono::steady_clock::duration ttl = {}, Token&& token = {}) {
    return detail::initiate_checked<Token, void(error_code, window_lease)>(
        [this, &qp, &region, range, rights, ttl](auto handler) {
          detail::start_lease(impl_, qp, region, range, rights, ttl, detail::lease_handler(std::move(handler)));
        },
        token);
  }

private:
  std::shared_ptr<detail::pool_impl> impl_;
};

}  // namespace coverbs
