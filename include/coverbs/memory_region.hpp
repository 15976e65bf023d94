#pragma once
/// @file
/// `memory_region`: synchronous registration of memory with a protection domain (ibv_reg_mr(3)).
/// Registration pins the pages and can take milliseconds for large buffers; the asynchronous form
/// that keeps the event loop free is `coverbs::reg_mr` (registration_service.hpp).

#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/error.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace coverbs {

class protection_domain;

/// Move-only owner of a registered memory region (`ibv_reg_mr` / `ibv_dereg_mr`).
///
/// Lifetime: the protection domain outlives the region; the memory stays allocated while registered;
/// windows bound to the region are invalidated before it is deregistered (the verb answers EBUSY).
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: the const accessors (keys, address, length, rights) may be
/// used from several loops (threads) at once — they read values fixed at registration — so one region may
/// back operations posted from several loops. Moving, deregistration and destruction are unsafe while
/// another thread uses it (and, as always, only after every operation naming it has completed).
class memory_region {
public:
  memory_region() noexcept = default;

  /// Registers `buffer` (pointer + length in bytes) with `pd`, granting `rights`.
  /// @throws system_error from ibv_reg_mr(3), classified as `reg_mr` does (each code equals its errno):
  /// EINVAL as `errc::rights_need_local_write` / `empty_buffer` / `invalid_registration`, EFAULT as
  /// `errc::buffer_not_mapped` (not mapped, or read-only with a write right) or
  /// `errc::mw_bind_needs_writable_memory` (read-only memory with mw_bind); ENOMEM (out of resources or over
  /// RLIMIT_MEMLOCK), EOPNOTSUPP (a right the device lacks, e.g. `on_demand`).
  /// The message names the verb, the buffer and the rights, and the likely cause.
  memory_region(protection_domain& pd, std::span<std::byte> buffer, access rights);
  /// As above; on failure sets `ec` and leaves the region empty.
  memory_region(protection_domain& pd, std::span<std::byte> buffer, access rights, error_code& ec) noexcept;

  /// Takes ownership of a region registered elsewhere with `rights` (deregistered on destruction).
  static memory_region adopt(ibv_mr* mr, access rights) noexcept { return memory_region(mr, rights); }

  memory_region(memory_region&& other) noexcept;
  memory_region& operator=(memory_region&& other) noexcept;
  memory_region(const memory_region&) = delete;
  memory_region& operator=(const memory_region&) = delete;
  ~memory_region();

  std::byte* data() const noexcept { return mr_ ? static_cast<std::byte*>(mr_->addr) : nullptr; }
  /// Length in bytes.
  std::size_t size() const noexcept { return mr_ ? mr_->length : 0; }
  std::span<std::byte> buffer() const noexcept { return {data(), size()}; }
  /// Local key, for scatter/gather entries of this process's work requests.
  std::uint32_t lkey() const noexcept { return mr_ ? mr_->lkey : 0; }
  /// Remote key of the whole region (meaningful when it grants a remote right).
  std::uint32_t rkey() const noexcept { return mr_ ? mr_->rkey : 0; }
  access rights() const noexcept { return rights_; }
  ibv_pd* pd() const noexcept { return mr_ ? mr_->pd : nullptr; }
  ibv_mr* native_handle() const noexcept { return mr_; }
  explicit operator bool() const noexcept { return mr_ != nullptr; }

  /// True when [`p`, `p + n`) lies inside the region.
  bool contains(const void* p, std::size_t n) const noexcept;

  /// Deregisters now. @throws system_error `errc::region_has_bound_windows` (memory windows bound through
  /// coverbs are still bound to it; checked before asking the device), or the errno of ibv_dereg_mr(3)
  /// (EINVAL on rxe, EBUSY elsewhere, for windows bound behind coverbs' back); the region then stays
  /// registered.
  void deregister();
  /// As above, reporting through `ec`.
  void deregister(error_code& ec) noexcept;

  /// Gives up ownership without deregistering.
  ibv_mr* release() noexcept;

private:
  memory_region(ibv_mr* mr, access rights) noexcept : mr_(mr), rights_(mr ? rights : access::none) {}
  ibv_mr* mr_ = nullptr;
  access rights_ = access::none;
};

/// The whole of `mr` as a registered span.
inline registered_span span_of(const memory_region& mr) noexcept { return {mr.buffer(), mr.lkey()}; }

/// `length` bytes of `mr` from `offset`.
/// @throws system_error `errc::range_outside_region` when the range is not inside the region.
inline registered_span span_of(const memory_region& mr, std::size_t offset, std::size_t length) {
  if (offset > mr.size() || length > mr.size() - offset)
    throw system_error(make_error_code(errc::range_outside_region),
                       "span_of(offset=" + std::to_string(offset) + ", length=" + std::to_string(length) +
                           ") of a region of " + std::to_string(mr.size()) + " bytes");
  return {mr.buffer().subspan(offset, length), mr.lkey()};
}

/// The remote key of the whole of `mr` (its rkey grants what `mr.rights()` says).
inline remote_key remote_key_of(const memory_region& mr) noexcept {
  return {reinterpret_cast<std::uint64_t>(mr.data()), mr.size(), mr.rkey()};
}

}  // namespace coverbs
