#pragma once
// Private to lib/: the per-thread memory-window counters behind window_statistics().

#include <cstdint>

namespace coverbs::detail {

/// The counters behind window_statistics() (windows_bound is counted per region, see windows_bound_now).
enum class window_counter : unsigned {
  windows_allocated,    // ibv_alloc_mw calls that succeeded (only goes up)
  windows_deallocated,  // ibv_dealloc_mw calls (only goes up; count_deallocated)
  binds,
  binds_failed,
  invalidations,
  remote_invalidations,
  foreign_invalidations,
  windows_replaced,
  leases_granted,
  leases_expired,
  leases_revoked,
  leases_ended,  // granted leases that left the active state, for any reason (only goes up; count_lease_ended)
  count_
};
/// Adds `delta` to counter `c` (counters only go up; a window deallocated: count_deallocated). Each thread
/// counts in a block of its own, with plain loads and stores — no locked instruction on the data path
/// (natively a locked add cost about 15 ns here, an eighth of a bind's bookkeeping); a thread's block is
/// folded into the totals when the thread ends.
void count(window_counter c, std::uint64_t delta = 1) noexcept;
/// Counts a window deallocated (`windows_deallocated`), after its allocation was counted, on any thread.
void count_deallocated() noexcept;
/// Counts a granted lease that ended (`leases_ended`), after its grant was counted, on any thread.
void count_lease_ended() noexcept;
/// Leases granted and not ended, summed as `windows_alive`.
std::uint64_t leases_alive() noexcept;
/// Counter `c` summed over every thread.
std::uint64_t counted(window_counter c) noexcept;
/// Windows alive now: `windows_allocated` minus `windows_deallocated`, summed so that it never wraps (a
/// reader may see a deallocation on one thread before the allocation on another was summed; see
/// thread_counters::difference).
std::uint64_t windows_alive() noexcept;

}  // namespace coverbs::detail
