#include "verbs/registration_errors.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace coverbs::detail {

namespace {

/// Whether every page of `buffer` is mapped in this process (mincore(2) fails with ENOMEM on a hole).
bool all_mapped(std::span<std::byte> buffer) noexcept {
  if (buffer.empty()) return false;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(buffer.data()) & ~(page - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(buffer.data()) + buffer.size();
  unsigned char residency[64];
  for (std::uintptr_t at = begin; at < end;) {
    const std::uintptr_t n = std::min<std::uintptr_t>((end - at + page - 1) / page, sizeof residency);
    if (::mincore(reinterpret_cast<void*>(at), n * page, residency) != 0) return false;
    at += n * page;
  }
  return true;
}

} // namespace

error_code classify_registration_error(const error_code& ec, std::span<std::byte> buffer, access rights) noexcept {
  namespace sys = boost::system::errc;
  if (ec == sys::invalid_argument) {
    if ((has(rights, access::remote_write) || has(rights, access::remote_atomic)) && !has(rights, access::local_write))
      return errc::rights_need_local_write;
    if (buffer.empty()) return errc::empty_buffer;
    return errc::invalid_registration;
  }
  if (ec == sys::bad_address) {
    // Only mw_bind asked for writable pages, and the pages are there: they are read-only.
    const bool write_right = has(rights, access::local_write) || has(rights, access::remote_write) ||
                             has(rights, access::remote_atomic);
    if (has(rights, access::mw_bind) && !write_right && all_mapped(buffer)) return errc::mw_bind_needs_writable_memory;
    return errc::buffer_not_mapped;
  }
  if (ec == sys::not_enough_memory) return errc::memlock_exhausted;
  return ec;
}

}  // namespace coverbs::detail
