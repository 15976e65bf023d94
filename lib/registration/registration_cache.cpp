#include <coverbs/registration_cache.hpp>

#include "core/metrics.hpp"
#include "core/readiness.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace coverbs {
namespace detail {

// --- unmap_monitor ---

struct unmap_monitor::loop {
  boost::asio::io_context io{1};
  boost::asio::posix::stream_descriptor fd;
  explicit loop(int raw) : fd(io, raw) {}
};

namespace {

int open_userfaultfd() noexcept {
  const int flags = O_CLOEXEC | O_NONBLOCK;
  // User-mode-only needs no privilege (Linux 5.11+); older kernels reject the flag with EINVAL.
  int fd = static_cast<int>(::syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY));
  if (fd < 0 && errno == EINVAL) fd = static_cast<int>(::syscall(SYS_userfaultfd, flags));
#ifdef USERFAULTFD_IOC_NEW
  if (fd < 0 && errno == EPERM) {  // Linux 6.1+: /dev/userfaultfd, governed by its file permissions
    const int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev >= 0) {
      fd = ::ioctl(dev, USERFAULTFD_IOC_NEW, flags);
      ::close(dev);
    }
  }
#endif
  return fd;
}

std::uintptr_t page_size() noexcept {
  static const auto size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

/// Bumped in every child fork(2) makes (registered by the first monitor): a monitor made in an earlier
/// generation belongs to an ancestor process, whose userfaultfd and monitor thread the child does not have.
std::atomic<std::uint64_t> fork_generation{0};

void count_fork_in_child() noexcept { fork_generation.fetch_add(1, std::memory_order_relaxed); }

std::uint64_t current_fork_generation() noexcept {
  static const int registered = ::pthread_atfork(nullptr, nullptr, count_fork_in_child);
  static_cast<void>(registered);
  return fork_generation.load(std::memory_order_relaxed);
}

}  // namespace

unmap_monitor::unmap_monitor() : generation_(current_fork_generation()) {
  const int fd = open_userfaultfd();
  if (fd < 0) {
    const int err = errno;
    status_ = err == EPERM || err == ENOSYS || err == EACCES ? make_error_code(errc::userfaultfd_unavailable)
                                                             : errno_code(err);
    return;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) {
    status_ = errno_code(errno);
    ::close(fd);
    return;
  }
  fd_ = fd;
  loop_ = std::make_unique<loop>(fd);  // owns the fd from here on
  struct waiter {
    unmap_monitor* self;
    void operator()(const error_code& ec) const {
      if (readiness_result(ec)) return;
      self->read_events();
      self->loop_->fd.async_wait(boost::asio::posix::stream_descriptor::wait_read, *this);
    }
  };
  loop_->fd.async_wait(boost::asio::posix::stream_descriptor::wait_read, waiter{this});
  thread_ = std::thread([this] { loop_->io.run(); });
}

unmap_monitor::~unmap_monitor() {
  if (!loop_) return;
  if (status()) {  // lost in a fork: the thread is not in this process and the Asio loop's io_uring is the parent's
    static_cast<void>(new std::thread(std::move(thread_)));  // kept: joining or detaching it here is undefined
    static_cast<void>(loop_.release());  // kept: tearing it down would cancel the parent's operations
    ::close(fd_);                        // this process's reference to the parent's userfaultfd
    return;
  }
  stop();
  loop_.reset();  // closes the fd: the kernel drops every watch and releases any thread still waiting
}

error_code unmap_monitor::status() const noexcept {
  if (status_) return status_;
  if (generation_ != fork_generation.load(std::memory_order_relaxed))
    return make_error_code(errc::monitor_lost_in_fork);
  return {};
}

void unmap_monitor::stop() noexcept {
  if (!thread_.joinable() || status()) return;
  // Unwatch first, so no munmap can wait for a reader that is going away.
  for (const auto& [begin, end] : watched_) {
    uffdio_range range{begin, end - begin};
    ::ioctl(fd_, UFFDIO_UNREGISTER, &range);  // EINVAL where it is unmapped already
  }
  loop_->io.stop();
  thread_.join();
  read_events();  // what the thread had not read yet (the fd is non-blocking)
}

