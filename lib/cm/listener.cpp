// The public `listener`: binding and listening (rdma_bind_addr, rdma_listen, with what to do when they fail),
// and its accessors over `listener_impl`.

#include <coverbs/listener.hpp>

#include "cm/address.hpp"
#include "cm/event_channel.hpp"
#include "cm/listener_impl.hpp"

#include <rdma/rdma_cma.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

namespace coverbs {

listener::listener(const executor_type& ex, std::string_view address, std::uint16_t port,
                   const listener_options& options)
    : impl_(std::make_shared<detail::listener_impl>(ex, options)) {
  const std::string where = std::string(address.empty() ? "0.0.0.0" : address) + ":" + std::to_string(port);
  sockaddr_storage a{};
  throw_on_error(detail::parse_endpoint(address.empty() ? "0.0.0.0" : address, port, a), "listener(" + where + ")");
  impl_->channel_ = std::make_unique<detail::cm_channel>(ex);
  impl_->enroll_in_context();
  throw_on_error(verbs_errno_result(rdma_create_id(impl_->channel_->channel, &impl_->id_, impl_.get(), RDMA_PS_TCP)),
                 "rdma_create_id");
  if (const error_code ec = verbs_errno_result(rdma_bind_addr(impl_->id_, reinterpret_cast<sockaddr*>(&a)))) {
    // The errno alone (EADDRNOTAVAIL, EADDRINUSE) leaves a user guessing; keep it, and say what to do.
    std::string what = "rdma_bind_addr(" + where + ")";
    if (ec == boost::system::errc::address_not_available)
      what += ": no RDMA device has this address; listen on the address of an RDMA-capable interface "
              "(`coverbs devices` lists each device's addresses) or on \"\" for all of them";
    else if (ec == boost::system::errc::address_in_use)
      what += ": another listener holds this port; choose another port, or 0 for one the system picks "
              "(listener::local_port() tells which)";
    throw system_error(ec, what);
  }
  throw_on_error(verbs_errno_result(rdma_listen(impl_->id_, options.backlog)), "rdma_listen(" + where + ")");
  if (impl_->id_->verbs) impl_->device_ = device::adopt(impl_->id_->verbs);
}

listener& listener::operator=(listener&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

listener::~listener() {
  if (impl_) impl_->close();
}

listener::executor_type listener::get_executor() const noexcept { return impl_->ex_; }
std::uint16_t listener::local_port() const noexcept {
  return impl_ && impl_->id_ ? ntohs(rdma_get_src_port(impl_->id_)) : 0;
}
device& listener::get_device() const noexcept { return impl_->device_; }
rdma_cm_id* listener::native_handle() const noexcept { return impl_ ? impl_->id_ : nullptr; }
const connection_options& listener::options_connection() const noexcept { return impl_->options_.connection; }
listener_stats listener::stats() const noexcept {
  if (!impl_) return {};
  listener_stats s = impl_->stats_;
  s.handshakes = impl_->handshakes_.size();
  s.ready = impl_->ready_.size();
  return s;
}

}  // namespace coverbs
