#pragma once
// Private to lib/: the per-thread memory-window counters behind window_statistics().

#include <cstdint>

namespace coverbs::detail {

/// The counters behind window_statistics() (windows_bound is counted per region, see windows_bound_now).
enum class window_counter : unsigned {
  windows_allocated,
  binds,
  binds_failed,
  invalidations,
  remote_invalidations,
  foreign_invalidations,
  windows_replaced,
  leases_granted,
  leases_expired,
  leases_revoked,
  count_
};
/// Adds `delta` (wrapping; -1 as ~0) to counter `c`. Each thread counts in a block of its own, with plain
/// loads and stores — no locked instruction on the data path (natively a locked add cost about 15 ns here,
/// an eighth of a bind's bookkeeping); a thread's block is folded into the totals when the thread ends.
void count(window_counter c, std::uint64_t delta = 1) noexcept;
/// Counter `c` summed over every thread.
std::uint64_t counted(window_counter c) noexcept;

}  // namespace coverbs::detail
