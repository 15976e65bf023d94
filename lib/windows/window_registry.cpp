#include "windows/window_registry.hpp"

#include "windows/window_internal.hpp"

namespace coverbs::detail {

window_registry& registry() {
  static window_registry r;
  return r;
}

void file_window(window_impl* w) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_index[index_of(w->mw)] = w;
}

void unfile_window(window_impl* w) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_index.find(index_of(w->mw));
  if (it != r.by_index.end() && it->second == w) r.by_index.erase(it);
}

window_impl* find_bound(const ibv_context* context, std::uint32_t rkey) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_index.find({context, rkey >> 8});
  if (it == r.by_index.end()) return nullptr;
  window_impl* w = it->second;
  return w->state == window_state::bound && w->key.rkey == rkey ? w : nullptr;
}

}  // namespace coverbs::detail
