#pragma once
/// @file
/// `buffer_pool`: pre-registered memory ("prefetch" mode). Arenas aligned to 2 MiB (MAP_HUGETLB when the
/// system has huge pages reserved, else transparent huge pages through madvise(MADV_HUGEPAGE)), one memory
/// region per arena, carved into blocks of fixed size classes. A `registered_buffer` carries its bytes,
/// lkey and rkey and returns to the pool on destruction. When a class's free blocks drop under the
/// watermark, the next arena is registered in the background on the registration service's workers, so
/// allocation never waits on the kernel in steady state.

#include <coverbs/registration_service.hpp>

#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace coverbs {

struct pool_options {
  /// Block sizes in bytes, ascending; a request gets the smallest class that fits.
  std::vector<std::size_t> size_classes{4096, 65536, 1 << 20};
  /// Bytes per arena: a multiple of 2 MiB, at least the largest class.
  std::size_t arena_size = std::size_t{8} << 20;
  /// Arenas registered per class when the pool is made (synchronously, on the calling thread).
  std::size_t initial_arenas = 1;
  /// Register the next arena of a class in the background when its free blocks fall below this fraction
  /// of one arena's blocks.
  double low_watermark = 0.25;
  /// Arenas at most (all classes); beyond it allocation fails with errc::pool_exhausted.
  std::size_t max_arenas = 64;
  access rights = access::local_write | access::remote_read | access::remote_write;
  /// Try MAP_HUGETLB first.
  bool huge_pages = true;
};

struct pool_stats {
  std::size_t arenas = 0;            ///< arenas registered
  std::size_t background_arenas = 0; ///< of which registered in the background
  std::size_t huge_tlb_arenas = 0;   ///< of which backed by MAP_HUGETLB pages
  std::size_t bytes_registered = 0;  ///< bytes in all arenas
  std::size_t in_use = 0;            ///< buffers handed out and not yet returned
  std::uint64_t allocations = 0;     ///< successful allocations
  std::uint64_t exhausted = 0;       ///< try_allocate calls that found no free block
};

namespace detail {
class pool_state;
}

/// A block of a pool: bytes inside a registered arena plus its keys; goes back to the pool on destruction.
/// Move-only.
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe.
class registered_buffer {
public:
  registered_buffer() noexcept = default;
  registered_buffer(registered_buffer&& o) noexcept;
  registered_buffer& operator=(registered_buffer&& o) noexcept;
  registered_buffer(const registered_buffer&) = delete;
  registered_buffer& operator=(const registered_buffer&) = delete;
  ~registered_buffer();

  /// The requested bytes (the block may be larger).
  std::span<std::byte> buffer() const noexcept { return bytes_; }
  std::byte* data() const noexcept { return bytes_.data(); }
  /// Length in bytes.
  std::size_t size() const noexcept { return bytes_.size(); }
  std::uint32_t lkey() const noexcept { return lkey_; }
  std::uint32_t rkey() const noexcept { return rkey_; }
  /// The bytes with the lkey, for data-path operations.
  registered_span span() const noexcept { return {bytes_, lkey_}; }
  /// The bytes as a peer names them (with the arena's rkey).
  remote_key remote() const noexcept { return {reinterpret_cast<std::uint64_t>(bytes_.data()), bytes_.size(), rkey_}; }
  explicit operator bool() const noexcept { return bytes_.data() != nullptr; }

  /// @private
  registered_buffer(std::shared_ptr<detail::pool_state> pool, std::span<std::byte> bytes, std::uint32_t lkey,
                    std::uint32_t rkey, std::size_t size_class) noexcept
      : pool_(std::move(pool)), bytes_(bytes), lkey_(lkey), rkey_(rkey), class_(size_class) {}

private:
  std::shared_ptr<detail::pool_state> pool_;
  std::span<std::byte> bytes_;
  std::uint32_t lkey_ = 0, rkey_ = 0;
  std::size_t class_ = 0;
};

