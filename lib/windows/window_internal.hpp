#pragma once
// Private to lib/: the state behind a memory_window, and what the windows layer does to it (its life: bound,
// unbound, replaced, destroyed). The registries are window_registry.hpp (windows by rkey) and
// verbs/region_registry.hpp (bindings by region); counters window_counters.hpp; peers' invalidations
// remote_invalidation.hpp.

#include <coverbs/detail/wr_node.hpp>
#include <coverbs/memory_window.hpp>

#include "verbs/region_registry.hpp"

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace coverbs::detail {

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
  // Its entry in the region registry: which region's deregistration it holds up while bound.
  region_binding region_entry;
  // Told when the key died by anything but this window's own operations (window_lease): a peer's
  // send-with-invalidate, or a foreign one (cause empty); the queue pair it was bound through reset or destroyed
  // (cause operation_aborted).
  void (*on_remote_invalidation)(void* context, error_code cause) = nullptr;
  void* hook_context = nullptr;
  // The live binding as other threads may read it (a peer's send-with-invalidate arriving on another queue
  // pair): (qp_num << 32) | rkey, qp_num being the queue pair a type-2 window was bound through (0 for type 1,
  // which belongs to no queue pair; QP0 is never an RC queue pair); 0 while unbound. Written by the window's
  // executor, read under the registry's mutex (which also keeps the window from being freed meanwhile).
  std::atomic<std::uint64_t> binding{0};
  std::uint32_t pending_qp_num = 0;  // the queue pair of the bind in flight (type 2)
};

/// Records `w`'s current binding (w->key, w->mr) as live in its region's list.
void record_bound(window_impl* w) noexcept;
/// Forgets `w`'s current binding (the key is dead) and marks the window unbound.
void record_unbound(window_impl* w) noexcept;
/// Kills the window's key for sure: deallocates it and allocates a fresh one (empty if that fails).
void replace(window_impl* w) noexcept;
/// Deallocates the window and frees its state.
void destroy_now(window_impl* w) noexcept;
/// Runs after an operation's last completion (or a failure before posting): frees an orphaned window.
void finish(window_impl* w) noexcept;
/// verbs' type of a window (type 1 or 2).
ibv_mw_type verbs_type(window_type t) noexcept;
/// Posts a type-1 bind (or a zero-length one, to invalidate) with ibv_bind_mw(3) instead of ibv_post_send.
int post_type1_bind(ibv_qp* qp, wr_node* n);
/// What every window operation checks first: EBADF (empty window), `errc::window_busy`, `errc::pd_mismatch`.
error_code check_window(queue_pair_impl* q, window_impl* w);

}  // namespace coverbs::detail
