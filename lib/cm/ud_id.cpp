// A UDP-port-space id on its executor: starting address resolution, the operation's time limit, reading its
// events.

#include "cm/ud_id.hpp"

#include <coverbs/protection_domain.hpp>

#include "cm/address.hpp"
#include "cm/completion.hpp"
#include "core/readiness.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <string>

namespace coverbs::detail {

namespace asio = boost::asio;

ud_id::ud_id(const asio::any_io_executor& ex) : ex_(ex), timer_(std::in_place, ex) {
  enroll(asio::query(ex_, asio::execution::context));
}

void ud_id::describe_work(std::vector<work_holder>& out) const {
  if (!waiting_) return;
  const std::string peer = id_ ? endpoint_string(rdma_get_peer_addr(id_)) : std::string("?");
  out.push_back({"datagram_resolve", "rdma_cm UDP id for " + peer, 1,
                 "waiting for its rdma_cm events (a datagram peer's resolution, or a multicast membership)"});
}

void ud_id::on_context_shutdown() noexcept {
  timer_.reset();
  if (channel_) channel_->release_fd();
}

void ud_id::start(sockaddr_storage& dst, sockaddr_storage* src, std::chrono::milliseconds address_timeout,
                  std::chrono::milliseconds limit) {
  channel_ = std::make_unique<cm_channel>(ex_);
  throw_on_error(verbs_errno_result(rdma_create_id(channel_->channel, &id_, this, RDMA_PS_UDP)),
                 "rdma_create_id(RDMA_PS_UDP)");
  throw_on_error(verbs_errno_result(rdma_resolve_addr(id_, reinterpret_cast<sockaddr*>(src),
                                                      reinterpret_cast<sockaddr*>(&dst),
                                                      static_cast<int>(address_timeout.count()))),
                 "rdma_resolve_addr");
  wait();
  if (limit.count() > 0 && timer_) {
    timer_->expires_after(limit);
    timer_->async_wait([weak = weak_from_this()](const error_code& ec) {
      if (auto self = weak.lock(); !ec && self && self->expecting()) self->fail(asio::error::timed_out, false);
    });
  }
}

void ud_id::wait() {
  if (waiting_ || !expecting() || !channel_ || !channel_->fd) return;
  waiting_ = true;
  channel_->fd->async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](error_code ec) {
    ec = detail::readiness_result(ec);
    self->waiting_ = false;
    cm_event e;
    while (!ec && self->expecting() && next_event(self->channel_->channel, e, ec)) {
      try {
        self->on_event(e);
      } catch (...) {
        self->fail(current_error(), false);
      }
    }
    if (ec && self->expecting()) self->fail(ec, false);
    self->wait();
  });
}

error_code ud_id::named(error_code ec, bool resolving) const noexcept {
  if (ec && loopback_dst_ && resolving && ec != asio::error::operation_aborted) return errc::loopback_address;
  return ec;
}

void ud_id::check_device(const char* operation) const {
  if (id_->verbs->device == pd_->context()->device && id_->port_num == port_) return;
  throw system_error(make_error_code(errc::device_mismatch),
                     std::string(operation) + ": rdma_cm reaches the address through " +
                         ibv_get_device_name(id_->verbs->device) + " port " + std::to_string(id_->port_num) +
                         ", the queue pair is on " + ibv_get_device_name(pd_->context()->device) + " port " +
                         std::to_string(port_));
}

void ud_id::close() noexcept {
  if (timer_) timer_->cancel();
  if (channel_) channel_->release_fd();
  if (id_) rdma_destroy_id(id_);
  id_ = nullptr;
  channel_.reset();
}

}  // namespace coverbs::detail
