#include <coverbs/memory_region.hpp>
#include <coverbs/protection_domain.hpp>

#include "verbs/region_registry.hpp"
#include "verbs/registration_errors.hpp"

#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>

namespace coverbs {
namespace {

std::string describe(std::span<std::byte> buffer, access rights) {
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p", static_cast<void*>(buffer.data()));
  return "ibv_reg_mr(addr=" + std::string(addr) + ", length=" + std::to_string(buffer.size()) +
         ", access=" + to_string(rights) + ")";
}

/// The likely cause of a registration failure, from the errno and the request.
std::string hint(const error_code& ec) {
  if (ec == boost::system::errc::not_enough_memory)
    return " — out of device resources or over the locked-memory limit (ulimit -l / RLIMIT_MEMLOCK)";
  if (ec == boost::system::errc::operation_not_supported) return " — the device does not support a requested right";
  return {};
}

}  // namespace

memory_region::memory_region(protection_domain& pd, std::span<std::byte> buffer, access rights,
                             error_code& ec) noexcept {
  if (!pd) {
    ec = errno_code(EBADF);
    return;
  }
  mr_ = ibv_reg_mr(pd.native_handle(), buffer.data(), buffer.size(), to_verbs(rights));
  ec = verbs_null_result(mr_);
  if (!ec)
    rights_ = rights;
  else if (ec != boost::system::errc::not_enough_memory)  // no retries here: ENOMEM stays the errno
    ec = detail::classify_registration_error(ec, buffer, rights);  // as reg_mr: which argument is at fault
}

memory_region::memory_region(protection_domain& pd, std::span<std::byte> buffer, access rights) {
  error_code ec;
  *this = memory_region(pd, buffer, rights, ec);
  if (ec) throw system_error(ec, describe(buffer, rights) + hint(ec));
}

memory_region::memory_region(memory_region&& other) noexcept
    : mr_(std::exchange(other.mr_, nullptr)), rights_(std::exchange(other.rights_, access::none)) {}

memory_region& memory_region::operator=(memory_region&& other) noexcept {
  if (this != &other) {
    error_code ignored;
    deregister(ignored);
    mr_ = std::exchange(other.mr_, nullptr);
    rights_ = std::exchange(other.rights_, access::none);
  }
  return *this;
}

memory_region::~memory_region() {
  error_code ec;
  deregister(ec);
  if (ec)
    std::fprintf(stderr,
                 "coverbs: ibv_dereg_mr failed (%s); the region stays registered: invalidate its "
                 "memory windows first\n",
                 ec.message().c_str());
}

bool memory_region::contains(const void* p, std::size_t n) const noexcept {
  if (!mr_) return false;
  const auto begin = reinterpret_cast<std::uintptr_t>(mr_->addr);
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  return at >= begin && n <= mr_->length && at - begin <= mr_->length - n;
}

void memory_region::deregister(error_code& ec) noexcept {
  ec = {};
  if (!mr_) return;
  // Providers differ (rxe answers EINVAL, others EBUSY, some let it happen): refuse clearly ourselves.
  if (detail::windows_bound_to(mr_) > 0) {
    ec = errc::region_has_bound_windows;
    return;
  }
  const ibv_mr* mr = mr_;
  ec = verbs_status_result(ibv_dereg_mr(mr_));
  if (!ec) {
    detail::forget_region(mr);
    mr_ = nullptr;
    rights_ = access::none;
  }
}

void memory_region::deregister() {
  error_code ec;
  deregister(ec);
  throw_on_error(ec, "ibv_dereg_mr");
}

ibv_mr* memory_region::release() noexcept {
  rights_ = access::none;
  return std::exchange(mr_, nullptr);
}

}  // namespace coverbs
