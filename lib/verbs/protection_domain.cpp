#include <coverbs/device.hpp>
#include <coverbs/protection_domain.hpp>

#include <cstdio>
#include <utility>

namespace coverbs {

protection_domain::protection_domain(device& dev, error_code& ec) noexcept {
  if (!dev) {
    ec = errno_code(EBADF);
    return;
  }
  pd_ = ibv_alloc_pd(dev.native_handle());
  ec = verbs_null_result(pd_);
}

protection_domain::protection_domain(device& dev) {
  error_code ec;
  *this = protection_domain(dev, ec);
  throw_on_error(ec, "ibv_alloc_pd(" + dev.name() + ")");
}

protection_domain::protection_domain(protection_domain&& other) noexcept : pd_(std::exchange(other.pd_, nullptr)) {}

protection_domain& protection_domain::operator=(protection_domain&& other) noexcept {
  if (this != &other) {
    error_code ignored;
    close(ignored);
    pd_ = std::exchange(other.pd_, nullptr);
  }
  return *this;
}

protection_domain::~protection_domain() {
  error_code ec;
  close(ec);
  if (ec)
    std::fprintf(stderr,
                 "coverbs: ibv_dealloc_pd failed (%s); the protection domain is leaked: destroy its "
                 "regions, windows and queue pairs first\n",
                 ec.message().c_str());
}

void protection_domain::close(error_code& ec) noexcept {
  ec = {};
  if (!pd_) return;
  ec = verbs_status_result(ibv_dealloc_pd(pd_));
  if (!ec) pd_ = nullptr;
}

void protection_domain::close() {
  error_code ec;
  close(ec);
  throw_on_error(ec, "ibv_dealloc_pd");
}

}  // namespace coverbs
