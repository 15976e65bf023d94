#pragma once
/// @file
/// `registered_buffer`: a block of a `buffer_pool` (buffer_pool.hpp) — bytes inside a registered arena plus
/// its keys — that returns to its pool on destruction.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

namespace coverbs {

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

}  // namespace coverbs
