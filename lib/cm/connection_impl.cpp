// A connection's life on its executor: resolving, connecting or accepting, the queue pair's transitions
// driven by rdma_cm (rdma_init_qp_attr + ibv_modify_qp), established, and taken down by an error event or
// closed.

#include "cm/connection_impl.hpp"

#include "cm/address.hpp"
#include "cm/completion.hpp"
#include "core/metrics.hpp"
#include "core/readiness.hpp"
#include "core/work_phrase.hpp"
#include "dataplane/cq_impl.hpp"
#include "dataplane/qp_impl.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <algorithm>
#include <cerrno>
#include <string>

namespace coverbs::detail {

namespace asio = boost::asio;

connection_impl::connection_impl(const asio::any_io_executor& ex) : ex_(ex), timer_(std::in_place, ex) {
  enroll(asio::query(ex_, asio::execution::context));
}

void connection_impl::on_context_shutdown() noexcept {
  timer_.reset();
  if (channel_) channel_->release_fd();
}

void connection_impl::describe_work(std::vector<work_holder>& out) const {
  static constexpr const char* phases[] = {"idle",       "resolving the address", "resolving the route",
                                           "connecting", "accepting",             "established",
                                           "disconnecting", "down"};
  work_phrase p;
  p.add(op_ ? 1 : 0, "connect or accept in progress", "connects or accepts in progress");
  p.add(disconnect_ ? 1 : 0, "async_disconnect pending", "async_disconnect calls pending");
  if (p.empty() && !waiting_) return;
  std::string what = p.empty() ? "waiting for its rdma_cm events" : p.text();
  what += std::string(" (") + phases[static_cast<int>(phase_)] + ")";
  std::string name = "connection";
  if (id_) name += " " + endpoint_string(rdma_get_local_addr(id_)) + " -> " + endpoint_string(rdma_get_peer_addr(id_));
  out.push_back({"connection", name, p.count(), what});
}

void connection_impl::wait() {
  if (waiting_ || closed_ || !channel_ || !channel_->fd) return;
  waiting_ = true;
  channel_->fd->async_wait(asio::posix::stream_descriptor::wait_read,
                           [self = shared_from_this()](const error_code& ec) {
                             self->waiting_ = false;
                             self->on_readable(detail::readiness_result(ec));
                           });
}

void connection_impl::start_timer(std::chrono::milliseconds limit) {
  if (limit.count() <= 0 || !timer_) return;
  timer_->expires_after(limit);
  timer_->async_wait([weak = weak_from_this()](const error_code& ec) {
    auto self = weak.lock();
    if (!ec && self && self->op_) self->fail(asio::error::timed_out, false);
  });
}

void connection_impl::fail(error_code ec, bool post) {
  auto keep = shared_from_this();
  std::shared_ptr<setup_op> op = std::move(op_);
  // Resolving a loopback or wildcard address fails in many ways (ENODEV, EINVAL, ADDR_ERROR): name the cause.
  if (loopback_dst_ && id_ && ec != asio::error::operation_aborted &&
      (phase_ == phase::idle || phase_ == phase::resolving_address || phase_ == phase::resolving_route))
    ec = errc::loopback_address;
  close();
  if (op) op->failed(ec, post);
}

void connection_impl::check_cm(long rc, const std::string& what) const {
  error_code ec = verbs_errno_result(rc);
  if (passive_ && phase_ == phase::idle && ec == std::errc::invalid_argument) ec = errc::request_abandoned;
  throw_on_error(ec, what);
}

void connection_impl::on_readable(const error_code& ec) {
  if (closed_) return;
  if (ec) {
    if (op_) fail(ec, false);
    return;
  }
  cm_event e;
  error_code read_error;
  while (!closed_ && next_event(channel_->channel, e, read_error)) {
    try {
      on_event(e);
    } catch (...) {
      if (op_) fail(current_error(), false);
    }
  }
  if (closed_) return;
  if (read_error) {
    if (op_) fail(read_error, false);
    return;
  }
  if (op_ || phase_ == phase::established || phase_ == phase::disconnecting) wait();
}

void connection_impl::on_event(const cm_event& e) {
  if (e.id && e.id->context != this) return;  // not ours (cannot happen with one channel per connection)
  switch (e.type) {
  case RDMA_CM_EVENT_ADDR_RESOLVED:
    if (phase_ != phase::resolving_address) return;
    throw_on_error(verbs_errno_result(rdma_resolve_route(id_, static_cast<int>(route_timeout_.count()))),
                   "rdma_resolve_route");
    phase_ = phase::resolving_route;
    return;
  case RDMA_CM_EVENT_ROUTE_RESOLVED:
    if (phase_ != phase::resolving_route) return;
    setup_qp();
    request();
    return;
  case RDMA_CM_EVENT_CONNECT_RESPONSE:
    if (phase_ != phase::connecting) return;
    peer_private_data_ = e.private_data;
    to_rtr_rts(-1, -1);
    throw_on_error(verbs_errno_result(rdma_establish(id_)), "rdma_establish");
    return established();
  case RDMA_CM_EVENT_ESTABLISHED:
    if (phase_ == phase::accepting) return established();
    return;
  case RDMA_CM_EVENT_ADDR_ERROR: return fail_or_drop(errc::address_resolution_failed);
  case RDMA_CM_EVENT_ROUTE_ERROR: return fail_or_drop(errc::route_resolution_failed);
  case RDMA_CM_EVENT_REJECTED: return fail_or_drop(errc::connection_refused);
  case RDMA_CM_EVENT_UNREACHABLE: return fail_or_drop(errc::connection_unreachable);
  case RDMA_CM_EVENT_CONNECT_ERROR: return fail_or_drop(errc::connection_failed);
  case RDMA_CM_EVENT_DISCONNECTED: return fail_or_drop(errc::connection_reset);
  case RDMA_CM_EVENT_DEVICE_REMOVAL: return fail_or_drop(errc::device_removed);
  default: return;  // TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do
  }
}

void connection_impl::fail_or_drop(errc why) {
  if (op_) return fail(why, false);
  if (phase_ != phase::established && phase_ != phase::disconnecting) return;
  count_end(phase_ == phase::disconnecting, why != errc::connection_reset);
  // The queue pair is not attached to the cm_id, so rdma_cm leaves it alone: flush it ourselves.
  if (!error_) error_ = why;
  if (qp_) impl_of(*qp_)->to_error(error_);
  if (phase_ == phase::established && why == errc::connection_reset)
    rdma_disconnect(id_);  // answers the peer's disconnect request; nothing to do if it fails
  phase_ = phase::down;
  if (disconnect_) {
    deliver(std::move(disconnect_), ex_, false, error_code{});
  }
}

namespace {

// end_state_'s causes (bits 1-2), in the order of the metrics.
constexpr std::uint8_t end_by_peer = 1, end_locally = 2, end_on_error = 3;

void note_end(std::uint8_t cause) noexcept {
  if (!metrics_on()) return;
  note(cause == end_on_error ? metric::disconnected_on_error
       : cause == end_locally ? metric::disconnected_locally
                              : metric::disconnected_by_peer);
}

}  // namespace

void connection_impl::count_end(bool local, bool failed) noexcept {
  if (!failed && qp_) {
    const queue_pair_impl* q = impl_of(*qp_);
    // What moved the queue pair to the error state, when it is there: this side's and the peer's disconnect
    // (errc::disconnected, connection_reset) and a terminal cancellation (operation_aborted) are no failures;
    // a flush is the consequence of something else.
    const error_code& e = q->error_;
    failed = q->in_error() && e != errc::disconnected && e != errc::connection_reset &&
             e != asio::error::operation_aborted && e != wc_errc::wr_flush_err;
  }
  const std::uint8_t cause = failed ? end_on_error : local ? end_locally : end_by_peer;
  const std::uint8_t before = end_state_.fetch_or(static_cast<std::uint8_t>(cause << 1), std::memory_order_acq_rel);
  if ((before >> 1) == 0 && (before & 1)) note_end(cause);  // handed out, and this is its first end
}

void connection_impl::note_handed_out() noexcept {
  const std::uint8_t before = end_state_.fetch_or(1, std::memory_order_acq_rel);
  if (!(before & 1) && (before >> 1) != 0) note_end(static_cast<std::uint8_t>(before >> 1));  // ended in the backlog
}

void connection_impl::setup_qp() {
  device_ = device::adopt(id_->verbs);
  if (options_.pd || options_.cq) {
    if (!options_.pd || !options_.cq || !*options_.pd || !options_.cq->native_handle())
      throw system_error(errno_code(EINVAL), "connection_options: set both pd and cq (open), or neither");
    if (options_.pd->context()->device != id_->verbs->device ||
        options_.cq->native_handle()->context->device != id_->verbs->device)
      throw system_error(make_error_code(errc::device_mismatch),
                         "connection_options::pd/cq (rdma_cm chose " + device_.name() + ")");
    if (options_.cq->get_executor() != ex_)
      throw system_error(make_error_code(errc::executor_mismatch), "connection_options::cq");
    pd_ = options_.pd;
    cq_ = options_.cq;
  } else {
    own_pd_.emplace(device_);
    completion_queue_options co;
    co.depth = static_cast<int>(options_.qp.max_send_wr + options_.qp.max_recv_wr);
    own_cq_.emplace(ex_, device_, co);
    pd_ = &*own_pd_;
    cq_ = &*own_cq_;
  }
  queue_pair_options qo = options_.qp;
  qo.port = id_->port_num;
  const std::size_t reserved_before = impl_of(*cq_)->reserved_;
  qp_.emplace(*pd_, *cq_, qo);
  if (passive_ && options_.cq && !options_.prepare) {  // prepared receives may complete before it is established
    deferred_entries_ = impl_of(*cq_)->reserved_ - reserved_before;
    impl_of(*cq_)->unreserve(deferred_entries_);
  }
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = IBV_QPS_INIT;
  check_cm(rdma_init_qp_attr(id_, &attr, &mask), "rdma_init_qp_attr(INIT)");
  attr.qp_access_flags = static_cast<unsigned>(to_verbs(options_.qp.remote_access));
  qp_->modify(attr, mask | IBV_QP_ACCESS_FLAGS);
  if (options_.prepare) prepared_ = options_.prepare(*qp_, *pd_);
}

void connection_impl::to_rtr_rts(int responder_resources, int initiator_depth) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = IBV_QPS_RTR;
  check_cm(rdma_init_qp_attr(id_, &attr, &mask), "rdma_init_qp_attr(RTR)");
  if (responder_resources >= 0) attr.max_dest_rd_atomic = static_cast<std::uint8_t>(responder_resources);
  // rdma_cm leaves the RNR NAK timer at code 0 (655 ms): a send that arrives before its receive is posted
  // would wait that long for its retry. The queue pair's options say how long instead.
  attr.min_rnr_timer = options_.qp.min_rnr_timer;
  mask |= IBV_QP_MIN_RNR_TIMER;
  qp_->modify(attr, mask);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  check_cm(rdma_init_qp_attr(id_, &attr, &mask), "rdma_init_qp_attr(RTS)");
  if (initiator_depth >= 0) attr.max_rd_atomic = static_cast<std::uint8_t>(initiator_depth);
  // rdma_cm gives each side the retry counts the peer sent (IB CM REQ/REP): the passive side's queue pair
  // would retry as the requester asked, the active side's RNR retries as the listener asked. Each side's
  // own options govern its own sends instead.
  attr.retry_cnt = options_.retry_count;
  attr.rnr_retry = options_.rnr_retry_count;
  qp_->modify(attr, mask | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
}

rdma_conn_param connection_impl::conn_param(std::uint8_t responder_resources, std::uint8_t initiator_depth) const {
  rdma_conn_param p{};
  p.private_data = options_.private_data.empty() ? nullptr : options_.private_data.data();
  p.private_data_len = static_cast<std::uint8_t>(options_.private_data.size());
  p.responder_resources = responder_resources;
  p.initiator_depth = initiator_depth;
  p.flow_control = 1;
  p.retry_count = options_.retry_count;
  p.rnr_retry_count = options_.rnr_retry_count;
  p.qp_num = qp_->qp_num();
  p.srq = options_.qp.srq ? 1 : 0;  // the REQ/REP's SRQ bit (IBA 12.7.26)
  return p;
}

void connection_impl::request() {
  constexpr auto most_resp = static_cast<std::uint8_t>(RDMA_MAX_RESP_RES);
  constexpr auto most_init = static_cast<std::uint8_t>(RDMA_MAX_INIT_DEPTH);
  rdma_conn_param p = conn_param(options_.responder_resources ? options_.responder_resources : most_resp,
                                 options_.initiator_depth ? options_.initiator_depth : most_init);
  throw_on_error(verbs_errno_result(rdma_connect(id_, &p)), "rdma_connect");
  phase_ = phase::connecting;
}

void connection_impl::accept(const cm_event& e, rdma_event_channel* raw) {
  id_ = e.id;  // owned from here: close() destroys it, which rejects the request
  id_->context = this;
  try {
    channel_ = std::make_unique<cm_channel>(ex_, raw, false);
  } catch (...) {
    rdma_destroy_id(id_);  // before its channel
    id_ = nullptr;
    rdma_destroy_event_channel(raw);
    throw;
  }
  peer_private_data_ = e.private_data;
  setup_qp();
  ibv_device_attr attr{};
  throw_on_error(verbs_status_result(ibv_query_device(id_->verbs, &attr)), "ibv_query_device");
  const int own_resp = options_.responder_resources ? options_.responder_resources : attr.max_qp_rd_atom;
  const int own_init = options_.initiator_depth ? options_.initiator_depth : attr.max_qp_init_rd_atom;
  const auto responder_resources = static_cast<std::uint8_t>(std::min({own_resp, int{e.initiator_depth}, 255}));
  const auto initiator_depth = static_cast<std::uint8_t>(std::min({own_init, int{e.responder_resources}, 255}));
  to_rtr_rts(responder_resources, initiator_depth);
  rdma_conn_param p = conn_param(responder_resources, initiator_depth);
  check_cm(rdma_accept(id_, &p), "rdma_accept");
  phase_ = phase::accepting;
  wait();
  start_timer(op_ ? op_->establish_timeout() : std::chrono::milliseconds(0));  // a half-open peer is dropped then
}

void connection_impl::established() {
  if (deferred_entries_) {  // the handshake becomes a connection on the accept's queue: its entries now
    cq_impl& q = *impl_of(*cq_);
    if (!q.reserve(deferred_entries_))
      throw system_error(make_error_code(errc::cq_overcommitted),
                         "accept: the requester finished the handshake, but connection_options::cq (depth " +
                             std::to_string(q.depth_) + ", " + std::to_string(q.reserved_) +
                             " entries reserved) has no room for its queue pair (" + std::to_string(deferred_entries_) +
                             " entries); give each accept a deeper queue");
    deferred_entries_ = 0;
  }
  phase_ = phase::established;
  if (timer_) timer_->cancel();
  std::shared_ptr<setup_op> op = std::move(op_);
  if (op) op->established(shared_from_this());
}

void connection_impl::close() noexcept {
  if (closed_) return;
  closed_ = true;
  // Destroyed while established, or before its own disconnect finished: this side ended it.
  if (phase_ == phase::established || phase_ == phase::disconnecting) {
    count_end(true);
    phase_ = phase::down;
  }
  if (timer_) timer_->cancel();
  if (channel_) channel_->release_fd();
  if (qp_ && deferred_entries_) impl_of(*cq_)->reserved_ += deferred_entries_;  // the queue pair gives them back
  deferred_entries_ = 0;
  prepared_.reset();  // e.g. a message endpoint: closed while its queue pair and domain live
  qp_.reset();
  own_cq_.reset();
  own_pd_.reset();
  if (id_) rdma_destroy_id(id_);
  id_ = nullptr;
  channel_.reset();
  options_.lease.reset();  // a loop_pool member's load drops here
  if (disconnect_) {
    deliver(std::move(disconnect_), ex_, true, make_error_code(asio::error::operation_aborted));
  }
}
void drop(std::shared_ptr<connection_impl> c) {
  if (!c) return;
  const asio::any_io_executor ex = c->ex_;
  asio::dispatch(ex, [c = std::move(c)] { c->close(); });
}

}  // namespace coverbs::detail
