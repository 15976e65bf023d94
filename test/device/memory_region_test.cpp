// Synchronous registration on a real device (rxe0 in the Soft-RoCE guest).
#include <coverbs/device.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/protection_domain.hpp>

#include "fixtures/rxe_pair.hpp"

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <vector>

namespace cv = coverbs;

namespace {
struct fixture {
  coverbs::device dev = coverbs::device::open();
  coverbs::protection_domain pd{dev};
};

/// Private anonymous memory, the kind fork(2) shares copy-on-write.
struct anonymous_mapping {
  explicit anonymous_mapping(std::size_t n) : size(n) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    bytes = static_cast<std::byte*>(p);
  }
  ~anonymous_mapping() { ::munmap(bytes, size); }
  std::span<std::byte> span() const noexcept { return {bytes, size}; }
  bool all(std::size_t from, std::size_t to, char c) const noexcept {
    return std::all_of(bytes + from, bytes + to, [c](std::byte b) { return b == std::byte(c); });
  }
  std::byte* bytes;
  std::size_t size;
};

/// In a forked child: a fault kills it with its signal instead of reaching Catch2's handler (which would
/// report a failure in the child and exit).
void child_default_signals() noexcept {
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT})
    std::signal(sig, SIG_DFL);
}

/// Whether the mapping holding `p` is MADV_DONTFORK (VmFlags "dc" in /proc/self/smaps): libibverbs' madvise
/// mode, on after ibv_fork_init() or RDMAV_FORK_SAFE=1 before the first registration. On a kernel that
/// copies pinned pages ibv_is_fork_initialized() answers IBV_FORK_UNNEEDED in either mode.
bool marked_dontfork(const void* p) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  REQUIRE(f);
  char line[512];
  bool inside = false, marked = false;
  const auto at = reinterpret_cast<unsigned long>(p);
  while (std::fgets(line, sizeof line, f)) {
    unsigned long begin = 0, end = 0;
    char perms[8];
    if (std::sscanf(line, "%lx-%lx %7s", &begin, &end, perms) == 3)
      inside = at >= begin && at < end;
    else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      marked = std::strstr(line, " dc") != nullptr;
      break;
    }
  }
  std::fclose(f);
  return marked;
}

/// Waits for `child`; its wait status.
int wait_status(pid_t child) {
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    REQUIRE(errno == EINTR);
  return status;
}
}  // namespace

TEST_CASE_METHOD(fixture, "register and deregister a buffer", "[mr]") {
  std::vector<std::byte> buf(1 << 20);
  coverbs::memory_region mr(pd, buf, cv::access::local_write | cv::access::remote_read | cv::access::remote_write);
  REQUIRE(mr);
  CHECK(mr.data() == buf.data());
  CHECK(mr.size() == buf.size());
  CHECK(mr.lkey() != 0);
  CHECK(mr.rkey() != 0);
  CHECK(mr.pd() == pd.native_handle());
  CHECK(mr.rights() == (cv::access::local_write | cv::access::remote_read | cv::access::remote_write));
  CHECK(mr.contains(buf.data() + 10, 100));
  CHECK(mr.contains(buf.data(), buf.size()));
  CHECK_FALSE(mr.contains(buf.data() + 1, buf.size()));
  CHECK_FALSE(mr.contains(buf.data() - 1, 1));
  mr.deregister();
  CHECK_FALSE(mr);
  CHECK_NOTHROW(mr.deregister());  // idempotent
}

