#pragma once
/// @file
/// `shared_region`: a part of a registration shared with other holders — what `reg_shared`
/// (registration_service.hpp) and `registration_cache` hand out.

#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/detail/registration_core.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

namespace coverbs {

/// A part of a registration shared with other holders (batch mode and the cache): the requested bytes, the
/// registration's keys, and shared ownership of it. The registration is deregistered when its last holder
/// lets go. Cheap to copy.
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe (like std::shared_ptr).
class shared_region {
public:
  shared_region() noexcept = default;
  shared_region(std::shared_ptr<const detail::shared_mr> mr, std::span<std::byte> bytes) noexcept
      : mr_(std::move(mr)), bytes_(bytes) {}

  /// The requested bytes (a part of the registration).
  std::span<std::byte> buffer() const noexcept { return bytes_; }
  std::byte* data() const noexcept { return bytes_.data(); }
  /// Length in bytes.
  std::size_t size() const noexcept { return bytes_.size(); }
  std::uint32_t lkey() const noexcept { return mr_ ? mr_->native_handle()->lkey : 0; }
  std::uint32_t rkey() const noexcept { return mr_ ? mr_->native_handle()->rkey : 0; }
  access rights() const noexcept { return mr_ ? mr_->rights() : access::none; }
  /// The requested bytes with the lkey, for data-path operations.
  registered_span span() const noexcept { return {bytes_, lkey()}; }
  /// The requested bytes as a peer names them (meaningful when the registration grants a remote right).
  remote_key remote() const noexcept { return {reinterpret_cast<std::uint64_t>(bytes_.data()), bytes_.size(), rkey()}; }
  /// All the bytes the registration covers (at least `buffer()`).
  std::span<std::byte> registration() const noexcept {
    return mr_ ? std::span<std::byte>{mr_->data(), mr_->size()} : std::span<std::byte>{};
  }
  /// False once the memory under the registration was unmapped or replaced, as registration_cache sees it
  /// (its `invalidate()`, or its userfaultfd monitor: munmap, mmap MAP_FIXED, mremap, madvise DONTNEED /
  /// REMOVE — false as soon as that call has returned, on any thread that call happens-before). The keys
  /// then name pages the process no longer sees at these addresses, and stay live: the pages stay pinned
  /// and a peer holding `rkey()` can still write into them until the last handle goes. Always true for a
  /// `reg_shared` region outside a cache; false for an empty handle. What the cache's monitor cannot see
  /// (registration_cache.hpp), and anything after the cache is destroyed, leaves it true.
  bool valid() const noexcept { return mr_ && mr_->valid(); }
  /// True when both are parts of the same registration.
  bool shares_registration_with(const shared_region& o) const noexcept { return mr_ && mr_ == o.mr_; }
  ibv_mr* native_handle() const noexcept { return mr_ ? mr_->native_handle() : nullptr; }
  explicit operator bool() const noexcept { return mr_ != nullptr; }
  /// @private
  const std::shared_ptr<const detail::shared_mr>& owner() const noexcept { return mr_; }

private:
  std::shared_ptr<const detail::shared_mr> mr_;
  std::span<std::byte> bytes_;
};

}  // namespace coverbs
