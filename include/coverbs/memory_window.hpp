#pragma once
/// @file
/// `memory_window`: a remote key with its own range and rights over part of a memory region, granted and
/// revoked on the data path (ibv_alloc_mw(3), ibv_bind_mw(3), IBV_WR_BIND_MW, IBV_WR_LOCAL_INV) — far
/// cheaper than re-registering memory to change what a peer may touch.
///
/// ```cpp
/// coverbs::memory_window w(pd, coverbs::window_type::type2);
/// remote_key key = co_await coverbs::bind_mw(qp, w, mr, {0, 4096}, access::remote_read);
/// ... hand `key` to the peer, let it read ...
/// co_await coverbs::invalidate(qp, w);   // returns once the key is dead on the device
/// ```
///
/// Rights: a window grants only remote_read, remote_write and remote_atomic. Its effective rights are the
/// intersection of its own and its region's, so coverbs refuses (before posting) a window right the region
/// does not grant — a window never gives a peer more than the region would.
///
/// Validation: every rule that would otherwise fail the bind on the device, and so move the queue pair to
/// the error state (IBA 10.8.3), is checked before posting; each violation completes the operation with its
/// own `errc` and the queue pair keeps working (see `bind_mw`).
///
/// Type 2 (2A or 2B): bound by a work request; the key is tied to the queue pair that bound it (a peer's
/// access arrives through that queue pair, or fails). Type 1: bound by ibv_bind_mw(3) through any queue pair
/// of the domain; invalidated by a zero-length bind. Both: one bind or invalidation per window at a time.
///
/// Remote invalidation: a peer may kill a type-2 key with `queue_pair::async_send_with_invalidate`; when
/// the receive completes here, the window is marked unbound before the receive's handler runs.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe. A window is used from the executor of the queue pairs it
/// is bound through (remote invalidations are recorded from their completion path). The counters
/// (`window_statistics`, window_counters.hpp) are safe from any thread. What is done with a window —
/// `bind_mw`, `rebind_mw`, `invalidate` — is in window_operations.hpp.

#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/error.hpp>
#include <coverbs/detail/fwd.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace coverbs {

class protection_domain;

/// The kind of a memory window. `type2` accepts either flavour the device has; `type2a` / `type2b` demand
/// that flavour (rxe has type 1 and 2B only).
enum class window_type : std::uint8_t { type1, type2, type2a, type2b };

/// What a window is doing.
enum class window_state : std::uint8_t {
  unbound,       ///< no live key
  binding,       ///< a bind (or rebind) is in flight
  bound,         ///< `key()` is live
  invalidating,  ///< an invalidation is in flight
};

/// Part of a memory region, in bytes from its start. `length == all`: to the end of the region.
struct window_range {
  static constexpr std::size_t all = static_cast<std::size_t>(-1);
  std::size_t offset = 0;
  std::size_t length = all;
};

/// Move-only owner of a memory window (`ibv_alloc_mw` / `ibv_dealloc_mw`).
///
/// Lifetime: the protection domain outlives the window; a region outlives the windows bound to it (its
/// deregistration is refused with `errc::region_has_bound_windows` until they are invalidated).
/// Destroying a bound window deallocates it, which kills its key. Destroying a window with a bind or
/// invalidation in flight defers the deallocation until that completes.
class memory_window {
public:
  memory_window() noexcept = default;
  /// Allocates a window of `type` in `pd`.
  /// @throws system_error `errc::mw_type_unsupported` (the device lacks the type: `device_caps` says which
  /// it has), or the errno of ibv_alloc_mw(3) (ENOMEM: the device's max_mw is reached).
  memory_window(protection_domain& pd, window_type type);
  /// As above; on failure sets `ec` and leaves the window empty.
  memory_window(protection_domain& pd, window_type type, error_code& ec) noexcept;

  memory_window(memory_window&&) noexcept = default;
  memory_window& operator=(memory_window&&) noexcept = default;
  ~memory_window() = default;

  /// type1 or type2 (the flavour asked for at allocation is not kept).
  window_type type() const noexcept;
  window_state state() const noexcept;
  bool bound() const noexcept { return state() == window_state::bound; }
  /// The current binding: address, length (bytes) and rkey; empty unless `bound()`.
  remote_key key() const noexcept;
  /// The rights of the current binding.
  access rights() const noexcept;
  /// The window's current rkey as the device knows it (also while unbound; a bind makes a new one).
  std::uint32_t rkey() const noexcept;
  ibv_pd* pd() const noexcept;
  ibv_mw* native_handle() const noexcept;
  explicit operator bool() const noexcept { return impl_ != nullptr; }

  /// Records that a peer invalidated `rkey` (for receives that bypass coverbs' queue pairs; coverbs' own
  /// receives record it automatically). @returns true when `rkey` was this window's live key.
  bool note_remote_invalidation(std::uint32_t rkey) noexcept;

private:
  friend struct detail::impl_access;
  std::unique_ptr<detail::window_impl, detail::window_impl_deleter> impl_;
};

}  // namespace coverbs
