#pragma once
// Private to lib/: the state behind a memory_window, and what other parts of the library ask about windows.

#include <coverbs/memory_window.hpp>

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
  // Told when a peer invalidated the key (window_lease).
  void (*on_remote_invalidation)(void* context) = nullptr;
  void* hook_context = nullptr;
};

/// Windows bound now to `mr` (as coverbs recorded them).
std::size_t windows_bound_to(const ibv_mr* mr) noexcept;
/// `mr` was deregistered: drops its entry.
void forget_region(const ibv_mr* mr) noexcept;

/// A receive on a queue pair of `context` reported that the peer invalidated `rkey` (IBV_WC_WITH_INV):
/// marks the window with that key unbound. Runs on the queue pair's executor.
void note_remote_invalidation(ibv_context* context, std::uint32_t rkey) noexcept;

/// The counters behind window_statistics().
struct window_counter_cells {
  std::atomic<std::uint64_t> windows_allocated{0}, windows_bound{0}, binds{0}, binds_failed{0}, invalidations{0},
      remote_invalidations{0}, windows_replaced{0}, leases_granted{0}, leases_expired{0}, leases_revoked{0};
};
window_counter_cells& counters() noexcept;

}  // namespace coverbs::detail
