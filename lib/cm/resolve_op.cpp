// A datagram peer's resolution: address, route, service ID (SIDR), the address handle.

#include "cm/resolve_op.hpp"

#include <coverbs/protection_domain.hpp>

#include "cm/completion.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>

#include <string>

namespace coverbs::detail {

namespace asio = boost::asio;

static_assert(rdma_cm_udp_qkey == RDMA_UDP_QKEY, "coverbs::rdma_cm_udp_qkey is rdma_cm's RDMA_UDP_QKEY");

void resolve_op::on_event(const cm_event& e) {
  switch (e.type) {
  case RDMA_CM_EVENT_ADDR_RESOLVED:
    if (phase_ != phase::resolving_address) return;
    throw_on_error(
        verbs_errno_result(rdma_resolve_route(id_, static_cast<int>(options_.resolve_route_timeout.count()))),
        "rdma_resolve_route");
    phase_ = phase::resolving_route;
    return;
  case RDMA_CM_EVENT_ROUTE_RESOLVED: {
    if (phase_ != phase::resolving_route) return;
    // The address handle is made in the sending queue pair's domain, and a UD send leaves from its port.
    check_device("async_resolve_datagram_peer");
    rdma_conn_param p{};
    p.private_data = options_.private_data.empty() ? nullptr : options_.private_data.data();
    p.private_data_len = static_cast<std::uint8_t>(options_.private_data.size());
    throw_on_error(verbs_errno_result(rdma_connect(id_, &p)), "rdma_connect(service ID resolution)");
    phase_ = phase::resolving_service;
    return;
  }
  case RDMA_CM_EVENT_ESTABLISHED: {
    if (phase_ != phase::resolving_service || !e.ud) return;
    datagram_peer peer;
    peer.ah = address_handle(*pd_, e.ah_attr);
    peer.qp_num = e.ud_qp_num;
    peer.qkey = e.ud_qkey;
    peer.private_data = e.private_data;
    return complete({}, std::move(peer), false);
  }
  case RDMA_CM_EVENT_ADDR_ERROR: return fail(errc::address_resolution_failed, false);
  case RDMA_CM_EVENT_ROUTE_ERROR: return fail(errc::route_resolution_failed, false);
  // A reply with a status (IBA 12.11.2: 1, no such service ID: nobody serves the port; 2, rejected; 3, no
  // queue pair) or none at all (-ETIMEDOUT: the request's retries ran out).
  case RDMA_CM_EVENT_UNREACHABLE:
    return fail(e.status > 0 ? errc::connection_refused : errc::connection_unreachable, false);
  case RDMA_CM_EVENT_REJECTED: return fail(errc::connection_refused, false);
  case RDMA_CM_EVENT_CONNECT_ERROR: return fail(errc::connection_failed, false);
  case RDMA_CM_EVENT_DEVICE_REMOVAL: return fail(errc::device_removed, false);
  default: return;
  }
}

void resolve_op::complete(error_code ec, datagram_peer peer, bool post) {
  if (phase_ == phase::done) return;
  auto keep = shared_from_this();
  ec = named(ec, phase_ != phase::resolving_service);
  phase_ = phase::done;
  close();
  if (handler) deliver(std::move(handler), ex_, post, ec, std::move(peer));
}

void resolve_op::cancel(const std::weak_ptr<resolve_op>& weak) {
  auto op = weak.lock();
  if (!op) return;
  asio::dispatch(op->ex_, [weak] {
    if (auto op = weak.lock()) op->fail(asio::error::operation_aborted, true);
  });
}

}  // namespace coverbs::detail
