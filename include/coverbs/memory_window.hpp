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
/// (`window_statistics`) are safe from any thread.

#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/error.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/queue_pair.hpp>

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

/// Process-wide memory-window counters (like a NIC's active_mw / mw_bind_fails).
struct window_counters {
  std::uint64_t windows_allocated = 0;     ///< windows alive now (ibv_alloc_mw minus ibv_dealloc_mw)
  std::uint64_t windows_bound = 0;         ///< windows with a live key now
  std::uint64_t binds = 0;                 ///< binds completed successfully (rebinds included)
  std::uint64_t binds_failed = 0;          ///< binds refused before posting or failed on the device
  std::uint64_t invalidations = 0;         ///< keys this process invalidated (LOCAL_INV or type-1 zero-length bind)
  std::uint64_t remote_invalidations = 0;  ///< keys peers invalidated with send-with-invalidate
  /// Send-with-invalidates naming a window not bound through the queue pair they arrived on, refused with
  /// `errc::foreign_remote_invalidation` (a hostile or broken peer).
  std::uint64_t foreign_invalidations = 0;
  std::uint64_t windows_replaced = 0;      ///< windows deallocated and reallocated to kill a key for sure
  std::uint64_t leases_granted = 0, leases_expired = 0, leases_revoked = 0;  ///< window_lease (window_pool.hpp)
};

/// A snapshot of the counters. Each thread counts in a block of its own (a bind or an invalidation costs no
/// locked instruction), and this sums the blocks and walks the windows that have been bound (for
/// `windows_bound`) under one lock: a control-path call, microseconds with thousands of windows. Counts
/// another thread makes while it runs may or may not be in it. @par Thread Safety Safe from any thread.
window_counters window_statistics() noexcept;

namespace detail {
class window_impl;
struct window_impl_deleter {
  void operator()(window_impl* w) const noexcept;
};

/// The pure part of bind validation (no device needed; unit-tested).
struct bind_check {
  window_type type = window_type::type2;
  window_state state = window_state::unbound;
  const void* window_pd = nullptr;
  const void* qp_pd = nullptr;
  const void* region_pd = nullptr;
  access region_rights = access::none;
  std::size_t region_length = 0;
  window_range range;
  access rights = access::none;
  bool rebind = false;  ///< rebind_mw: a bound window is invalidated in the same chain
};
/// The first rule `c` breaks (see `bind_mw`), or success with the resolved length in `length`.
error_code validate_bind(const bind_check& c, std::size_t& length) noexcept;

error_code prepare_bind(queue_pair_impl* q, wr_node& n, window_impl* w, ibv_mr* mr, access region_rights,
                        window_range range, access rights, bool rebind);
error_code prepare_invalidate(queue_pair_impl* q, wr_node& n, window_impl* w);
error_code prepare_invalidate_rkey(queue_pair_impl* q, wr_node& n, std::uint32_t rkey);
}  // namespace detail

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

  /// Internal.
  detail::window_impl* impl() const noexcept { return impl_.get(); }

private:
  std::unique_ptr<detail::window_impl, detail::window_impl_deleter> impl_;
};

namespace detail {
/// bind_mw (`rebind == false`) and rebind_mw.
template <class Token>
auto async_bind(queue_pair& qp, memory_window& window, const memory_region& region, window_range range, access rights,
                bool rebind, Token&& token) {
  return qp.async_post<result_kind::key, void(error_code, remote_key)>(
      std::forward<Token>(token),
      [w = window.impl(), mr = region.native_handle(), rr = region.rights(), range, rights,
       rebind](queue_pair_impl* q, wr_node& n) { return prepare_bind(q, n, w, mr, rr, range, rights, rebind); });
}
}  // namespace detail

