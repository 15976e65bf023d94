#pragma once
// Private to lib/: counters that each thread adds to in a block of its own, with plain relaxed loads and
// stores — no locked instruction on the data path (natively a locked add cost about 15 ns here) — and that
// any thread sums. A thread's block is folded into the totals when the thread ends, so sums never go down.
// Instantiate with a tag of internal linkage (in an unnamed namespace), in one translation unit.

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace coverbs::detail {

template <class Tag, std::size_t N>
class thread_counters {
public:
  using counters = std::atomic<std::uint64_t>*;
  /// Adds `delta` (wrapping) to counter `i` of `v` (what `update` hands its function).
  static void bump(counters v, std::size_t i, std::uint64_t delta = 1) noexcept {
    v[i].store(v[i].load(relaxed) + delta, relaxed);
  }
  /// Calls `f(v)` with the calling thread's counters `v` (N of them; add with `bump`): several counts for the
  /// price of one look-up. A thread that is ending, or that found no memory for a block, counts under the
  /// lock in a block the totals keep.
  template <class F>
  static void update(F&& f) noexcept {
    block* b = current;
    if (!b) [[unlikely]]
      b = attach();
    if (!b || b == ended) [[unlikely]] {
      auto& t = totals();
      std::lock_guard lock(t.mutex);
      f(t.orphans.v);
      return;
    }
    f(b->v);
  }
  /// Adds `delta` (wrapping) to counter `i` of the calling thread's block.
  static void add(std::size_t i, std::uint64_t delta = 1) noexcept {
    update([&](counters v) { bump(v, i, delta); });
  }
  /// Adds 1 to counter `i` of the calling thread's block with a release store: a reader that sees this count
  /// also sees whatever the thread saw before it. For the "down" counter of a gauge (see `difference`).
  static void add_released(std::size_t i) noexcept {
    update([&](counters v) { v[i].store(v[i].load(relaxed) + 1, std::memory_order_release); });
  }
  /// A gauge kept as two counters that only go up, `up` (a thing made) and `down` (a thing gone, counted with
  /// `add_released` after its `up` was counted, on any thread): the sum of `up` minus the sum of `down` over
  /// every thread. Every block's `down` is read (acquire) before any block's `up`, so each thing gone that
  /// the sum of `down` holds has its `up` in the sum of `up`: the result never wraps (a thing made or gone
  /// during the read may or may not be in it; a `down` counted without an `up`, a bug, reads as 0, not 2^64 - 1).
  /// Summing one wrapping counter, +1 and -1, wraps: a reader can see one thread's -1 and miss another
  /// thread's +1 that came before it, and read 2^64 - 1.
  static std::uint64_t difference(std::size_t up, std::size_t down) noexcept {
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    std::uint64_t gone = t.retired[down] + t.orphans.v[down].load(std::memory_order_acquire);
    for (const block* b : t.live) {
      gone += b->v[down].load(std::memory_order_acquire);
      if (pause_after_block) pause_after_block();
    }
    std::uint64_t made = t.retired[up] + t.orphans.v[up].load(relaxed);
    for (const block* b : t.live)
      made += b->v[up].load(relaxed);
    return made > gone ? made - gone : 0;
  }
  /// Test seam: when set, `difference` calls it under its lock after reading each live block's `down` (so a
  /// test can count on other threads in the middle of a read, deterministically). Null outside tests.
  static inline void (*pause_after_block)() = nullptr;
  /// Counter `i` summed over every thread.
  static std::uint64_t sum(std::size_t i) noexcept {
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    std::uint64_t n = t.retired[i] + t.orphans.v[i].load(relaxed);
    for (const block* b : t.live)
      n += b->v[i].load(relaxed);
    return n;
  }
  /// Calls `f(name, thread_id, counters)` for every live thread's block, under the lock, in the order the
  /// threads first counted: `name` is the thread's name then (pthread_getname_np), `thread_id` its gettid().
  template <class F>
  static void for_each_live(F&& f) {
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    for (const block* b : t.live) {
      std::uint64_t v[N];
      for (std::size_t i = 0; i < N; ++i)
        v[i] = b->v[i].load(relaxed);
      f(static_cast<const char*>(b->name), b->thread_id, static_cast<const std::uint64_t*>(v));
    }
  }
  /// Every counter summed over every thread (one lock).
  static void sum_all(std::uint64_t (&out)[N]) noexcept {
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    for (std::size_t i = 0; i < N; ++i)
      out[i] = t.retired[i] + t.orphans.v[i].load(relaxed);
    for (const block* b : t.live)
      for (std::size_t i = 0; i < N; ++i)
        out[i] += b->v[i].load(relaxed);
  }

private:
  static constexpr auto relaxed = std::memory_order_relaxed;

  /// One thread's counts. Only its thread writes them (load + store, no read-modify-write); readers load.
  struct block {
    std::atomic<std::uint64_t> v[N] = {};
    char name[16] = {};          // the thread's name when it attached (pthread names hold 15 characters)
    std::int64_t thread_id = 0;  // gettid()
  };
  /// Every live thread's block and what threads that ended had counted. Never destroyed: threads may still
  /// count during static destruction.
  struct all_blocks {
    std::mutex mutex;
    std::uint64_t retired[N] = {};
    block orphans;  // counted under the lock by threads without a block
    std::vector<block*> live;
  };
  static all_blocks& totals() {
    static auto* t = new all_blocks;
    return *t;
  }

  static inline block* const ended = reinterpret_cast<block*>(alignof(block));
  // initial-exec: one load through the thread pointer (the default model for a shared library calls
  // __tls_get_addr on every count); 8 bytes of static TLS, which glibc reserves room for.
  [[gnu::tls_model("initial-exec")]] static inline thread_local block* current = nullptr;

  /// Folds the thread's block into the totals when the thread ends.
  struct block_owner {
    block* b = nullptr;
    ~block_owner() {
      if (!b) return;  // its allocation failed: nothing was counted in a block
      auto& t = totals();
      std::lock_guard lock(t.mutex);
      for (std::size_t i = 0; i < N; ++i)
        t.retired[i] += b->v[i].load(relaxed);
      std::erase(t.live, b);
      delete b;
      current = ended;
    }
  };

  /// The calling thread's block, made on its first count; null when out of memory or the thread is ending.
  [[gnu::noinline]] static block* attach() noexcept {
    try {
      thread_local block_owner owner;
      auto b = std::make_unique<block>();
      pthread_getname_np(pthread_self(), b->name, sizeof b->name);
      b->thread_id = static_cast<std::int64_t>(gettid());
      auto& t = totals();
      std::lock_guard lock(t.mutex);
      t.live.push_back(b.get());
      owner.b = b.release();
      return current = owner.b;
    } catch (...) {
      return nullptr;
    }
  }
};

}  // namespace coverbs::detail
