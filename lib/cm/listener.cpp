// The public `listener`: binding and listening (cm/listen.hpp), and its accessors over `listener_impl`.

#include <coverbs/listener.hpp>

#include "cm/event_channel.hpp"
#include "cm/listen.hpp"
#include "cm/listener_impl.hpp"

#include <rdma/rdma_cma.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

namespace coverbs {

listener::listener(const executor_type& ex, std::string_view address, std::uint16_t port,
                   const listener_options& options)
    : impl_(std::make_shared<detail::listener_impl>(ex, options)) {
  detail::listen_endpoint at = detail::parse_listen_endpoint(address, port);
  impl_->channel_ = std::make_unique<detail::cm_channel>(ex);
  impl_->enroll_in_context();
  detail::listen_on(impl_->channel_->channel, impl_.get(), RDMA_PS_TCP, at, options.backlog, impl_->id_);
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
