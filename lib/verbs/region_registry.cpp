#include "verbs/region_registry.hpp"

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace coverbs::detail {

/// The bindings made over one region last.
struct region_cell {
  const ibv_mr* mr = nullptr;
  std::atomic<bool> retired{false};
  region_binding* first = nullptr;  // linked through region_binding::next/prev; guarded by the registry's mutex
};

namespace {

/// Regions' cells. Windows of different threads meet here, hence the mutex.
struct region_registry {
  std::mutex mutex;
  std::unordered_map<const ibv_mr*, region_cell*> regions;
};

region_registry& registry() {
  static region_registry r;
  return r;
}

/// Takes `b` off its cell's list (freeing a retired cell left empty); the caller holds the registry's mutex.
void drop_locked(region_binding& b) noexcept {
  region_cell* c = std::exchange(b.region, nullptr);
  if (!c) return;
  if (b.prev)
    b.prev->next = b.next;
  else
    c->first = b.next;
  if (b.next) b.next->prev = b.prev;
  b.prev = b.next = nullptr;
  if (!c->first && c->retired.load(std::memory_order_relaxed)) delete c;
}

/// Bindings of cell `c` that are live; the caller holds the registry's mutex.
std::size_t bound_in_locked(const region_cell* c) noexcept {
  std::size_t n = 0;
  for (const region_binding* b = c->first; b; b = b->next)
    n += b->counted.load(std::memory_order_acquire);
  return n;
}

/// Moves `b` to the cell of `mr` (made if the region has none yet); null when out of memory.
region_cell* switch_cell(region_binding& b, const ibv_mr* mr) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  drop_locked(b);
  region_cell* c = nullptr;
  try {
    auto it = r.regions.find(mr);
    if (it == r.regions.end()) {
      auto fresh = std::make_unique<region_cell>();
      fresh->mr = mr;
      it = r.regions.emplace(mr, fresh.get()).first;
      fresh.release();
    }
    c = it->second;
  } catch (...) {
    return nullptr;
  }
  b.next = c->first;
  if (c->first) c->first->prev = &b;
  c->first = &b;
  b.region = c;
  return c;
}

}  // namespace

void note_bound(region_binding& b, const ibv_mr* mr) noexcept {
  region_cell* c = b.region;
  if (!c || c->mr != mr || c->retired.load(std::memory_order_acquire)) c = switch_cell(b, mr);
  b.counted.store(c != nullptr, std::memory_order_release);
}

void drop_binding(region_binding& b) noexcept {
  if (!b.region) return;
  std::lock_guard lock(registry().mutex);
  drop_locked(b);
}

std::size_t windows_bound_to(const ibv_mr* mr) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.regions.find(mr);
  return it == r.regions.end() ? 0 : bound_in_locked(it->second);
}

std::size_t windows_bound_now() noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::size_t n = 0;
  for (const auto& [mr, cell] : r.regions)
    n += bound_in_locked(cell);
  return n;
}

void forget_region(const ibv_mr* mr) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.regions.find(mr);
  if (it == r.regions.end()) return;
  region_cell* c = it->second;
  r.regions.erase(it);
  c->retired.store(true, std::memory_order_release);
  if (!c->first) delete c;
}

}  // namespace coverbs::detail
