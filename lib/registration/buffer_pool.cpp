#include <coverbs/buffer_pool.hpp>

#include "verbs/registration_errors.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/system_executor.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>
#include <string>

namespace coverbs {
namespace detail {
namespace {

constexpr std::size_t two_mib = std::size_t{2} << 20;

/// 2 MiB-aligned anonymous memory: MAP_HUGETLB if allowed and available, else over-map, trim, MADV_HUGEPAGE.
std::span<std::byte> map_aligned(std::size_t size, bool try_huge, bool& huge, error_code& ec) noexcept {
  const int prot = PROT_READ | PROT_WRITE;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (try_huge) {
    void* p = ::mmap(nullptr, size, prot, flags | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      huge = true;
      return {static_cast<std::byte*>(p), size};
    }
  }
  huge = false;
  void* p = ::mmap(nullptr, size + two_mib, prot, flags, -1, 0);
  if (p == MAP_FAILED) {
    ec = errno_code(errno);
    return {};
  }
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const auto aligned = (at + two_mib - 1) & ~(two_mib - 1);
  if (aligned > at) ::munmap(p, aligned - at);
  if (const auto tail = at + size + two_mib - (aligned + size)) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE); // best effort (THP may be off)
  return {reinterpret_cast<std::byte*>(aligned), size};
}

struct arena {
  arena(std::span<std::byte> m, shared_region r) noexcept : memory(m), registration(std::move(r)) {}
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;
  std::span<std::byte> memory;
  shared_region registration;
  ~arena() {
    registration = {}; // deregister first, then give the pages back
    ::munmap(memory.data(), memory.size());
  }
};

struct free_block {
  std::byte* block;
  std::uint32_t lkey, rkey;
};

struct size_class {
  std::size_t block = 0;
  std::vector<free_block> free;
  bool growing = false;
};

class pool_state_impl final : public pool_state, public std::enable_shared_from_this<pool_state_impl> {
public:
  pool_state_impl(registration_service& service, protection_domain& pd, const pool_options& options)
      : service_(&service), pd_(&pd), options_(options) {
    for (std::size_t b : options.size_classes)
      classes_.push_back(size_class{b, {}, false});
  }

  /// Maps and registers one arena for class `c` on this thread.
  void grow_now(std::size_t c) {
    error_code ec;
    bool huge = false;
    auto memory = map_aligned(options_.arena_size, options_.huge_pages, huge, ec);
    throw_on_error(ec, "buffer_pool: mmap of an arena of " + std::to_string(options_.arena_size) + " bytes");
    const auto& acct = service_->core()->acct();
    ibv_mr* mr = acct->reg(pd_->native_handle(), memory, options_.rights, ec);
    if (!mr) {
      ::munmap(memory.data(), memory.size());
      throw system_error(classify_registration_error(ec, memory, options_.rights),
                         "buffer_pool: ibv_reg_mr of an arena");
    }
    auto owner = std::make_shared<shared_mr>(acct, mr, options_.rights);
    std::lock_guard lock(mutex_);
    install_locked(c, memory, shared_region(std::move(owner), memory), huge, false);
  }

  std::optional<registered_buffer> try_allocate(std::size_t size, bool count_exhaustion) override {
    const std::size_t c = class_of(size);
    if (c == classes_.size()) return std::nullopt;
    std::lock_guard lock(mutex_);
    auto& cls = classes_[c];
    std::optional<registered_buffer> out;
    if (!cls.free.empty()) {
      const free_block b = cls.free.back();
      cls.free.pop_back();
      ++in_use_;
      ++allocations_;
      out.emplace(shared_from_this(), std::span<std::byte>{b.block, size}, b.lkey, b.rkey, c);
    } else if (count_exhaustion) {
      ++exhausted_;
    }
    grow_in_background_locked(c);
    return out;
  }

  std::span<std::byte> map_arena_for(std::size_t size, error_code& ec) override {
    const std::size_t c = class_of(size);
    std::lock_guard lock(mutex_);
    if (c == classes_.size() || arenas_.size() + pending_.size() >= options_.max_arenas) {
      ec = make_error_code(errc::pool_exhausted);
      return {};
    }
    return map_locked(c, ec);
  }

  void add_arena(std::span<std::byte> memory, const shared_region& registration, bool background) override {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(memory.data());
    if (it == pending_.end()) return;
    const auto [c, huge] = it->second;
    pending_.erase(it);
    if (background) classes_[c].growing = false;
    if (!registration) {
      ::munmap(memory.data(), memory.size());
      return;
    }
    install_locked(c, memory, registration, huge, background);
  }

  access rights() const noexcept override { return options_.rights; }

  void give_back(std::size_t c, std::byte* block, std::uint32_t lkey, std::uint32_t rkey) noexcept override {
    std::lock_guard lock(mutex_);
    try {
      classes_[c].free.push_back({block, lkey, rkey});
    } catch (...) { // cannot grow the free list: the block is lost until the pool goes, nothing leaks
    }
    --in_use_;
  }

  pool_stats stats() const {
    std::lock_guard lock(mutex_);
    pool_stats s;
    s.arenas = arenas_.size();
    s.background_arenas = background_;
    s.huge_tlb_arenas = huge_tlb_;
    s.bytes_registered = arenas_.size() * options_.arena_size;
    s.in_use = in_use_;
    s.allocations = allocations_;
    s.exhausted = exhausted_;
    return s;
  }

private:
  std::size_t class_of(std::size_t size) const noexcept {
    std::size_t c = 0;
    while (c < classes_.size() && classes_[c].block < size)
      ++c;
    return c;
  }

