#pragma once
// Private to lib/: the process-wide registry of memory windows by rkey (what `invalidate(qp, rkey)` and a
// peer's send-with-invalidate look up), and each device's window types.

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace coverbs::detail {

class window_impl;

/// Which window has which live key, and each device's window types. Windows of different threads meet here,
/// hence the mutex.
///
/// A window's rkey changes only in its low 8 bits (the key IBA lets the consumer choose; ibv_inc_rkey), so
/// windows are filed once, at allocation, under (device, rkey >> 8); binds then touch no map.
struct window_registry {
  std::mutex mutex;
  std::map<std::pair<const ibv_context*, std::uint32_t>, window_impl*> by_index;
  std::unordered_map<const ibv_context*, unsigned long long> cap_flags;
};

/// The one registry.
window_registry& registry();

/// Where `mw` is filed: (device context, rkey >> 8).
inline std::pair<const ibv_context*, std::uint32_t> index_of(const ibv_mw* mw) noexcept {
  return {mw->context, mw->rkey >> 8};
}

/// Files `w` (at allocation). @throws std::bad_alloc
void file_window(window_impl* w);
/// Takes `w` out (at deallocation).
void unfile_window(window_impl* w) noexcept;
/// The window whose live key is `rkey`, if coverbs knows one.
window_impl* find_bound(const ibv_context* context, std::uint32_t rkey) noexcept;

}  // namespace coverbs::detail
