#pragma once
// Shared by the unit and device tests of registration: a completion recorder, anonymous memory, and a gate
// that holds a registrar's worker inside the verb until the test lets it go.
#include <coverbs/memory_region.hpp>

#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

namespace coverbs::test {

/// Records one `void(error_code, memory_region)` completion and the thread it ran on.
struct outcome {
  std::optional<error_code> ec;
  memory_region region;
  std::thread::id thread;
  auto handler() {
    return [this](error_code e, memory_region r) {
      ec = e;
      region = std::move(r);
      thread = std::this_thread::get_id();
    };
  }
};

/// Anonymous private memory, zero-filled (so its pages exist), unmapped on destruction unless `unmap()`ed.
struct mapping {
  std::byte* p = nullptr;
  std::size_t n = 0;
  explicit mapping(std::size_t size) : n(size) {
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<std::byte*>(m);
    std::memset(p, 0, size);
  }
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (p) ::munmap(p, n);
  }
  void unmap() {
    REQUIRE(::munmap(p, n) == 0);
    p = nullptr;
  }
  std::span<std::byte> span() const { return {p, n}; }
  std::span<std::byte> span(std::size_t offset, std::size_t size) const { return {p + offset, size}; }
};

/// Address space this test holds with no access rights (PROT_NONE): the kernel cannot pin its pages, so
/// registering it fails with EFAULT as unmapped memory does. Unlike a range just unmapped, no other
/// mapping can take its place meanwhile (the sanitizers' runtimes and other threads map memory too, and
/// may reuse a freed address), so a test built on it does not depend on address reuse.
struct inaccessible_pages {
  std::byte* p = nullptr;
  std::size_t n = 0;
  explicit inaccessible_pages(std::size_t size) : n(size) {
    void* m = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<std::byte*>(m);
  }
  inaccessible_pages(const inaccessible_pages&) = delete;
  inaccessible_pages& operator=(const inaccessible_pages&) = delete;
  ~inaccessible_pages() { ::munmap(p, n); }
  std::span<std::byte> span() const { return {p, n}; }
};

/// Threads calling `pass()` count as arrived and wait there while the gate is held.
class gate {
public:
  void hold() {
    std::lock_guard lock(mutex_);
    held_ = true;
  }
  void release() {
    std::lock_guard lock(mutex_);
    held_ = false;
    changed_.notify_all();
  }
  void pass() {
    std::unique_lock lock(mutex_);
    ++arrived_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !held_; });
  }
  /// Blocks until `n` threads have arrived in all.
  void wait_arrived(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return arrived_ >= n; });
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  int arrived_ = 0;
};

} // namespace coverbs::test