/// Pre-registered buffers over a registration service.
///
/// Lifetime: the service and the protection domain outlive the pool. Buffers may outlive the pool object:
/// arenas are deregistered and unmapped when the pool and its last buffer are gone.
/// @par Thread Safety
/// Thread-safe, and may be shared across loops (threads): its free lists are guarded by a mutex and
/// arenas are registered on the service's workers. `async_allocate` completes on the handler's associated
/// executor, else the service's: from a loop_pool member, use a token bound to the member (a coroutine's
/// `use_awaitable` is), or the handler runs on the service's loop. A `registered_buffer` is not shared:
/// it belongs to the thread using it and may be destroyed (returned) on any thread.
class buffer_pool {
public:
  /// Maps and registers `options.initial_arenas` arenas per class on this thread.
  /// @throws system_error: EINVAL (bad options: the message says which), the errors of ibv_reg_mr(3) and
  /// mmap(2).
  buffer_pool(registration_service& service, protection_domain& pd, const pool_options& options = {});
  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;
  ~buffer_pool();

  /// A buffer of `size` bytes from a free block, or nothing when the class has none right now (a
  /// background arena is then on its way, unless `max_arenas` is reached) or `size` exceeds every class.
  /// Never blocks on the kernel.
  std::optional<registered_buffer> try_allocate(std::size_t size);

  /// A buffer of `size` bytes, registering an arena first when none is free.
  /// @par Completion Signature
  /// `void(error_code, registered_buffer)`.
  /// @par Errors
  /// `errc::pool_exhausted` (max_arenas reached, or `size` exceeds every class), the errors of `reg_mr`.
  /// @par Per-Operation Cancellation
  /// Terminal, while an arena is being registered (as `reg_shared`).
  template <boost::asio::completion_token_for<void(error_code, registered_buffer)> CompletionToken =
                detail::default_token_t<registration_service::executor_type>>
  auto async_allocate(std::size_t size, CompletionToken&& token = {});

  pool_stats stats() const;

private:
  struct allocate_op;
  registration_service& service_;
  protection_domain& pd_;
  std::shared_ptr<detail::pool_state> state_;
};

namespace detail {
/// @private The pool's state; shared with its buffers. Defined in the library.
class pool_state {
public:
  virtual ~pool_state() = default;
  virtual std::optional<registered_buffer> try_allocate(std::size_t size, bool count_exhaustion) = 0;
  /// Maps an arena for the class of `size` (nullptr when over the limits, `ec` says why).
  virtual std::span<std::byte> map_arena_for(std::size_t size, error_code& ec) = 0;
  /// Adds a registered arena (or unmaps it when registration failed).
  virtual void add_arena(std::span<std::byte> memory, const shared_region& registration, bool background) = 0;
  virtual access rights() const noexcept = 0;
  /// A buffer's block comes back.
  virtual void give_back(std::size_t size_class, std::byte* block, std::uint32_t lkey, std::uint32_t rkey) noexcept = 0;
};
} // namespace detail

struct buffer_pool::allocate_op {
  registration_service* service;
  protection_domain* pd;
  std::shared_ptr<detail::pool_state> state;
  std::size_t size;
  std::span<std::byte> arena{};
  std::optional<registered_buffer> got{};
  error_code error{};
  enum { starting, delivering, registering } phase = starting;

  template <typename Self>
  void operator()(Self& self, error_code ec = {}, shared_region registration = {}) {
    switch (phase) {
    case starting:
      got = state->try_allocate(size, false);
      if (!got) arena = state->map_arena_for(size, error);
      if (got || error) {
        phase = delivering;
        boost::asio::post(std::move(self)); // complete outside the initiating call
        return;
      }
      phase = registering;
      reg_shared(*service, *pd, arena, state->rights(), std::move(self));
      return;
    case registering:
      state->add_arena(arena, registration, false);
      error = ec;
      if (!ec) got = state->try_allocate(size, false);
      if (!got && !error) error = make_error_code(errc::pool_exhausted);
      break;
    case delivering: break;
    }
    self.complete(error, got ? std::move(*got) : registered_buffer{});
  }
};

template <boost::asio::completion_token_for<void(error_code, registered_buffer)> CompletionToken>
auto buffer_pool::async_allocate(std::size_t size, CompletionToken&& token) {
  return boost::asio::async_compose<CompletionToken, void(error_code, registered_buffer)>(
      allocate_op{&service_, &pd_, state_, size}, token, service_.get_executor());
}

} // namespace coverbs
