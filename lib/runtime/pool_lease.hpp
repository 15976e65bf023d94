#pragma once
// Private to lib/: what a `loop_pool::member::lease()` is made of, so that the listener can tell a pool's
// placement from any other `connection_options::lease` (a user may put anything there). A lease is a
// `shared_ptr<void>` whose deleter is a `pool_lease`: it counts one placement on its member until the last
// copy goes, and names the pool it came from. `std::get_deleter` finds it; other leases have none.

#include <atomic>
#include <cstddef>
#include <memory>

namespace coverbs::detail {

struct pool_lease {
  /// The member's count of leases alive (`member::load()`); kept, not the member: a lease may outlive the pool.
  std::shared_ptr<std::atomic<std::size_t>> load;
  /// The pool's address, only compared: which pool a placement belongs to.
  const void* pool = nullptr;
  void operator()(void*) const noexcept { load->fetch_sub(1, std::memory_order_relaxed); }
};

/// A new lease on the member whose count is `load`.
inline std::shared_ptr<void> make_pool_lease(std::shared_ptr<std::atomic<std::size_t>> load, const void* pool) {
  load->fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<void>(nullptr, pool_lease{std::move(load), pool});
}

/// The pool `lease` came from, or null when it is not a pool member's lease.
inline const void* pool_of(const std::shared_ptr<void>& lease) noexcept {
  const pool_lease* p = std::get_deleter<pool_lease>(lease);
  return p ? p->pool : nullptr;
}

/// Another lease on the same member as `lease` (one more placement counted), or a copy of `lease` when it is
/// not a pool member's.
inline std::shared_ptr<void> another_lease(const std::shared_ptr<void>& lease) {
  const pool_lease* p = std::get_deleter<pool_lease>(lease);
  return p ? make_pool_lease(p->load, p->pool) : lease;
}

}  // namespace coverbs::detail
