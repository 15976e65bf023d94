#pragma once
/// @file
/// `window_counters`: process-wide memory-window counters (like a NIC's active_mw / mw_bind_fails) and
/// `window_statistics()`, their snapshot.

#include <coverbs/config.hpp>
#include <cstdint>

namespace coverbs {

/// Process-wide memory-window counters (like a NIC's active_mw / mw_bind_fails).
struct window_counters {
  /// Windows alive now: ibv_alloc_mw calls minus ibv_dealloc_mw calls, each counted only upward and
  /// subtracted after summing, so a read never wraps (a window allocated on one thread and deallocated on
  /// another while the read runs may or may not be in it).
  std::uint64_t windows_allocated = 0;
  std::uint64_t windows_bound = 0;         ///< windows with a live key now
  std::uint64_t binds = 0;                 ///< binds completed successfully (rebinds included)
  std::uint64_t binds_failed = 0;          ///< binds refused before posting or failed on the device
  std::uint64_t invalidations = 0;         ///< keys this process invalidated (LOCAL_INV or type-1 zero-length bind)
  std::uint64_t remote_invalidations = 0;  ///< keys peers invalidated with send-with-invalidate
  /// Send-with-invalidates naming a window not bound through the queue pair they arrived on, refused with
  /// `errc::foreign_remote_invalidation` (a hostile or broken peer).
  std::uint64_t foreign_invalidations = 0;
  std::uint64_t windows_replaced = 0;  ///< windows deallocated and reallocated to kill a key for sure
  /// window_lease (window_pool.hpp): granted; expired at their TTL; revoked (by `revoke()`, `async_revoke`, the
  /// lease's destruction or a cancelled hold). A lease whose key a peer invalidated ends in neither.
  std::uint64_t leases_granted = 0, leases_expired = 0, leases_revoked = 0;
  /// Leases live now: granted and not yet ended (expired, revoked, invalidated by the peer, or their queue pair
  /// gone); a gauge summed like `windows_allocated`, so it never wraps. A lease counts as ended when its
  /// revocation starts, before its key is dead.
  std::uint64_t leases_live = 0;
};

/// A snapshot of the counters. Each thread counts in a block of its own (a bind or an invalidation costs no
/// locked instruction), and this sums the blocks and walks the windows that have been bound (for
/// `windows_bound`) under one lock: a control-path call, microseconds with thousands of windows. Counts
/// another thread makes while it runs may or may not be in it. @par Thread Safety Safe from any thread.
window_counters window_statistics() noexcept;

}  // namespace coverbs