bool unmap_monitor::watch(const void* p, std::size_t n) noexcept {
  if (fd_ < 0 || n == 0 || status()) return false;  // in a fork child the fd would watch the parent's memory
  // Exactly the pages of the range: a wider window could take in a neighbour such as a thread's malloc
  // arena, whose trimming would then wait for this monitor. Hugetlb mappings (which need huge-page
  // alignment) are therefore refused and stay unmonitored.
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t begin = at & ~(page_size() - 1);
  const std::uintptr_t end = (at + n + page_size() - 1) & ~(page_size() - 1);
  uffdio_register reg{};
  reg.range.start = begin;
  reg.range.len = end - begin;
  reg.mode = UFFDIO_REGISTER_MODE_WP;  // events only: nothing is ever write-protected, no fault is trapped
  if (::ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) return false;
  try {
    std::lock_guard lock(watched_mutex_);
    watched_.emplace(begin, end);
  } catch (...) {
  }
  return true;
}

void unmap_monitor::push(std::uintptr_t begin, std::uintptr_t end) noexcept {
  const std::size_t head = head_.load(std::memory_order_relaxed);
  if (head - tail_.load(std::memory_order_acquire) >= ring_size) {
    overflow_.store(true, std::memory_order_release);
    return;
  }
  ring_[head % ring_size] = {begin, end};
  head_.store(head + 1, std::memory_order_release);
}

void unmap_monitor::read_events() noexcept {
  reading_.store(true, std::memory_order_seq_cst);
  uffd_msg msgs[16];
  for (;;) {
    const ssize_t n = ::read(fd_, msgs, sizeof msgs);
    if (n <= 0) break;  // EAGAIN: drained
    for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof(uffd_msg); ++i) {
      const uffd_msg& m = msgs[i];
      switch (m.event) {
      case UFFD_EVENT_UNMAP:
      case UFFD_EVENT_REMOVE: push(m.arg.remove.start, m.arg.remove.end); break;
      case UFFD_EVENT_REMAP: push(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len); break;
      case UFFD_EVENT_PAGEFAULT: {  // not expected (nothing is write-protected): never leave a thread waiting
        uffdio_range range{m.arg.pagefault.address & ~(page_size() - 1), page_size()};
        ::ioctl(fd_, UFFDIO_WAKE, &range);
        break;
      }
      default: break;
      }
    }
  }
  reading_.store(false, std::memory_order_seq_cst);
}

void unmap_monitor::drain(std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& out, bool& overflow) noexcept {
  std::size_t tail = tail_.load(std::memory_order_relaxed);
  const std::size_t head = head_.load(std::memory_order_acquire);
  for (; tail != head; ++tail)
    out.push_back(ring_[tail % ring_size]);
  tail_.store(tail, std::memory_order_release);
  overflow = overflow_.exchange(false, std::memory_order_acq_rel);
}

// --- cache_state ---

