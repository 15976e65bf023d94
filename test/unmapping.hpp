#pragma once
// Shared by the unit and device tests of the registration cache: the system calls that take pages away from
// under a registration (each reported by the cache's userfaultfd monitor) and four pages to do them to.
#include "registration_support.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <span>
#include <iterator>
#include <thread>

namespace coverbs::test {

/// The calls that take pages away from under a registration (each reported by the userfaultfd monitor).
enum class unmapping { dontneed_all, dontneed_one_page, map_fixed, munmap, mremap };
constexpr unmapping every_unmapping[] = {unmapping::dontneed_all, unmapping::dontneed_one_page, unmapping::map_fixed,
                                         unmapping::munmap, unmapping::mremap};

inline const char* name(unmapping u) {
  switch (u) {
  case unmapping::dontneed_all: return "madvise(MADV_DONTNEED) of the whole range";
  case unmapping::dontneed_one_page: return "madvise(MADV_DONTNEED) of one page";
  case unmapping::map_fixed: return "mmap(MAP_FIXED) over the range";
  case unmapping::munmap: return "munmap of the range";
  case unmapping::mremap: return "mremap(MREMAP_FIXED) of the range elsewhere";
  }
  return "?";
}

/// Does `u` to the mapping [p, p + n) with plain system calls (no Catch2 assertion: any thread may call it)
/// and returns whether the call succeeded. After munmap `p` is null; after mremap it is the new place (the
/// pages at `to`, which the caller reserved).
inline bool take_away(unmapping u, std::byte*& p, std::size_t n, std::byte* to) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  switch (u) {
  case unmapping::dontneed_all: return ::madvise(p, n, MADV_DONTNEED) == 0;
  case unmapping::dontneed_one_page: return ::madvise(p + page, page, MADV_DONTNEED) == 0;
  case unmapping::map_fixed:
    return ::mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p;
  case unmapping::munmap:
    if (::munmap(p, n) != 0) return false;
    p = nullptr;
    return true;
  case unmapping::mremap:
    if (::mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, to) != to) return false;
    p = to;
    return true;
  }
  return false;
}

/// Four pages of anonymous memory and four more reserved as an mremap destination.
struct four_pages {
  std::size_t n = 4 * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  mapping where{n};
  mapping to{n};
  std::byte* p = where.p;
  ~four_pages() {
    where.p = p; // unmapped by `where` (null after munmap; the destination after mremap, `to` is then gone)
    if (p == to.p) to.p = nullptr;
  }
};

/// What `race_valid_against_unmapping` counted.
struct unmapping_race {
  int stale = 0;         ///< polls that saw valid() true after the unmapping call had returned
  int failed_calls = 0;  ///< unmapping calls that failed (the race did not happen)
  int polls_after = 0;   ///< polls made after the call returned (one a round)
};

/// `rounds` times: four fresh pages, a handle `acquire(span)` returns for them, then one thread does the next
/// unmapping call of `every_unmapping` while this one polls the handle's valid() until the call returned.
template <class Acquire>
unmapping_race race_valid_against_unmapping(int rounds, Acquire acquire) {
  unmapping_race r;
  for (int round = 0; round < rounds; ++round) {
    const unmapping u = every_unmapping[round % std::size(every_unmapping)];
    four_pages m;
    const auto held = acquire(std::span<std::byte>{m.p, m.n});
    std::atomic<bool> go{false}, returned{false};
    bool ok = false;
    std::thread unmapper([&] {
      while (!go.load(std::memory_order_acquire))
        std::this_thread::yield();
      ok = take_away(u, m.p, m.n, m.to.p);
      returned.store(true, std::memory_order_release);
    });
    go.store(true, std::memory_order_release);
    for (bool after = false; !after;) { // ends: the call returns (bounded by the unmapper's system call)
      after = returned.load(std::memory_order_acquire);
      const bool valid = held.valid(); // polled while the call runs, too
      if (after) {
        ++r.polls_after;
        r.stale += valid ? 1 : 0;
      }
    }
    unmapper.join();
    r.failed_calls += ok ? 0 : 1;
  }
  return r;
}

} // namespace coverbs::test
