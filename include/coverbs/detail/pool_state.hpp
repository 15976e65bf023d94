#pragma once
// Internal: the interface of a buffer pool's state that its buffers and `async_allocate` use. Not part of the
// public API.

#include <coverbs/access.hpp>
#include <coverbs/error.hpp>
#include <coverbs/registered_buffer.hpp>
#include <coverbs/registration_service.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace coverbs::detail {

/// The pool's state; shared with its buffers. Defined in the library (lib/registration/buffer_pool.cpp).
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

}  // namespace coverbs::detail
