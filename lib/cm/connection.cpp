// The public `connection`: its accessors over `connection_impl`, and `cm_access`, through which the library
// builds one.

#include <coverbs/connection.hpp>

#include "cm/address.hpp"
#include "cm/connection_impl.hpp"

#include <rdma/rdma_cma.h>

#include <cerrno>

namespace coverbs {

connection detail::cm_access::make_connection(std::shared_ptr<connection_impl> impl) noexcept {
  if (impl) impl->note_handed_out();
  return connection(std::move(impl));
}

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
    ex_ = std::move(other.ex_);
  }
  return *this;
}

connection::~connection() {
  if (impl_) impl_->close();
}

connection::executor_type connection::get_executor() const noexcept { return impl_ ? impl_->ex_ : ex_; }
queue_pair& connection::qp() const noexcept { return *impl_->qp_; }
protection_domain& connection::pd() const noexcept { return *impl_->pd_; }
completion_queue& connection::cq() const noexcept { return *impl_->cq_; }
device& connection::get_device() const noexcept { return impl_->device_; }
std::span<const std::byte> connection::peer_private_data() const noexcept {
  return impl_ ? std::span<const std::byte>(impl_->peer_private_data_) : std::span<const std::byte>{};
}
const std::shared_ptr<void>& connection::prepared() const noexcept {
  static const std::shared_ptr<void> none;
  return impl_ ? impl_->prepared_ : none;
}
error_code connection::error() const noexcept { return impl_ ? impl_->error_ : errno_code(ENOTCONN); }
rdma_cm_id* connection::native_handle() const noexcept { return impl_ ? impl_->id_ : nullptr; }
std::string connection::local_endpoint() const {
  return impl_ && impl_->id_ ? detail::endpoint_string(rdma_get_local_addr(impl_->id_)) : std::string();
}
std::string connection::remote_endpoint() const {
  return impl_ && impl_->id_ ? detail::endpoint_string(rdma_get_peer_addr(impl_->id_)) : std::string();
}

}  // namespace coverbs
