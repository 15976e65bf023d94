// A datagram listener's answers: each service ID resolution request gets the next queue pair number on its
// device and port (round robin), or a refusal, at once; its id is destroyed either way.

#include "cm/datagram_listener_impl.hpp"

#include "cm/address.hpp"
#include "core/readiness.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <rdma/rdma_cma.h>

namespace coverbs::detail {

namespace asio = boost::asio;

void datagram_listener_impl::describe_work(std::vector<work_holder>& out) const {
  if (!waiting_) return;
  const std::string where = id_ ? endpoint_string(rdma_get_local_addr(id_)) : std::string("?");
  out.push_back({"datagram_listener", "datagram_listener on " + where, 0,
                 "waiting for resolution requests (until it is destroyed or closed)"});
}

void datagram_listener_impl::on_context_shutdown() noexcept {
  if (channel_) channel_->release_fd();
}

void datagram_listener_impl::enroll_in_context() { enroll(asio::query(ex_, asio::execution::context)); }

void datagram_listener_impl::wait() {
  if (waiting_ || closed_ || error_ || !channel_ || !channel_->fd) return;
  waiting_ = true;
  channel_->fd->async_wait(asio::posix::stream_descriptor::wait_read,
                           [self = shared_from_this()](const error_code& ec) {
                             self->waiting_ = false;
                             self->on_readable(detail::readiness_result(ec));
                           });
}

void datagram_listener_impl::on_readable(error_code ec) {
  if (closed_ || ec == asio::error::operation_aborted) return;
  cm_event e;
  while (!ec && !closed_ && next_event(channel_->channel, e, ec)) {
    if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST)
      on_request(e);
    else if (e.type == RDMA_CM_EVENT_DEVICE_REMOVAL)
      ec = errc::device_removed;
  }
  if (closed_) return;
  if (ec) {
    error_ = ec;
    return;
  }
  wait();
}

void datagram_listener_impl::on_request(const cm_event& e) {
  const answer* chosen = nullptr;
  for (std::size_t i = 0; i < answers_.size() && !chosen; ++i) {
    const answer& a = answers_[(next_ + i) % answers_.size()];
    if (a.device == e.id->verbs->device && a.port == e.id->port_num) {
      chosen = &a;
      next_ = (next_ + i + 1) % answers_.size();
    }
  }
  bool answered = false;
  if (chosen) {
    rdma_conn_param p{};
    p.qp_num = chosen->qp_num;  // no queue pair on the id: librdmacm announces this number
    p.private_data = options_.private_data.empty() ? nullptr : options_.private_data.data();
    p.private_data_len = static_cast<std::uint8_t>(options_.private_data.size());
    answered = !verbs_errno_result(rdma_accept(e.id, &p));
  }
  if (!answered) rdma_reject(e.id, nullptr, 0);  // a SIDR REP with status "rejected"
  ++(answered ? stats_.answered : stats_.refused);
  rdma_destroy_id(e.id);
}

void datagram_listener_impl::close() noexcept {
  if (closed_) return;
  closed_ = true;
  if (channel_) channel_->release_fd();
  if (id_) rdma_destroy_id(id_);
  id_ = nullptr;
  channel_.reset();
}

}  // namespace coverbs::detail
