#pragma once
// Private to lib/: what a `loop_pool::member::lease()` is made of, so that the listener can tell a pool's
// placement from any other `connection_options::lease` (a user may put anything there). A lease is a
// `shared_ptr<void>` whose deleter is a `pool_lease`: it counts one placement on its member until the last
// copy goes, and names the pool it came from. `std::get_deleter` finds it; other leases have none.

#include <atomic>
#include <cstddef>
#include <memory>

#if !defined(__cpp_rtti) && !defined(__GXX_RTTI)
#error "coverbs needs RTTI: a loop_pool lease is recognised with std::get_deleter"
#endif

namespace coverbs::detail {

struct pool_lease {
  /// The member's count of leases alive (`member::load()`); kept, not the member: a lease may outlive the pool.
  std::shared_ptr<std::atomic<std::size_t>> load;
  /// The pool's address, only compared: which pool a placement belongs to.
  const void* pool = nullptr;
  /// The member's protection domain and completion queue (null without a device), only compared: a placement
  /// is the member's own only with these (`placed_on_pool`).
  const void* pd = nullptr;
  const void* cq = nullptr;
  void operator()(void*) const noexcept { load->fetch_sub(1, std::memory_order_relaxed); }
};

/// A new lease on the member whose count is `load` (of `pool`, with that member's `pd` and `cq`).
inline std::shared_ptr<void> make_pool_lease(std::shared_ptr<std::atomic<std::size_t>> load, const void* pool,
                                             const void* pd, const void* cq) {
  load->fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<void>(nullptr, pool_lease{std::move(load), pool, pd, cq});
}

/// The pool whose member's own resources `lease`, `pd` and `cq` are (options from
/// `member::connection_options()`), or null: not a pool member's lease, or resources other than its member's
/// (a lease taken with `member::lease()` for a queue pair of the user's own).
inline const void* placed_on_pool(const std::shared_ptr<void>& lease, const void* pd, const void* cq) noexcept {
  const pool_lease* p = std::get_deleter<pool_lease>(lease);
  return p && p->pd == pd && p->cq == cq ? p->pool : nullptr;
}

/// Another lease on the same member as `lease` (one more placement counted), or a copy of `lease` when it is
/// not a pool member's.
inline std::shared_ptr<void> another_lease(const std::shared_ptr<void>& lease) {
  const pool_lease* p = std::get_deleter<pool_lease>(lease);
  return p ? make_pool_lease(p->load, p->pool, p->pd, p->cq) : lease;
}

}  // namespace coverbs::detail
