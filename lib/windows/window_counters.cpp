#include <coverbs/window_counters.hpp>

#include "core/thread_counters.hpp"
#include "verbs/region_registry.hpp"
#include "windows/window_counters.hpp"

namespace coverbs {
namespace detail {
namespace {

struct window_tag {};
using window_blocks = thread_counters<window_tag, static_cast<std::size_t>(window_counter::count_)>;

}  // namespace

void count(window_counter c, std::uint64_t delta) noexcept { window_blocks::add(static_cast<std::size_t>(c), delta); }

void count_deallocated() noexcept {
  window_blocks::add_released(static_cast<std::size_t>(window_counter::windows_deallocated));
}

void count_lease_ended() noexcept { window_blocks::add_released(static_cast<std::size_t>(window_counter::leases_ended)); }

std::uint64_t leases_alive() noexcept {
  return window_blocks::difference(static_cast<std::size_t>(window_counter::leases_granted),
                                   static_cast<std::size_t>(window_counter::leases_ended));
}

std::uint64_t counted(window_counter c) noexcept { return window_blocks::sum(static_cast<std::size_t>(c)); }

std::uint64_t windows_alive() noexcept {
  return window_blocks::difference(static_cast<std::size_t>(window_counter::windows_allocated),
                                   static_cast<std::size_t>(window_counter::windows_deallocated));
}

}  // namespace detail

window_counters window_statistics() noexcept {
  using detail::counted;
  using c = detail::window_counter;
  window_counters s;
  s.windows_allocated = detail::windows_alive();
  s.windows_bound = detail::windows_bound_now();
  s.binds = counted(c::binds);
  s.binds_failed = counted(c::binds_failed);
  s.invalidations = counted(c::invalidations);
  s.remote_invalidations = counted(c::remote_invalidations);
  s.foreign_invalidations = counted(c::foreign_invalidations);
  s.windows_replaced = counted(c::windows_replaced);
  s.leases_granted = counted(c::leases_granted);
  s.leases_expired = counted(c::leases_expired);
  s.leases_revoked = counted(c::leases_revoked);
  s.leases_live = detail::leases_alive();
  return s;
}

}  // namespace coverbs