namespace {

std::uintptr_t address(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

cache_state::cache_state(const cache_options& options)
    : max_entries_(options.max_entries), max_bytes_(options.max_bytes_pinned) {
  if (options.monitor) monitor_ = std::make_unique<unmap_monitor>();
  metrics_ = enroll_metrics([this](metrics::snapshot& out, bool) {
    std::lock_guard lock(mutex_);
    auto& r = out.registration;
    r.cache_hits += hits_;
    r.cache_misses += misses_;
    r.cache_evictions += evictions_;
    r.cache_invalidations += invalidations_;
  });
}

cache_state::~cache_state() {
  if (monitor_ && !monitor_->status()) {
    // Handles outlive the cache: let them keep what happened to their memory while it watched.
    monitor_->stop();
    graveyard dead;
    // No other owner is left, but a metrics reader (another thread's scrape) may take the lock to read the
    // counters this changes: take it.
    std::lock_guard lock(mutex_);
    apply_events_locked(dead);
  }
  monitor_.reset();
}

void cache_state::apply_events() noexcept {
  if (!monitor_ || monitor_->status()) return;  // also in a fork child: no monitor thread to wait for
  while (monitor_->reading())                   // as in apply_events_locked, without the lock while nothing is queued
    std::this_thread::yield();
  // Nothing queued may mean another thread drained the ring and is still invalidating: the lock waits for it.
  if (!monitor_->pending() && !applying_.load(std::memory_order_seq_cst)) return;
  graveyard dead;  // destroyed after the lock is released: deregistration never runs under it
  std::lock_guard lock(mutex_);
  apply_events_locked(dead);
}

error_code cache_state::monitor_status() const noexcept {
  return monitor_ ? monitor_->status() : errno_code(EOPNOTSUPP);
}

shared_region cache_state::handle_locked(cache_entry& e, std::span<std::byte> range) {
  e.last_used = ++clock_;
  return shared_region(e.mr, range);
}

void cache_state::apply_events_locked(graveyard& dead) {
  if (!monitor_ || monitor_->status()) return;
  while (monitor_->reading())  // an munmap that returned has had its event read: wait until it is queued
    std::this_thread::yield();
  if (!monitor_->pending()) return;
  struct applying_mark {  // set before the drain, cleared once the drained ranges are invalidated (or on a throw)
    std::atomic<bool>& flag;
    explicit applying_mark(std::atomic<bool>& f) : flag(f) { flag.store(true, std::memory_order_seq_cst); }
    ~applying_mark() { flag.store(false, std::memory_order_seq_cst); }
    applying_mark(const applying_mark&) = delete;
    applying_mark& operator=(const applying_mark&) = delete;
  } mark(applying_);
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  bool overflow = false;
  monitor_->drain(ranges, overflow);
  if (overflow) ranges.emplace_back(0, UINTPTR_MAX);
  for (const auto& [b, e] : ranges)
    invalidate_locked(b, e, dead);
}

std::optional<shared_region> cache_state::lookup(ibv_pd* pd, std::span<std::byte> range, access rights) {
  graveyard dead;
  std::lock_guard lock(mutex_);
  apply_events_locked(dead);
  const auto b = address(range.data());
  const auto e = b + range.size();
  if (auto it = index_.find({pd, rights}); it != index_.end()) {
    auto& idx = it->second;
    for (auto i = idx.upper_bound(b); i != idx.begin();) {
      --i;
      if (b - i->first > max_length_) break;
      if (i->second->end >= e) {
        ++hits_;
        evict_locked(dead);  // only when over the limits (handles dropped since the last insert)
        return handle_locked(*i->second, range);
      }
    }
  }
  ++misses_;
  return std::nullopt;
}

std::uint64_t cache_state::prepare(std::span<std::byte> range) noexcept {
  if (monitor_ && !monitor_->status()) monitor_->watch(range.data(), range.size());
  std::lock_guard lock(mutex_);
  return epoch_;
}

shared_region cache_state::insert(const shared_region& fresh, std::uint64_t epoch, ibv_pd* pd, access rights) {
  const auto reg = fresh.registration();
  const bool monitored = monitor_ && !monitor_->status() && monitor_->watch(reg.data(), reg.size());
  const auto b = address(reg.data());
  const auto e = b + reg.size();
  graveyard dead;
  std::lock_guard lock(mutex_);
  apply_events_locked(dead);
  // Was the memory changed while it was being registered? (history lost: assume so)
  bool stale = !recent_.empty() && std::get<0>(recent_.front()) > epoch + 1;
  for (const auto& [at, ib, ie] : recent_)
    stale = stale || (at > epoch && ib < e && ie > b);
  if (stale) {
    fresh.owner()->invalidate();
    return fresh;
  }
  auto& idx = index_[{pd, rights}];
  for (auto [i, last] = idx.equal_range(b); i != last; ++i)
    if (i->second->mr == fresh.owner()) return handle_locked(*i->second, fresh.buffer());  // merged misses
  auto entry = std::make_shared<cache_entry>();
  entry->pd = pd;
  entry->rights = rights;
  entry->begin = b;
  entry->end = e;
  entry->mr = fresh.owner();
  entry->monitored = monitored;
  if (monitored) fresh.owner()->link(shared_from_this());  // so its handles' valid() applies this monitor's events
  idx.emplace(b, entry);
  ++entries_;
  bytes_pinned_ += reg.size();
  unmonitored_ += monitored ? 0 : 1;
  max_length_ = std::max(max_length_, reg.size());
  shared_region out = handle_locked(*entry, fresh.buffer());
  evict_locked(dead);
  return out;
}

void cache_state::unindex_locked(const std::shared_ptr<cache_entry>& e, graveyard& dead) {
  auto& idx = index_[{e->pd, e->rights}];
  for (auto [i, last] = idx.equal_range(e->begin); i != last; ++i)
    if (i->second == e) {
      idx.erase(i);
      break;
    }
  --entries_;
  bytes_pinned_ -= e->end - e->begin;
  unmonitored_ -= e->monitored ? 0 : 1;
  dead.push_back(e);
}

void cache_state::evict_locked(graveyard& dead) {
  while (entries_ > max_entries_ || bytes_pinned_ > max_bytes_) {
    std::shared_ptr<cache_entry> oldest;
    for (const auto& [key, idx] : index_)
      for (const auto& [at, e] : idx)
        if (e->unused() && (!oldest || e->last_used < oldest->last_used)) oldest = e;
    if (!oldest) return;  // everything is in use
    unindex_locked(oldest, dead);
    ++evictions_;
  }
}

std::size_t cache_state::invalidate_locked(std::uintptr_t begin, std::uintptr_t end, graveyard& dead) {
  ++epoch_;
  recent_.emplace_back(epoch_, begin, end);
  if (recent_.size() > 256) recent_.pop_front();
  std::vector<std::shared_ptr<cache_entry>> hit;
  for (auto& [key, idx] : index_) {
    const std::uintptr_t from = begin > max_length_ ? begin - max_length_ : 0;
    for (auto i = idx.lower_bound(from); i != idx.end() && i->first < end; ++i)
      if (i->second->end > begin) hit.push_back(i->second);
  }
  for (const auto& e : hit) {
    e->mr->invalidate();
    unindex_locked(e, dead);
    ++invalidations_;
  }
  return hit.size();
}

std::size_t cache_state::invalidate(std::uintptr_t begin, std::uintptr_t end) {
  graveyard dead;
  std::lock_guard lock(mutex_);
  apply_events_locked(dead);
  return invalidate_locked(begin, end, dead);
}

void cache_state::clear() {
  graveyard dead;
  std::lock_guard lock(mutex_);
  apply_events_locked(dead);
  std::vector<std::shared_ptr<cache_entry>> unused;
  for (const auto& [key, idx] : index_)
    for (const auto& [at, e] : idx)
      if (e->unused()) unused.push_back(e);
  for (const auto& e : unused)
    unindex_locked(e, dead);
}

cache_stats cache_state::stats() const {
  graveyard dead;
  std::lock_guard lock(mutex_);
  auto& self = const_cast<cache_state&>(*this);
  self.apply_events_locked(dead);
  self.evict_locked(dead);
  cache_stats s;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.invalidations = invalidations_;
  s.entries = entries_;
  for (const auto& [key, idx] : index_)
    for (const auto& [at, e] : idx)
      s.unused += e->unused() ? 1 : 0;
  s.bytes_pinned = bytes_pinned_;
  s.unmonitored = unmonitored_;
  return s;
}

// --- shared_mr's view of its cache (registration_core.hpp) ---

void shared_mr::link(const std::shared_ptr<cache_state>& cache) const noexcept {
  int none = 0;
  if (!link_state_.compare_exchange_strong(none, 1, std::memory_order_acquire)) return;  // linked already
  cache_ = cache;
  link_state_.store(2, std::memory_order_release);
}

bool shared_mr::valid() const noexcept {
  if (invalidated()) return false;
  if (link_state_.load(std::memory_order_acquire) == 2)
    if (const auto cache = cache_.lock()) cache->apply_events();
  return !invalidated();
}

}  // namespace detail

registration_cache::registration_cache(registration_service& service, const cache_options& options)
    : service_(service), state_(std::make_shared<detail::cache_state>(options)) {}

registration_cache::~registration_cache() = default;

}  // namespace coverbs
