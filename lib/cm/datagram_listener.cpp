// The public `datagram_listener`: its checks of the queue pairs it answers with (Q_Key, device), binding and
// listening on a UDP-port-space id (cm/listen.hpp), and its accessors over `datagram_listener_impl`.

#include <coverbs/datagram_listener.hpp>

#include "cm/datagram_listener_impl.hpp"
#include "cm/event_channel.hpp"
#include "cm/listen.hpp"

#include <rdma/rdma_cma.h>

#include <netinet/in.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace coverbs {

namespace {

constexpr std::size_t max_sidr_reply_private_data = 136;  // IB CM SIDR REP

std::string hex(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

}  // namespace

datagram_listener::datagram_listener(const executor_type& ex, std::span<datagram_queue_pair* const> answer_with,
                                     std::string_view address, std::uint16_t port,
                                     const datagram_listener_options& options, int)
    : impl_(std::make_shared<detail::datagram_listener_impl>(ex, options)) {
  if (answer_with.empty())
    throw system_error(errno_code(EINVAL), "datagram_listener: give it at least one queue pair to answer with");
  if (options.private_data.size() > max_sidr_reply_private_data)
    throw system_error(make_error_code(errc::private_data_too_long),
                       "datagram_listener_options::private_data: " + std::to_string(options.private_data.size()) +
                           " bytes, a SIDR reply carries at most 136");
  for (const datagram_queue_pair* qp : answer_with) {
    if (!qp || !qp->native_handle())
      throw system_error(errno_code(EINVAL), "datagram_listener: a queue pair to answer with is null or empty");
    if (qp->qkey() != rdma_cm_udp_qkey)
      throw system_error(make_error_code(errc::qkey_mismatch),
                         "datagram_listener: queue pair " + std::to_string(qp->qp_num()) + " has Q_Key " +
                             hex(qp->qkey()) + ", rdma_cm announces " + hex(rdma_cm_udp_qkey));
    impl_->answers_.push_back({qp->qp_num(), qp->native_handle()->context->device, qp->port()});
  }
  detail::listen_endpoint at = detail::parse_listen_endpoint(address, port);
  impl_->channel_ = std::make_unique<detail::cm_channel>(ex);
  impl_->enroll_in_context();
  detail::listen_on(impl_->channel_->channel, impl_.get(), RDMA_PS_UDP, at, options.backlog, impl_->id_);
  if (impl_->id_->verbs) {
    impl_->device_ = device::adopt(impl_->id_->verbs);
    for (const auto& a : impl_->answers_)
      if (a.device != impl_->id_->verbs->device)
        throw system_error(make_error_code(errc::device_mismatch),
                           "datagram_listener(" + at.text + "): bound to " + impl_->device_.name() +
                               ", queue pair " + std::to_string(a.qp_num) + " is on " +
                               ibv_get_device_name(a.device));
  }
  impl_->wait();
}

datagram_listener& datagram_listener::operator=(datagram_listener&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

datagram_listener::~datagram_listener() {
  if (impl_) impl_->close();
}

datagram_listener::executor_type datagram_listener::get_executor() const noexcept { return impl_->ex_; }
std::uint16_t datagram_listener::local_port() const noexcept {
  return impl_ && impl_->id_ ? ntohs(rdma_get_src_port(impl_->id_)) : 0;
}
device& datagram_listener::get_device() const noexcept { return impl_->device_; }
rdma_cm_id* datagram_listener::native_handle() const noexcept { return impl_ ? impl_->id_ : nullptr; }
datagram_listener_stats datagram_listener::stats() const noexcept {
  return impl_ ? impl_->stats_ : datagram_listener_stats{};
}
error_code datagram_listener::error() const noexcept { return impl_ ? impl_->error_ : error_code{}; }

}  // namespace coverbs
