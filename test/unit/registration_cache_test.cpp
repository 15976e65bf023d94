// registration_cache against a fake registrar: hits on contained ranges, LRU limits, explicit invalidation
// and the userfaultfd monitor (munmap, MAP_FIXED, mremap, MADV_DONTNEED) on this host's kernel, including
// what a held handle's valid() says the moment the unmapping call returns.
#include <coverbs/registration_cache.hpp>

#include "fixtures/fake_registrar.hpp"
#include "fixtures/unmapping.hpp"

#include <boost/asio/io_context.hpp>

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iterator>
#include <optional>
#include <thread>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;
using cv::error_code;

namespace {

using cv::test::four_pages;
using cv::test::mapping;
using cv::test::unmapping;

struct fixture {
  std::shared_ptr<cv::test::fake_registrar> fake = std::make_shared<cv::test::fake_registrar>();
  asio::io_context io;
  cv::protection_domain pd;
  cv::registration_service service{io.get_executor(), {}, fake};
  mapping memory{1 << 20};
  const cv::access rw = cv::access::local_write;

  cv::shared_region acquire(cv::registration_cache& cache, std::span<std::byte> range,
                            cv::access rights = cv::access::local_write) {
    error_code ec;
    cv::shared_region got;
    cache.async_acquire(pd, range, rights, [&](error_code e, cv::shared_region r) { ec = e, got = std::move(r); });
    io.restart();
    io.run();
    REQUIRE_FALSE(ec);
    return got;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "a range inside a cached registration is a hit with the same keys", "[cache]") {
  cv::registration_cache cache(service);
  auto whole = acquire(cache, memory.span(0, 65536));
  auto part = cache.lookup(pd, memory.span(4096, 100), rw);
  REQUIRE(part);
  CHECK(part->lkey() == whole.lkey());
  CHECK(part->data() == memory.p + 4096);
  CHECK(part->size() == 100);
  CHECK(part->valid());
  auto again = acquire(cache, memory.span(60000, 5536)); // a hit through async_acquire too
  CHECK(again.shares_registration_with(whole));
  CHECK_FALSE(cache.lookup(pd, memory.span(60000, 5537), rw));                       // sticks out
  CHECK_FALSE(cache.lookup(pd, memory.span(0, 4096), rw | cv::access::remote_read)); // other rights
  const auto s = cache.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 3);
  CHECK(s.entries == 1);
  CHECK(s.bytes_pinned == 65536);
  CHECK(fake->reg_calls() == 1);
}

TEST_CASE_METHOD(fixture, "unused entries are evicted oldest first beyond the entry limit; used ones never",
                 "[cache][lru]") {
  cv::registration_cache cache(service, {.max_entries = 2, .max_bytes_pinned = 1 << 30, .monitor = false});
  auto a = acquire(cache, memory.span(0, 4096));
  auto b = acquire(cache, memory.span(8192, 4096));
  auto c = acquire(cache, memory.span(16384, 4096));
  CHECK(cache.stats().entries == 3); // all in use: over the limit, nothing evictable
  CHECK(fake->live() == 3);
  a = {};
  CHECK(cache.stats().evictions == 1); // a was unused and oldest
  CHECK(fake->live() == 2);
  b = {};
  c = {};
  CHECK(cache.stats().entries == 2);
  CHECK(cache.stats().unused == 2);
  CHECK_FALSE(cache.lookup(pd, memory.span(0, 4096), rw));
  CHECK(cache.lookup(pd, memory.span(8192, 4096), rw)); // used again: moves out of the LRU
  CHECK(cache.stats().unused == 2);                     // the handle of the hit above is gone again
}

TEST_CASE_METHOD(fixture, "unused entries are evicted beyond the pinned-bytes limit", "[cache][lru]") {
  cv::registration_cache cache(service, {.max_entries = 100, .max_bytes_pinned = 20000, .monitor = false});
  for (int i = 0; i < 4; ++i)
    acquire(cache, memory.span(i * 16384, 8192)); // handle dropped at once
  const auto s = cache.stats();
  CHECK(s.bytes_pinned <= 20000);
  CHECK(s.entries == 2);
  CHECK(s.evictions == 2);
  CHECK(fake->live() == 2);
  cache.clear();
  CHECK(fake->live() == 0);
}

TEST_CASE_METHOD(fixture,
                 "invalidate forgets overlapping entries; a handle in use turns invalid and its "
                 "registration goes with it",
                 "[cache][invalidate]") {
  cv::registration_cache cache(service, {.monitor = false});
  auto held = acquire(cache, memory.span(0, 8192));
  acquire(cache, memory.span(65536, 8192));
  acquire(cache, memory.span(131072, 8192));
  CHECK(cache.invalidate(memory.span(4096, 65536)) == 2); // overlaps the first two
  CHECK_FALSE(held.valid());
  CHECK(fake->live() == 2); // the held one stays registered while held
  CHECK_FALSE(cache.lookup(pd, memory.span(0, 10), rw));
  CHECK(cache.lookup(pd, memory.span(131072, 10), rw));
  held = {};
  CHECK(fake->live() == 1);
  CHECK(cache.stats().invalidations == 2);
}

TEST_CASE_METHOD(fixture, "concurrent misses for overlapping ranges become one registration and one entry",
                 "[cache][batch]") {
  cv::registration_cache cache(service, {.monitor = false});
  std::vector<cv::shared_region> got;
  for (int i = 0; i < 4; ++i)
    cache.async_acquire(pd, memory.span(i * 2048, 4096), rw, [&](error_code ec, cv::shared_region r) {
      CHECK_FALSE(ec);
      got.push_back(std::move(r));
    });
  io.run();
  REQUIRE(got.size() == 4);
  CHECK(fake->reg_calls() == 1);
  CHECK(cache.stats().entries == 1);
  CHECK(cache.lookup(pd, memory.span(0, 10240), rw));
}

TEST_CASE_METHOD(fixture, "the userfaultfd monitor is available on this kernel", "[cache][monitor]") {
  cv::registration_cache cache(service);
  INFO(cache.monitor_status().message());
  CHECK_FALSE(cache.monitor_status());
}

TEST_CASE_METHOD(fixture, "munmap of cached memory invalidates it and the next request registers anew",
                 "[cache][monitor]") {
  cv::registration_cache cache(service);
  REQUIRE_FALSE(cache.monitor_status());
  mapping m(65536);
  acquire(cache, m.span(0, 65536));
  REQUIRE(cache.lookup(pd, m.span(0, 10), rw));
  std::byte* const at = m.p;
  m.unmap();
  CHECK_FALSE(cache.lookup(pd, {at, 10}, rw)); // seen as soon as munmap returned
  CHECK(cache.stats().invalidations == 1);
  CHECK(cache.stats().entries == 0);
  CHECK(fake->live() == 0);
}

TEST_CASE_METHOD(fixture, "mmap MAP_FIXED over cached memory invalidates the handle in use", "[cache][monitor]") {
  cv::registration_cache cache(service);
  REQUIRE_FALSE(cache.monitor_status());
  mapping m(65536);
  auto held = acquire(cache, m.span(0, 65536));
  void* again = ::mmap(m.p, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  REQUIRE(again == m.p);
  CHECK_FALSE(cache.lookup(pd, m.span(0, 10), rw));
  CHECK_FALSE(held.valid());
  auto fresh = acquire(cache, m.span(0, 65536));
  CHECK(fresh.valid());
  CHECK_FALSE(fresh.shares_registration_with(held));
  CHECK(fake->reg_calls() == 2);
}

TEST_CASE_METHOD(fixture, "madvise DONTNEED and mremap invalidate what they change", "[cache][monitor]") {
  cv::registration_cache cache(service);
  REQUIRE_FALSE(cache.monitor_status());
  mapping m(1 << 20);
  acquire(cache, m.span(0, 65536));
  acquire(cache, m.span(524288, 65536));
  REQUIRE(::madvise(m.p + 4096, 4096, MADV_DONTNEED) == 0);
  CHECK_FALSE(cache.lookup(pd, m.span(0, 10), rw));
  CHECK(cache.lookup(pd, m.span(524288, 10), rw));
  void* moved = ::mremap(m.p + 524288, 65536, 131072, MREMAP_MAYMOVE);
  REQUIRE(moved != MAP_FAILED);
  CHECK_FALSE(cache.lookup(pd, m.span(524288, 10), rw));
  CHECK(cache.stats().invalidations == 2);
  if (moved != m.p + 524288) ::munmap(moved, 131072);
}

TEST_CASE_METHOD(fixture, "memory unmapped while it is being registered is not cached", "[cache][monitor]") {
  cv::registration_cache cache(service);
  REQUIRE_FALSE(cache.monitor_status());
  mapping m(65536);
  fake->hold();
  error_code ec;
  cv::shared_region got;
  cache.async_acquire(pd, m.span(0, 65536), rw, [&](error_code e, cv::shared_region r) { ec = e, got = std::move(r); });
  io.poll();
  fake->wait_started(1);
  std::byte* const at = m.p;
  m.unmap();
  fake->release();
  io.run();
  CHECK_FALSE(ec);
  CHECK_FALSE(got.valid());
  CHECK_FALSE(cache.lookup(pd, {at, 10}, rw));
  CHECK(cache.stats().entries == 0);
}

TEST_CASE_METHOD(fixture, "a cache hit completes through the executor, not inside async_acquire", "[cache]") {
  cv::registration_cache cache(service, {.monitor = false});
  auto whole = acquire(cache, memory.span(0, 8192));
  bool done = false;
  cache.async_acquire(pd, memory.span(0, 10), rw,
                      [&](error_code ec, cv::shared_region r) { done = !ec && r.shares_registration_with(whole); });
  CHECK_FALSE(done);
  io.restart();
  io.run();
  CHECK(done);
}

TEST_CASE_METHOD(fixture, "a bad neighbour acquired in the same turn fails alone and its unmapping spares the good entry",
                 "[cache]") {
  cv::registration_cache cache(service, {.monitor = false});
  fake->fail_range(memory.span(4096, 4096), cv::errno_code(EFAULT));
  error_code ec_a, ec_b;
  cv::shared_region a, b;
  int done = 0;
  cache.async_acquire(pd, memory.span(0, 4096), rw, [&](error_code e, cv::shared_region r) {
    ec_a = e, a = std::move(r), ++done;
  });
  cache.async_acquire(pd, memory.span(4096, 4096), rw, [&](error_code e, cv::shared_region r) {
    ec_b = e, b = std::move(r), ++done;
  });
  io.run();
  REQUIRE(done == 2);
  CHECK_FALSE(ec_a);
  CHECK(ec_b == cv::errc::buffer_not_mapped);
  REQUIRE(a);
  CHECK(a.registration().size() == 4096); // the entry covers A only
  CHECK_FALSE(cache.lookup(pd, memory.span(4096, 1), rw));
  CHECK(cache.invalidate(memory.span(4096, 4096)) == 0); // B going away is no business of A's
  CHECK(a.valid());
  auto again = cache.lookup(pd, memory.span(0, 4096), rw);
  REQUIRE(again);
  CHECK(again->shares_registration_with(a));
}

TEST_CASE_METHOD(fixture, "a held handle is invalid as soon as the call that unmaps or replaces its memory returns",
                 "[cache][monitor]") {
  for (const unmapping u : cv::test::every_unmapping) {
    DYNAMIC_SECTION(cv::test::name(u)) {
      cv::registration_cache cache(service);
      if (cache.monitor_status()) {
        WARN("skipped, no userfaultfd monitor on this host: " << cache.monitor_status().message());
        return;
      }
      four_pages m;
      const auto held = acquire(cache, {m.p, m.n});
      REQUIRE(held.valid());
      REQUIRE(cv::test::take_away(u, m.p, m.n, m.to.p));
      CHECK_FALSE(held.valid()); // no other cache call in between
      CHECK(held);               // still a handle: the registration stays while it is held
      CHECK(fake->live() == 1);
    }
  }
}

TEST_CASE_METHOD(fixture, "a thread polling valid() never sees true after another thread's unmapping call returned",
                 "[cache][monitor][race]") {
  cv::registration_cache cache(service);
  if (cache.monitor_status()) {
    WARN("skipped, no userfaultfd monitor on this host: " << cache.monitor_status().message());
    return;
  }
  constexpr int rounds = 250;
  const auto r = cv::test::race_valid_against_unmapping(rounds, [&](std::span<std::byte> bytes) {
    auto held = acquire(cache, bytes);
    REQUIRE(held.valid());
    return held;
  });
  CHECK(r.failed_calls == 0);
  CHECK(r.polls_after == rounds);
  CHECK(r.stale == 0);
  CHECK(cache.stats().invalidations == rounds);
}

TEST_CASE_METHOD(fixture, "a hit whose memory is replaced before its completion runs is registered anew",
                 "[cache][monitor]") {
  cv::registration_cache cache(service);
  if (cache.monitor_status()) {
    WARN("skipped, no userfaultfd monitor on this host: " << cache.monitor_status().message());
    return;
  }
  four_pages m;
  const auto first = acquire(cache, {m.p, m.n});
  error_code ec;
  cv::shared_region got;
  cache.async_acquire(pd, {m.p, m.n}, rw, [&](error_code e, cv::shared_region r) { ec = e, got = std::move(r); });
  REQUIRE(cv::test::take_away(unmapping::map_fixed, m.p, m.n, nullptr)); // after the lookup, before the completion
  io.restart();
  io.run();
  REQUIRE_FALSE(ec);
  CHECK(got.valid());
  CHECK_FALSE(got.shares_registration_with(first));
  CHECK(fake->reg_calls() == 2);
}

TEST_CASE_METHOD(fixture, "a handle that outlives its cache keeps the invalidation the cache had not applied yet",
                 "[cache][monitor]") {
  cv::shared_region held;
  four_pages m;
  {
    cv::registration_cache cache(service);
    if (cache.monitor_status()) {
      WARN("skipped, no userfaultfd monitor on this host: " << cache.monitor_status().message());
      return;
    }
    held = acquire(cache, {m.p, m.n});
    REQUIRE(cv::test::take_away(unmapping::munmap, m.p, m.n, nullptr));
  } // no cache call between the munmap and the cache's end
  CHECK_FALSE(held.valid());
  CHECK(fake->live() == 1);
  held = {};
  CHECK(fake->live() == 0);
}

TEST_CASE_METHOD(fixture, "each of two unmapping threads sees its own handle invalid right after its call returns",
                 "[cache][monitor][race]") {
  // One thread's valid() may find the monitor's ring empty because the other thread's valid() drained it
  // and is still marking the entries invalid: it must wait for that thread, not answer from the old flag.
  cv::registration_cache cache(service);
  if (cache.monitor_status()) {
    WARN("skipped, no userfaultfd monitor on this host: " << cache.monitor_status().message());
    return;
  }
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t per_thread = 500; // two threads: 1000 entries, within the default max_entries (1024)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int rounds = 0, calls = 0, failed_calls = 0;
  std::atomic<int> stale{0};
  while (rounds < 20 && std::chrono::steady_clock::now() < deadline) {
    mapping pages{2 * per_thread * 2 * page}; // region i: pages 2i and 2i + 1, a registration of its own
    std::vector<cv::shared_region> held(2 * per_thread);
    for (std::size_t i = 0; i < held.size(); ++i)
      held[i] = acquire(cache, pages.span(2 * i * page, 2 * page));
    REQUIRE(cache.stats().entries == held.size());
    std::atomic<int> failed{0};
    std::vector<std::thread> unmappers;
    for (std::size_t t = 0; t < 2; ++t)
      unmappers.emplace_back([&, t] {
        for (std::size_t i = t; i < held.size(); i += 2) { // the threads' regions interleave
          if (::madvise(pages.p + 2 * i * page, page, MADV_DONTNEED) != 0) ++failed;
          else if (held[i].valid()) ++stale; // the call returned on this thread: its event must be seen
        }
      });
    for (auto& t : unmappers)
      t.join();
    ++rounds;
    calls += static_cast<int>(held.size());
    failed_calls += failed;
  }
  INFO(calls << " unmapping calls in " << rounds << " rounds");
  CHECK(failed_calls == 0);
  CHECK(stale == 0);
  CHECK(cache.stats().invalidations == static_cast<std::uint64_t>(calls));
}

TEST_CASE_METHOD(fixture, "a process forked while the monitor reads events has a cache that answers at once and "
                          "says its monitor is lost",
                 "[cache][monitor][fork]") {
  // fork() may copy the monitor thread's "reading" mark but not the thread: in the child nothing may wait on
  // it. userfaultfd does not follow fork, so the child's cache reports monitor_lost_in_fork.
  std::optional<cv::registration_cache> cache(std::in_place, service);
  if (cache->monitor_status()) {
    WARN("skipped, no userfaultfd monitor on this host: " << cache->monitor_status().message());
    return;
  }
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t noisy = 4;
  std::vector<std::unique_ptr<mapping>> regions;
  std::vector<cv::shared_region> held;
  for (std::size_t i = 0; i < 1 + noisy; ++i) {
    regions.push_back(std::make_unique<mapping>(2 * page));
    held.push_back(acquire(*cache, regions.back()->span()));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> noise_rounds{0};
  std::thread noise([&] { // keeps the monitor thread reading events
    while (!stop.load(std::memory_order_relaxed)) {
      for (std::size_t i = 1; i <= noisy; ++i)
        ::madvise(regions[i]->p, page, MADV_DONTNEED);
      noise_rounds.fetch_add(1, std::memory_order_release);
    }
  });
  // Fork only once the noise thread runs its loop: a thread still starting up may hold the allocator's lock
  // (AddressSanitizer's, before LLVM 18, does not take it across fork), and a child that then starts a thread
  // of its own would wait for that lock forever.
  while (noise_rounds.load(std::memory_order_acquire) == 0)
    std::this_thread::yield();
  // In the child, plain system calls only (no Catch2): the exit status says what went wrong.
  enum child_exit : int { ok = 0, wrong_status = 10, invalid = 11, missed = 12, fresh_cache_unmonitored = 13 };
  const auto run_child = [&]() -> int {
    ::alarm(5); // a child stuck in the cache is killed by SIGALRM
    if (cache->monitor_status() != cv::errc::monitor_lost_in_fork) return wrong_status;
    if (!held[0].valid()) return invalid; // untouched memory: as valid as before the fork
    if (!cache->lookup(pd, regions[0]->span(), rw)) return missed;
    static_cast<void>(cache->stats());
#if !defined(__SANITIZE_THREAD__) // ThreadSanitizer dies when a child of a threaded process starts a thread
    cv::registration_cache fresh(service); // a new cache in the child watches the child's memory
    if (fresh.monitor_status()) return fresh_cache_unmonitored;
#endif
    cache.reset(); // the inherited one goes without the monitor thread it no longer has
    return ok;
  };
  constexpr int forks = 300;
  int done = 0, bad_status = -1;
  for (; done < forks && bad_status < 0; ++done) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) ::_exit(run_child());
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid); // bounded: the child's alarm
    if (!WIFEXITED(status) || WEXITSTATUS(status) != ok) bad_status = status;
  }
  stop.store(true, std::memory_order_relaxed);
  noise.join();
  INFO("fork " << done << " of " << forks << ": child wait status " << bad_status
               << " (exit 10 wrong monitor_status, 11 valid() false, 12 lookup missed, 13 fresh cache "
                  "unmonitored; SIGALRM (14) = stuck)");
  CHECK(bad_status == -1);
  CHECK(cache->monitor_status() == cv::error_code{}); // the parent's monitor is untouched
  REQUIRE(cv::test::take_away(unmapping::dontneed_all, regions[0]->p, regions[0]->n, nullptr));
  CHECK_FALSE(held[0].valid());
}