TEST_CASE_METHOD(fixture, "remote_write without local_write fails with EINVAL and says why", "[mr]") {
  std::vector<std::byte> buf(4096);
  coverbs::error_code ec;
  coverbs::memory_region mr(pd, buf, cv::access::remote_write, ec);
  CHECK(ec == boost::system::errc::invalid_argument);
  CHECK(ec == cv::errc::rights_need_local_write);  // classified as reg_mr does; still equal to EINVAL
  CHECK_FALSE(mr);
  try {
    coverbs::memory_region thrown(pd, buf, cv::access::remote_write | cv::access::remote_read);
    FAIL("registration succeeded");
  } catch (const coverbs::system_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.code() == boost::system::errc::invalid_argument);
    CHECK(what.find("ibv_reg_mr") != std::string::npos);
    CHECK(what.find("access=remote_write|remote_read") != std::string::npos);
    CHECK(what.find("without local_write") != std::string::npos);
  }
  // remote_atomic has the same rule
  coverbs::memory_region atomic(pd, buf, cv::access::remote_atomic, ec);
  CHECK(ec == boost::system::errc::invalid_argument);
}

TEST_CASE_METHOD(fixture, "registering memory whose pages cannot be pinned (no access rights) fails with EFAULT", "[mr]") {
  // Address space held with no access rights: unlike a range just unmapped, nothing else (a sanitizer's
  // runtime, another thread) can map memory there before the verb runs.
  void* p = ::mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  coverbs::error_code ec;
  coverbs::memory_region mr(pd, {static_cast<std::byte*>(p), 8192}, cv::access::local_write, ec);
  ::munmap(p, 8192);
  CHECK(ec == boost::system::errc::bad_address);
  CHECK_FALSE(mr);
}

TEST_CASE_METHOD(fixture, "a region moves and deregisters once, on destruction", "[mr]") {
  std::vector<std::byte> buf(8192);
  coverbs::memory_region a(pd, buf, cv::access::local_write);
  const std::uint32_t lkey = a.lkey();
  coverbs::memory_region b = std::move(a);
  CHECK_FALSE(a);
  CHECK(b.lkey() == lkey);
  {
    coverbs::memory_region c(pd, buf, cv::access::local_write);
    b = std::move(c);  // deregisters b's old region
  }
  CHECK(b);
  CHECK(b.lkey() != lkey);
}

TEST_CASE_METHOD(fixture, "a protection domain with a live region refuses to close until it is gone", "[mr][pd]") {
  std::vector<std::byte> buf(4096);
  auto mr = std::make_unique<coverbs::memory_region>(pd, buf, cv::access::local_write);
  coverbs::error_code ec;
  pd.close(ec);
  CHECK(ec == boost::system::errc::device_or_resource_busy);
  CHECK(pd);
  mr.reset();
  pd.close(ec);
  CHECK_FALSE(ec);
  CHECK_FALSE(pd);
}

