#include <coverbs/window_counters.hpp>

#include "verbs/region_registry.hpp"
#include "windows/window_counters.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace coverbs {
namespace detail {
namespace {

constexpr auto relaxed = std::memory_order_relaxed;

constexpr std::size_t counter_count = static_cast<std::size_t>(window_counter::count_);

/// One thread's counts. Only its thread writes them (load + store, no read-modify-write); readers load.
struct counter_block {
  std::atomic<std::uint64_t> v[counter_count] = {};
};

/// Every live thread's block and what threads that ended had counted. Never destroyed: threads may still
/// count during static destruction.
struct counter_totals {
  std::mutex mutex;
  std::uint64_t ended[counter_count] = {};
  std::vector<counter_block*> live;
};
counter_totals& totals() {
  static auto* t = new counter_totals;
  return *t;
}

counter_block* const thread_ended = reinterpret_cast<counter_block*>(alignof(counter_block));
// initial-exec: one load through the thread pointer (the default model for a shared library calls
// __tls_get_addr on every count); 8 bytes of static TLS, which glibc reserves room for.
[[gnu::tls_model("initial-exec")]] thread_local counter_block* this_thread_counts = nullptr;

/// Folds the thread's block into the totals when the thread ends.
struct counter_block_owner {
  counter_block* block = nullptr;
  ~counter_block_owner() {
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    for (std::size_t i = 0; i < counter_count; ++i)
      t.ended[i] += block->v[i].load(relaxed);
    std::erase(t.live, block);
    delete block;
    this_thread_counts = thread_ended;
  }
};

/// The calling thread's block, made on its first count; null when out of memory or the thread is ending.
counter_block* attach_counts() noexcept {
  try {
    thread_local counter_block_owner owner;
    auto block = std::make_unique<counter_block>();
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    t.live.push_back(block.get());
    owner.block = block.release();
    return this_thread_counts = owner.block;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

void count(window_counter c, std::uint64_t delta) noexcept {
  const auto i = static_cast<std::size_t>(c);
  counter_block* b = this_thread_counts;
  if (!b) [[unlikely]]
    b = attach_counts();
  if (!b || b == thread_ended) [[unlikely]] {  // counted straight into the totals
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    t.ended[i] += delta;
    return;
  }
  b->v[i].store(b->v[i].load(relaxed) + delta, relaxed);
}

std::uint64_t counted(window_counter c) noexcept {
  const auto i = static_cast<std::size_t>(c);
  auto& t = totals();
  std::lock_guard lock(t.mutex);
  std::uint64_t n = t.ended[i];
  for (const counter_block* b : t.live)
    n += b->v[i].load(relaxed);
  return n;
}

}  // namespace detail

window_counters window_statistics() noexcept {
  using detail::counted;
  using c = detail::window_counter;
  window_counters s;
  s.windows_allocated = counted(c::windows_allocated);
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
  return s;
}

}  // namespace coverbs
