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
  // The live binding as other threads may read it (a peer's send-with-invalidate arriving on another queue
  // pair): (qp_num << 32) | rkey, qp_num being the queue pair a type-2 window was bound through (0 for type 1,
  // which belongs to no queue pair; QP0 is never an RC queue pair); 0 while unbound. Written by the window's
  // executor, read under the registry's mutex (which also keeps the window from being freed meanwhile).
  std::atomic<std::uint64_t> binding{0};
  std::uint32_t pending_qp_num = 0;  // the queue pair of the bind in flight (type 2)
};

/// Windows bound now to `mr` (as coverbs recorded them).
std::size_t windows_bound_to(const ibv_mr* mr) noexcept;
/// Windows bound now, over every region.
std::size_t windows_bound_now() noexcept;
/// `mr` was deregistered: drops its entry.
void forget_region(const ibv_mr* mr) noexcept;

/// A receive on queue pair `qp_num` of `context` reported that the peer invalidated `rkey` (IBV_WC_WITH_INV;
/// for an SRQ receive, `qp_num` is the completion's). Runs on that queue pair's executor.
/// - `rkey` is the live key of a type-2 window bound through `qp_num`: marks it unbound (counted in
///   `remote_invalidations`, a lease's hook told) and returns success.
/// - anything else is refused (the rule: accept only a window bound through the queue pair it arrived on):
///   returns `errc::foreign_remote_invalidation` and counts `foreign_invalidations` — a key that is no live
///   window (stale, unknown), the live key of a type-1 window (IBA: only a type-2 window may be invalidated
///   remotely, and only through its own queue pair), of a window bound through another queue pair, or of a
///   window of another context of the same device (rxe checks neither queue pair nor protection domain).
///   A device that enforces the rule fails such a receive instead, so a live window gets here only from one
///   that did not (rxe), which has killed its key: on the window's own executor (dispatched there when it is
///   another), it is replaced (deallocated and allocated anew, so the key is dead on any device) and its
///   lease's hook told.
error_code note_remote_invalidation(ibv_context* context, std::uint32_t rkey, std::uint32_t qp_num) noexcept;

/// Queue pair `qp_num` of `context` was reset (a new connection, perhaps to another peer): every window bound
/// through it now is replaced (its key dead) and its lease's hook told. On that queue pair's executor.
void forget_windows_bound_through(ibv_context* context, std::uint32_t qp_num) noexcept;
/// Queue pair `qp_num` of `context` is being destroyed (its number may be reused): the windows bound through
/// it keep their keys but no longer count as bound through any queue pair, so a later remote invalidation of
/// them is foreign. Any thread (under the registry's mutex; a binding stored meanwhile stands).
void unlink_windows_from(ibv_context* context, std::uint32_t qp_num) noexcept;

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
