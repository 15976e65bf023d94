// A multicast membership on its executor: joining (address, rdma_join_multicast, the group's handle,
// ibv_attach_mcast), its errors once joined, and leaving.

#include "cm/multicast_impl.hpp"

#include <coverbs/protection_domain.hpp>

#include "cm/completion.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>

#include <cerrno>
#include <cstdio>
#include <string>

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {

std::string hex(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

}  // namespace

void multicast_impl::on_event(const cm_event& e) {
  switch (e.type) {
  case RDMA_CM_EVENT_ADDR_RESOLVED:
    if (phase_ != phase::resolving_address) return;
    check_device("async_join_multicast");
    throw_on_error(verbs_errno_result(rdma_join_multicast(id_, reinterpret_cast<sockaddr*>(&group_), this)),
                   "rdma_join_multicast");
    phase_ = phase::joining;
    return;
  case RDMA_CM_EVENT_MULTICAST_JOIN: {
    if (phase_ != phase::joining || !e.ud) return;
    if (e.ud_qkey != qp_qkey_)
      throw system_error(make_error_code(errc::qkey_mismatch), "async_join_multicast: the group's Q_Key is " +
                                                                   hex(e.ud_qkey) + ", the queue pair's " +
                                                                   hex(qp_qkey_));
    ah_ = address_handle(*pd_, e.ah_attr);
    mgid_ = e.ah_attr.grh.dgid;
    mlid_ = e.ah_attr.dlid;
    qkey_ = e.ud_qkey;
    throw_on_error(verbs_status_result(ibv_attach_mcast(qp_, &mgid_, mlid_)), "ibv_attach_mcast");
    attached_ = true;
    phase_ = phase::joined;
    if (timer_) timer_->cancel();
    if (handler)
      deliver(std::move(handler), ex_, false, error_code{},
              cm_access::make_membership(std::static_pointer_cast<multicast_impl>(shared_from_this())));
    return;
  }
  case RDMA_CM_EVENT_ADDR_ERROR: return fail(errc::address_resolution_failed, false);
  case RDMA_CM_EVENT_MULTICAST_ERROR: return fail(errno_code(e.status < 0 ? -e.status : ENETRESET), false);
  case RDMA_CM_EVENT_DEVICE_REMOVAL: return fail(errc::device_removed, false);
  default: return;
  }
}

void multicast_impl::fail(error_code ec, bool post) {
  if (phase_ == phase::done) return;
  if (phase_ == phase::joined) {
    if (!error_) error_ = ec;
    return;
  }
  auto keep = shared_from_this();
  ec = named(ec, true);
  leave();
  if (handler) deliver(std::move(handler), ex_, post, ec, multicast_membership{});
}

void multicast_impl::leave() noexcept {
  if (phase_ == phase::done) return;
  if (attached_) {
    if (const error_code ec = verbs_status_result(ibv_detach_mcast(qp_, &mgid_, mlid_)))
      std::fprintf(stderr, "coverbs: ibv_detach_mcast failed (%s)\n", ec.message().c_str());
    attached_ = false;
  }
  if (id_ && (phase_ == phase::joining || phase_ == phase::joined))
    rdma_leave_multicast(id_, reinterpret_cast<sockaddr*>(&group_));  // rdma_destroy_id would leave too
  phase_ = phase::done;
  close();
  ah_ = address_handle();
}

void multicast_impl::cancel(const std::weak_ptr<multicast_impl>& weak) {
  auto op = weak.lock();
  if (!op) return;
  asio::dispatch(op->ex_, [weak] {
    if (auto op = weak.lock(); op && op->phase_ != phase::joined) op->fail(asio::error::operation_aborted, true);
  });
}

}  // namespace coverbs::detail