TEST_CASE_METHOD(fixture, "many regions over one buffer get distinct keys", "[mr]") {
  std::vector<std::byte> buf(1 << 16);
  std::vector<coverbs::memory_region> regions;
  for (int i = 0; i < 64; ++i)
    regions.emplace_back(pd, buf, cv::access::local_write | cv::access::remote_read);
  std::vector<std::uint32_t> keys;
  for (auto& r : regions)
    keys.push_back(r.lkey());
  std::sort(keys.begin(), keys.end());
  CHECK(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
}

// fork(2) after registration. The kernel copies pages that may be DMA-pinned into the child at fork, so
// the parent (and the device) keep the registered pages; it reports this to libibverbs (copy-on-fork,
// Linux 5.13 and later), whose ibv_is_fork_initialized() then answers IBV_FORK_UNNEEDED. Run with
// RDMAV_FORK_SAFE=1, libibverbs (rdma-core 44) still marks registered ranges MADV_DONTFORK: then the child
// that touches one is killed with SIGSEGV, and the parent is unaffected all the same.
TEST_CASE_METHOD(fixture, "fork after registering: the child writes its own copy, the parent's region keeps working",
                 "[mr][fork]") {
  const ibv_fork_status status_reported = ::ibv_is_fork_initialized();
  if (status_reported != IBV_FORK_UNNEEDED) {
    WARN("this kernel does not copy pinned pages on fork (ibv_is_fork_initialized() == "
         << int(status_reported) << "): nothing to test");
    return;
  }
  constexpr std::size_t n = 64 * 1024;
  anonymous_mapping buf(n), other(n);
  std::memset(buf.bytes, 'P', n);
  const auto rw = cv::access::local_write | cv::access::remote_read | cv::access::remote_write;
  coverbs::memory_region mr(pd, buf.span(), rw);
  coverbs::memory_region other_mr(pd, other.span(), rw);
  test::loopback qp(dev, pd);
  const bool madvise_mode = marked_dontfork(buf.bytes);
  INFO("libibverbs madvise mode (RDMAV_FORK_SAFE / ibv_fork_init): " << madvise_mode);

  int go[2];
  REQUIRE(::pipe(go) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child: only async-signal-safe calls, then _exit (no Catch2, no destructors).
    child_default_signals();
    char c = 0;
    if (::read(go[0], &c, 1) != 1) ::_exit(2);
    // The parent has written its first half by now; the child's copy is the snapshot taken at fork.
    for (std::size_t i = 0; i < n; ++i)
      if (buf.bytes[i] != std::byte('P')) ::_exit(3);
    std::memset(buf.bytes, 'C', n);
    ::_exit(0);
  }
  // The parent writes while the child is alive: the write that, without copy-on-fork, would move the
  // parent to a fresh page and leave the device on the child's one.
  std::memset(buf.bytes, 'Q', n / 2);
  REQUIRE(::write(go[1], "x", 1) == 1);
  const int status = wait_status(child);
  ::close(go[0]);
  ::close(go[1]);
  if (madvise_mode) {
    CHECK(WIFSIGNALED(status));  // the range is not mapped in the child
    CHECK(WTERMSIG(status) == SIGSEGV);
  } else {
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // 3: the child saw the parent's write
  }
  CHECK(buf.all(0, n / 2, 'Q'));  // the child's writes, if any, went to its own copy
  CHECK(buf.all(n / 2, n, 'P'));

  // The device still reads and writes the parent's pages.
  CHECK(qp.read(cv::span_of(other_mr), cv::remote_key_of(mr)) == IBV_WC_SUCCESS);
  CHECK(std::memcmp(other.bytes, buf.bytes, n) == 0);
  std::memset(other.bytes, 'W', n);
  CHECK(qp.write(cv::span_of(other_mr), cv::remote_key_of(mr)) == IBV_WC_SUCCESS);
  CHECK(buf.all(0, n, 'W'));
  CHECK(::ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
}

// What libibverbs' madvise mode (ibv_fork_init() on a kernel without copy-on-fork) does to a child:
// registered ranges are MADV_DONTFORK, so they are not mapped in the child at all.
TEST_CASE_METHOD(fixture, "a registered range marked MADV_DONTFORK kills the child that touches it (SIGSEGV)",
                 "[mr][fork]") {
  constexpr std::size_t n = 16 * 1024;
  anonymous_mapping buf(n), other(n);
  std::memset(buf.bytes, 'P', n);
  const auto rw = cv::access::local_write | cv::access::remote_read | cv::access::remote_write;
  coverbs::memory_region mr(pd, buf.span(), rw);
  coverbs::memory_region other_mr(pd, other.span(), rw);
  REQUIRE(::madvise(buf.bytes, n, MADV_DONTFORK) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    child_default_signals();
    static_cast<volatile std::byte*>(buf.bytes)[0] = std::byte('C');
    ::_exit(0);
  }
  const int status = wait_status(child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
  // The parent is untouched and its region works.
  test::loopback qp(dev, pd);
  CHECK(qp.read(cv::span_of(other_mr), cv::remote_key_of(mr)) == IBV_WC_SUCCESS);
  CHECK(other.all(0, n, 'P'));
  REQUIRE(::madvise(buf.bytes, n, MADV_DOFORK) == 0);
}