  std::span<std::byte> map_locked(std::size_t c, error_code& ec) {
    bool huge = false;
    auto memory = map_aligned(options_.arena_size, options_.huge_pages, huge, ec);
    if (!ec) pending_.emplace(memory.data(), std::pair{c, huge});
    return memory;
  }

  void install_locked(std::size_t c, std::span<std::byte> memory, const shared_region& registration, bool huge,
                      bool background) {
    auto& cls = classes_[c];
    for (std::size_t off = 0; off + cls.block <= memory.size(); off += cls.block)
      cls.free.push_back({memory.data() + off, registration.lkey(), registration.rkey()});
    arenas_.push_back(std::make_unique<arena>(memory, registration));
    background_ += background ? 1 : 0;
    huge_tlb_ += huge ? 1 : 0;
  }

  /// Below the watermark: map the next arena here (cheap) and register it on the workers (the slow part).
  void grow_in_background_locked(std::size_t c) {
    auto& cls = classes_[c];
    const auto per_arena = options_.arena_size / cls.block;
    if (cls.growing ||
        static_cast<double>(cls.free.size()) >= options_.low_watermark * static_cast<double>(per_arena) ||
        arenas_.size() + pending_.size() >= options_.max_arenas)
      return;
    error_code ec;
    auto memory = map_locked(c, ec);
    if (ec) return;
    cls.growing = true;
    // The system executor runs the batch kick and the completion, so growth needs no loop of the caller's.
    // This completion is the pool's own bookkeeping (add_arena, under the mutex), never a user's handler:
    // user handlers (async_allocate) complete on their associated executor, else the service's.
    reg_shared(*service_, *pd_, memory, options_.rights,
               boost::asio::bind_executor(boost::asio::system_executor(),
                                          [weak = weak_from_this(), memory](error_code, shared_region r) mutable {
                                            if (auto self = weak.lock()) {
                                              self->add_arena(memory, r, true);
                                            } else {
                                              r = {};
                                              ::munmap(memory.data(), memory.size());
                                            }
                                          }));
  }

  registration_service* service_;
  protection_domain* pd_;
  pool_options options_;
  mutable std::mutex mutex_;
  std::vector<size_class> classes_;
  std::vector<std::unique_ptr<arena>> arenas_;
  std::map<std::byte*, std::pair<std::size_t, bool>> pending_; // mapped, being registered: class, hugetlb
  std::size_t in_use_ = 0, background_ = 0, huge_tlb_ = 0;
  std::uint64_t allocations_ = 0, exhausted_ = 0;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw system_error(errno_code(EINVAL), "buffer_pool: " + what);
}

} // namespace
} // namespace detail

registered_buffer::registered_buffer(registered_buffer&& o) noexcept
    : pool_(std::move(o.pool_)), bytes_(std::exchange(o.bytes_, {})), lkey_(o.lkey_), rkey_(o.rkey_), class_(o.class_) {
}

registered_buffer& registered_buffer::operator=(registered_buffer&& o) noexcept {
  if (this != &o) {
    registered_buffer old(std::move(*this));
    pool_ = std::move(o.pool_);
    bytes_ = std::exchange(o.bytes_, {});
    lkey_ = o.lkey_;
    rkey_ = o.rkey_;
    class_ = o.class_;
  }
  return *this;
}

registered_buffer::~registered_buffer() {
  if (pool_ && bytes_.data()) pool_->give_back(class_, bytes_.data(), lkey_, rkey_);
}

buffer_pool::buffer_pool(registration_service& service, protection_domain& pd, const pool_options& options)
    : service_(service), pd_(pd) {
  using detail::check;
  const auto& classes = options.size_classes;
  check(!classes.empty(), "size_classes is empty (give at least one block size)");
  check(options.arena_size > 0 && options.arena_size % detail::two_mib == 0,
        "arena_size must be a positive multiple of 2 MiB (got " + std::to_string(options.arena_size) + ")");
  for (std::size_t i = 0; i < classes.size(); ++i) {
    check(classes[i] > 0 && classes[i] <= options.arena_size,
          "size class " + std::to_string(classes[i]) + " must be 1 .. arena_size bytes");
    check(i == 0 || classes[i - 1] < classes[i], "size_classes must ascend");
  }
  check(options.low_watermark >= 0 && options.low_watermark <= 1, "low_watermark must be in [0, 1]");
  check(options.initial_arenas * classes.size() <= options.max_arenas, "initial arenas exceed max_arenas");
  auto state = std::make_shared<detail::pool_state_impl>(service, pd, options);
  for (std::size_t c = 0; c < classes.size(); ++c)
    for (std::size_t i = 0; i < options.initial_arenas; ++i)
      state->grow_now(c);
  state_ = std::move(state);
}

buffer_pool::~buffer_pool() = default;

std::optional<registered_buffer> buffer_pool::try_allocate(std::size_t size) {
  return state_->try_allocate(size, true);
}

pool_stats buffer_pool::stats() const { return static_cast<const detail::pool_state_impl&>(*state_).stats(); }

} // namespace coverbs
