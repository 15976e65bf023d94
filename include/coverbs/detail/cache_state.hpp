#pragma once
/// @file
/// Internals of registration_cache.hpp: the index of cached registrations and the userfaultfd monitor.
/// Not a stable interface.

#include <coverbs/access.hpp>
#include <coverbs/detail/registration_core.hpp>
#include <coverbs/error.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <utility>
#include <vector>

namespace coverbs {

class shared_region;
struct cache_options;
struct cache_stats;

namespace detail {

/// Watches address ranges with userfaultfd(2) (register mode WP, never write-protecting anything, so no
/// page fault is ever trapped) and reports the non-cooperative events UNMAP (munmap, mmap MAP_FIXED over
/// it, brk shrinking), REMAP (mremap) and REMOVE (madvise DONTNEED/REMOVE) as ranges.
///
/// The kernel blocks the thread that unmaps until the event is *read*, so the fd is waited on by an Asio
/// loop on the monitor's own thread: a monitor on a thread that itself unmaps watched memory would
/// deadlock. Events go through a lock-free ring and the monitor thread does nothing else (no lock, no
/// free(3) that could itself unmap watched memory); the cache applies them under its own lock before
/// every lookup, insert and `stats()`, and `shared_region::valid()` applies them too (`apply_events`).
/// `reading()` lets them wait out the instant between read(2) and the push: the kernel releases the
/// unmapping thread inside read(2), so once munmap returned its event is queued or `reading()` is true.
class unmap_monitor {
public:
  unmap_monitor();
  ~unmap_monitor();
  unmap_monitor(const unmap_monitor&) = delete;
  unmap_monitor& operator=(const unmap_monitor&) = delete;

  /// Success, or why there is no monitor: errc::userfaultfd_unavailable, the errno of UFFDIO_API, or
  /// errc::monitor_lost_in_fork in a process forked from the one that made it (userfaultfd does not follow
  /// fork and the child has no monitor thread: nothing may then wait on `reading()` or touch the fd).
  error_code status() const noexcept;
  /// Registers the pages covering [p, p + n) with the userfaultfd; false when refused (memory types
  /// userfaultfd cannot watch, such as regular file mappings).
  bool watch(const void* p, std::size_t n) noexcept;
  /// Unwatches everything, stops the monitor thread and reads what is still queued in the kernel (releasing
  /// the threads it held), so `drain` then returns every event of the watch's lifetime. Idempotent.
  void stop() noexcept;
  /// Moves queued invalidated ranges into `out`; sets `overflow` when ranges were lost (invalidate all).
  void drain(std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& out, bool& overflow) noexcept;
  /// True while the monitor thread is between reading events and queueing them.
  bool reading() const noexcept { return reading_.load(std::memory_order_seq_cst); }
  bool pending() const noexcept {
    return head_.load(std::memory_order_acquire) != tail_.load(std::memory_order_acquire) ||
           overflow_.load(std::memory_order_acquire);
  }

private:
  struct loop;
  void read_events() noexcept;
  void push(std::uintptr_t begin, std::uintptr_t end) noexcept;

  int fd_ = -1;
  error_code status_;
  std::uint64_t generation_; // the process's fork generation when the monitor was made (lib/registration_cache.cpp)
  std::mutex watched_mutex_; // never taken by the monitor thread
  std::set<std::pair<std::uintptr_t, std::uintptr_t>> watched_;
  static constexpr std::size_t ring_size = 1024;
  std::array<std::pair<std::uintptr_t, std::uintptr_t>, ring_size> ring_{};
  std::atomic<std::size_t> head_{0}, tail_{0}; // written by the monitor / by the consumer
  std::atomic<bool> overflow_{false}, reading_{false};
  std::unique_ptr<loop> loop_;
  std::thread thread_;
};

/// One cached registration.
struct cache_entry {
  ibv_pd* pd = nullptr;
  access rights = access::none;
  std::uintptr_t begin = 0, end = 0;
  /// Handles are copies of this pointer: the entry is unused when the cache holds the only one.
  std::shared_ptr<const shared_mr> mr;
  std::uint64_t last_used = 0; // the cache's clock at the last hit (LRU order)
  bool monitored = false;
  bool unused() const noexcept { return mr.use_count() == 1; }
};

/// The cache proper. Thread-safe. A hit costs a lock, an index walk and a shared_ptr copy: no allocation
/// and no callback when a handle goes; unused entries are found (and evicted, least recently used first)
/// when the limits are exceeded.
class cache_state : public std::enable_shared_from_this<cache_state> {
public:
  explicit cache_state(const cache_options& options);
  ~cache_state();

  /// A handle to a live registration containing the range, or nothing (counts a hit or a miss).
  std::optional<shared_region> lookup(ibv_pd* pd, std::span<std::byte> range, access rights);
  /// Watches the range before it is registered and returns the invalidation epoch for `insert`.
  std::uint64_t prepare(std::span<std::byte> range) noexcept;
  /// Caches the registration behind `fresh` (a reg_shared result) and returns a cache handle to `range`.
  shared_region insert(const shared_region& fresh, std::uint64_t epoch, ibv_pd* pd, access rights);
  std::size_t invalidate(std::uintptr_t begin, std::uintptr_t end);
  void clear();
  /// Applies the monitor's queued events (under the lock, only when there are some): handles of entries
  /// whose memory went away turn invalid. For `shared_mr::valid()`; never called under the lock.
  void apply_events() noexcept;
  cache_stats stats() const;
  error_code monitor_status() const noexcept;

private:
  using index_type = std::multimap<std::uintptr_t, std::shared_ptr<cache_entry>>;
  using graveyard = std::vector<std::shared_ptr<cache_entry>>;
  shared_region handle_locked(cache_entry& e, std::span<std::byte> range);
  void apply_events_locked(graveyard& dead);
  std::size_t invalidate_locked(std::uintptr_t begin, std::uintptr_t end, graveyard& dead);
  void unindex_locked(const std::shared_ptr<cache_entry>& e, graveyard& dead);
  void evict_locked(graveyard& dead);
  void record_invalidation_locked(std::uintptr_t begin, std::uintptr_t end);

  std::size_t max_entries_, max_bytes_;
  mutable std::mutex mutex_;
  std::map<std::pair<ibv_pd*, access>, index_type> index_;
  std::size_t max_length_ = 0;
  std::size_t entries_ = 0, bytes_pinned_ = 0, unmonitored_ = 0;
  std::uint64_t clock_ = 0;
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, invalidations_ = 0;
  std::uint64_t epoch_ = 0;
  std::deque<std::tuple<std::uint64_t, std::uintptr_t, std::uintptr_t>> recent_; // (epoch, begin, end)
  std::unique_ptr<unmap_monitor> monitor_;
  /// True (under the lock) from before `apply_events_locked` drains the ring until its invalidations are
  /// made: `apply_events` finding nothing queued takes the lock while it is set, since the events it must
  /// see may be the ones being applied.
  std::atomic<bool> applying_{false};
  /// Its enrollment in coverbs::metrics::read() (hits, misses, evictions, invalidations); last, so it goes
  /// first.
  std::shared_ptr<void> metrics_;
};

} // namespace detail
} // namespace coverbs
