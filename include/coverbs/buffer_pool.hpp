#pragma once
/// @file
/// `buffer_pool`: pre-registered memory ("prefetch" mode). Arenas aligned to 2 MiB (MAP_HUGETLB when the
/// system has huge pages reserved, else transparent huge pages through madvise(MADV_HUGEPAGE)), one memory
/// region per arena, carved into blocks of fixed size classes. A `registered_buffer` carries its bytes,
/// lkey and rkey and returns to the pool on destruction. When a class's free blocks drop under the
/// watermark, the next arena is registered in the background on the registration service's workers, so
/// allocation never waits on the kernel in steady state.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/registered_buffer.hpp>
#include <coverbs/registration_service.hpp>

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
  template <completion_token_or_handler<void(error_code, registered_buffer)> CompletionToken =
                detail::default_token_t<registration_service::executor_type>>
  auto async_allocate(std::size_t size, CompletionToken&& token = {});

  pool_stats stats() const;

private:
  struct allocate_op;
  registration_service& service_;
  protection_domain& pd_;
  std::shared_ptr<detail::pool_state> state_;
};

}  // namespace coverbs

#include <coverbs/impl/buffer_pool.hpp>
