#pragma once
/// @file
/// `registration_cache`: reuse of registrations. Keyed by (protection domain, rights); a request hits when
/// any live cached registration *contains* the requested range. Handles are refcounted `shared_region`s;
/// entries nobody holds stay registered in an LRU bounded by entry count and bytes pinned.
///
/// A cached registration must never stand for memory that is no longer the memory it registered. The
/// cache forgets (and deregisters, once unused) every entry overlapping a range that is:
///  - passed to `invalidate()`;
///  - unmapped: munmap(2), mmap(2) MAP_FIXED over it, brk(2) shrinking the heap below it (UFFD_EVENT_UNMAP);
///  - moved by mremap(2) (UFFD_EVENT_REMAP, the old range);
///  - returned to the system with madvise(2) MADV_DONTNEED or MADV_REMOVE (UFFD_EVENT_REMOVE);
/// the last three seen by a userfaultfd(2) monitor on its own thread (its fd waited on by an Asio loop).
///
/// What the monitor cannot see, so the application must `invalidate()` itself:
///  - memory freed but not unmapped (free(3) of heap memory, a pool recycling a buffer): it is still the
///    same mapped memory, so the cached registration is still correct for it — but when the allocator
///    reuses it for something else, that is an application-level change userfaultfd cannot see;
///  - MADV_FREE (lazily freed pages raise no event), and writes through other mappings of shared memory;
///  - memory userfaultfd cannot register (regular file mappings, some device memory): such entries count in
///    `cache_stats::unmonitored`;
///  - all of it when userfaultfd(2) is refused (`monitor_status()` says why; e.g. an unprivileged process
///    with vm.unprivileged_userfaultfd=0 on a kernel before 5.11 or without /dev/userfaultfd access).
/// Watching pins nothing and traps no page faults (mode WP without write-protecting), but an munmap of a
/// watched range waits until the monitor thread has read the event (microseconds). Once the unmapping call
/// has returned, every thread it happens-before sees the invalidation: lookups, inserts, `stats()` and
/// `shared_region::valid()` first apply the queued events (valid() takes the cache's lock only when some
/// are queued).
/// Forked children do not inherit the watches (UFFD_FEATURE_EVENT_FORK is not requested).
///
/// What an invalidated registration still does: it stays registered — its pages pinned, its lkey and rkey
/// live, naming the *old* pages — until its last handle goes. A write through it (local, or from a peer
/// holding `remote()`) succeeds into pages the process no longer sees. So check `valid()` right before
/// posting an operation with a handle's keys and before sending `remote()` to a peer, drop the handle when
/// it is false, and do not unmap or replace memory while a peer may still write into it: invalidation
/// cannot take a key back from a peer, only the deregistration after the last handle goes does.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/detail/cache_state.hpp>
#include <coverbs/registration_service.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace coverbs {

struct cache_options {
  /// Entries (used or not) beyond which unused ones are deregistered, oldest first.
  std::size_t max_entries = 1024;
  /// Bytes pinned by all entries beyond which unused ones are deregistered, oldest first (bytes).
  std::size_t max_bytes_pinned = std::size_t{1} << 30;
  /// Watch cached memory with userfaultfd(2) and invalidate automatically.
  bool monitor = true;
};

struct cache_stats {
  std::uint64_t hits = 0, misses = 0, evictions = 0, invalidations = 0;
  std::size_t entries = 0;      ///< entries cached (used or not)
  std::size_t unused = 0;       ///< entries no handle refers to (the LRU)
  std::size_t bytes_pinned = 0; ///< bytes registered by the entries
  std::size_t unmonitored = 0;  ///< entries userfaultfd could not watch
};

/// A cache of registrations over a `registration_service` (which runs the misses).
///
/// Lifetime: the service outlives the cache. Destroying the cache deregisters unused entries; handles
/// outlive it safely (their registration goes with the last one) and keep the invalidations the cache had
/// received, but `valid()` no longer follows their memory once it is gone.
/// @par Thread Safety
/// Thread-safe, and may be shared across loops (threads): the index is guarded by a mutex and misses run
/// on the service's workers. `async_acquire` completes on the handler's associated executor, else the
/// service's (bind the token to the calling member's executor in a loop_pool).
class registration_cache {
public:
  explicit registration_cache(registration_service& service, const cache_options& options = {});
  registration_cache(const registration_cache&) = delete;
  registration_cache& operator=(const registration_cache&) = delete;
  ~registration_cache();