/// Binds `window` to `range` of `region` with `rights` and produces the remote key a peer uses.
///
/// Type 2 posts IBV_WR_BIND_MW with the next key (ibv_inc_rkey(3) of the current one) and records it in the
/// window (`ibv_mw::rkey`) on success; type 1 calls ibv_bind_mw(3), which makes the previous key of a bound
/// window die. On failure the window keeps the key state it had.
///
/// @param qp a queue pair in the window's protection domain; for type 2 the key then works only for
/// peers connected to this queue pair.
/// @param range bytes of `region` from its start (`length` may be `window_range::all`).
/// @param rights any of remote_read, remote_write, remote_atomic.
/// @par Completion Signature `void(error_code, remote_key)`: {address, length in bytes, rkey}.
/// @par Errors Before posting (the queue pair stays healthy), in this order: EBADF (empty window or
/// unregistered region), `errc::window_busy` (another operation on the window is in flight),
/// `errc::pd_mismatch` (window, queue pair and region not in one domain, C10-72),
/// `errc::window_access_invalid` (a right other than the three remote ones),
/// `errc::region_lacks_mw_bind` (C10-73), `errc::window_needs_local_write` (C10-74),
/// `errc::access_exceeds_region` (a right the region does not grant), `errc::range_outside_region` (C10-75),
/// `errc::zero_length_window` (o10-37.2.40), `errc::window_still_bound` (type 2, o10-37.2.30: use
/// `rebind_mw`). From the device: `wc_errc::mw_bind_err`, `wr_flush_err`, the errno of ibv_post_send(3) /
/// ibv_bind_mw(3).
/// @par Per-Operation Cancellation As every queue-pair operation (queue_pair.hpp): terminal only once
/// posted. A cancelled or flushed bind leaves no live key.
/// @see ibv_bind_mw(3), ibv_post_send(3) (IBV_WR_BIND_MW), ibv_inc_rkey(3)
template <boost::asio::completion_token_for<void(error_code, remote_key)> Token = queue_pair::default_token>
auto bind_mw(queue_pair& qp, memory_window& window, const memory_region& region, window_range range, access rights,
             Token&& token = {}) {
  return detail::async_bind(qp, window, region, range, rights, false, std::forward<Token>(token));
}

/// As `bind_mw`, for a window that may be bound already: its old key dies and the new binding (for example
/// with other rights) takes its place. A bound type-2 window is invalidated and bound again in one chain of
/// two work requests (IBV_WR_LOCAL_INV + IBV_WR_BIND_MW, one completion); a type-1 window simply rebinds.
/// If the chain fails, the window is replaced (deallocated and allocated again), so the old key is dead.
/// @par Completion Signature `void(error_code, remote_key)`
/// @par Errors As `bind_mw`, without `errc::window_still_bound`.
template <boost::asio::completion_token_for<void(error_code, remote_key)> Token = queue_pair::default_token>
auto rebind_mw(queue_pair& qp, memory_window& window, const memory_region& region, window_range range, access rights,
               Token&& token = {}) {
  return detail::async_bind(qp, window, region, range, rights, true, std::forward<Token>(token));
}

/// Kills the window's key and completes once the device has retired it: IBV_WR_LOCAL_INV for type 2, a
/// zero-length ibv_bind_mw(3) for type 1. An unbound window completes at once with success (nothing to do).
/// Should the invalidation fail or be flushed, the window is replaced (ibv_dealloc_mw + ibv_alloc_mw), so in
/// every case the old key is dead when the handler runs.
/// @param qp a queue pair of the window's protection domain.
/// @par Completion Signature `void(error_code)`
/// @par Errors Before posting: EBADF (empty window), `errc::window_busy`, `errc::pd_mismatch`. After: the
/// work completion's `wc_errc`, `wr_flush_err` (the key is dead all the same).
/// @par Per-Operation Cancellation Terminal once posted (the queue pair goes to the error state; the key is
/// still dead when the handler runs).
/// @see ibv_post_send(3) (IBV_WR_LOCAL_INV), ibv_bind_mw(3)
template <boost::asio::completion_token_for<void(error_code)> Token = queue_pair::default_token>
auto invalidate(queue_pair& qp, memory_window& window, Token&& token = {}) {
  return qp.async_post<detail::result_kind::none, void(error_code)>(
      std::forward<Token>(token), [w = window.impl()](detail::queue_pair_impl* q, detail::wr_node& n) {
        return detail::prepare_invalidate(q, n, w);
      });
}

/// As above, for the window whose current key is `rkey` (in the queue pair's domain).
/// @par Errors `errc::rkey_not_a_window` (no window coverbs knows has that live key; nothing is posted),
/// then as above.
template <boost::asio::completion_token_for<void(error_code)> Token = queue_pair::default_token>
auto invalidate(queue_pair& qp, std::uint32_t rkey, Token&& token = {}) {
  return qp.async_post<detail::result_kind::none, void(error_code)>(
      std::forward<Token>(token),
      [rkey](detail::queue_pair_impl* q, detail::wr_node& n) { return detail::prepare_invalidate_rkey(q, n, rkey); });
}

}  // namespace coverbs
