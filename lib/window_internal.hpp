#pragma once
// Private to lib/: the state behind a memory_window, and what other parts of the library ask about windows.

#include <coverbs/memory_window.hpp>

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace coverbs::detail {

struct region_cell;

class window_impl {
public:
  ibv_mw* mw = nullptr;
  ibv_pd* pd = nullptr;
  window_type type = window_type::type2;  // type1 or type2
  window_state state = window_state::unbound;
  // The current binding (valid while bound, and while a rebind of a bound window is in flight).
  remote_key key{};
  access rights = access::none;
  ibv_mr* mr = nullptr;
  // The operation in flight: what the window was, and what it becomes on success.
  window_state prev_state = window_state::unbound;
  std::uint32_t prev_rkey = 0;
  ibv_mr* pending_mr = nullptr;
  access pending_rights = access::none;
  bool pending_chain = false;
  bool orphaned = false;  // the memory_window was destroyed while an operation was in flight
  // The region this window was bound to last (see memory_window.cpp), its neighbours in that region's list,
  // and whether the current binding is live there (written by the window's executor, read by deregistration).
  region_cell* region = nullptr;
  window_impl* cell_prev = nullptr;
  window_impl* cell_next = nullptr;
  std::atomic<bool> counted{false};
  // Told when a peer invalidated the key (window_lease).
  void (*on_remote_invalidation)(void* context) = nullptr;
  void* hook_context = nullptr;
};

/// Windows bound now to `mr` (as coverbs recorded them).
std::size_t windows_bound_to(const ibv_mr* mr) noexcept;
/// Windows bound now, over every region.
std::size_t windows_bound_now() noexcept;
/// `mr` was deregistered: drops its entry.
void forget_region(const ibv_mr* mr) noexcept;

/// A receive on a queue pair of `context` reported that the peer invalidated `rkey` (IBV_WC_WITH_INV):
/// marks the window with that key unbound. Runs on the queue pair's executor.
void note_remote_invalidation(ibv_context* context, std::uint32_t rkey) noexcept;

/// The counters behind window_statistics() (windows_bound is counted per region, see windows_bound_now).
enum class window_counter : unsigned {
  windows_allocated,
  binds,
  binds_failed,
  invalidations,
  remote_invalidations,
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