  /// A handle to `buffer` inside a cached registration of `pd` with exactly `rights`, or nothing. Never
  /// blocks on the kernel; counts a hit or a miss. Valid when returned (queued unmap events are applied
  /// first); later unmappings turn it invalid (`shared_region::valid()`).
  std::optional<shared_region> lookup(protection_domain& pd, std::span<std::byte> buffer, access rights) {
    return state_->lookup(pd.native_handle(), buffer, rights);
  }

  /// A handle to `buffer`: from the cache, else registered (on the service's workers, merged with
  /// concurrent misses) and cached. A hit whose memory was unmapped or replaced before the completion runs
  /// is registered anew (a miss). A miss whose memory was unmapped or replaced *while* it was being
  /// registered completes with success and a handle whose `valid()` is false (not cached): check it.
  /// @par Completion Signature
  /// `void(error_code, shared_region)`.
  /// @par Errors
  /// As `reg_shared` (registration_service.hpp).
  /// @par Per-Operation Cancellation
  /// Terminal: as `reg_shared` for a miss (also a hit registered anew); a hit completes.
  /// @par Thread Safety
  /// Any thread; the handler runs on its associated executor (else the service's), never inside this call.
  template <typename CompletionToken = boost::asio::use_awaitable_t<>>
  auto async_acquire(protection_domain& pd, std::span<std::byte> buffer, access rights, CompletionToken&& token = {});

  /// Forgets every entry overlapping [data, data + size) of `range`; entries in use are marked invalid
  /// (`shared_region::valid()`) and deregistered when their last handle goes. @returns entries invalidated.
  std::size_t invalidate(std::span<const std::byte> range) {
    const auto b = reinterpret_cast<std::uintptr_t>(range.data());
    return state_->invalidate(b, b + range.size());
  }
  /// Deregisters every unused entry.
  void clear() { state_->clear(); }
  cache_stats stats() const { return state_->stats(); }
  /// Success when automatic invalidation works; else why not (e.g. `errc::userfaultfd_unavailable`, or
  /// `errc::monitor_lost_in_fork` in a process forked after the cache was made: make a new cache there).
  error_code monitor_status() const noexcept { return state_->monitor_status(); }

private:
  struct acquire_op;
  registration_service& service_;
  std::shared_ptr<detail::cache_state> state_;
};

struct registration_cache::acquire_op {
  registration_service* service;
  std::shared_ptr<detail::cache_state> state;
  protection_domain* pd;
  std::span<std::byte> buffer;
  access rights;
  std::uint64_t epoch = 0;
  std::optional<shared_region> hit{};
  enum { starting, delivering_hit, registering } phase = starting;

  template <typename Self>
  void operator()(Self& self, error_code ec = {}, shared_region fresh = {}) {
    switch (phase) {
    case starting:
      hit = state->lookup(pd->native_handle(), buffer, rights);
      if (hit) {
        phase = delivering_hit;
        boost::asio::post(std::move(self)); // never complete inside the initiating call
        return;
      }
      phase = registering;
      epoch = state->prepare(buffer);
      reg_shared(*service, *pd, buffer, rights, std::move(self));
      return;
    case delivering_hit:
      if (!hit->valid()) { // the memory changed since the lookup: register what is there now
        hit.reset();
        phase = registering;
        epoch = state->prepare(buffer);
        reg_shared(*service, *pd, buffer, rights, std::move(self));
        return;
      }
      self.complete(error_code{}, std::move(*hit));
      return;
    case registering:
      if (!ec) fresh = state->insert(fresh, epoch, pd->native_handle(), rights);
      self.complete(ec, std::move(fresh));
      return;
    }
  }
};

template <typename CompletionToken>
auto registration_cache::async_acquire(protection_domain& pd, std::span<std::byte> buffer, access rights,
                                       CompletionToken&& token) {
  if constexpr (detail::token_fits<CompletionToken, void(error_code, shared_region)>())
    return boost::asio::async_compose<CompletionToken, void(error_code, shared_region)>(
        acquire_op{&service_, state_, &pd, buffer, rights}, token, service_.get_executor());
}

} // namespace coverbs
