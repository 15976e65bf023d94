#include <coverbs/cm.hpp>

#include "io_owner.hpp"
#include "qp_impl.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/system_executor.hpp>

#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>

namespace coverbs {
namespace detail {

namespace asio = boost::asio;

/// A new rdma_cm event channel with its fd made O_NONBLOCK. @throws system_error
rdma_event_channel* new_event_channel() {
  rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
      const error_code cause = verbs_null_result(channel);
      // No RDMA at all on this host: say so the way device::open does (it points to the guest).
      error_code devices;
      (void)list_devices(devices);
      if (devices == errc::no_device)
        throw system_error(devices, "rdma_create_event_channel failed (" + cause.message() + ")");
      throw system_error(cause, "rdma_create_event_channel (is the rdma_ucm kernel module loaded?)");
    }
    const int flags = ::fcntl(channel->fd, F_GETFL);
    if (flags < 0 || ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      const error_code ec = errno_code(errno);
      rdma_destroy_event_channel(channel);
      throw system_error(ec, "fcntl(O_NONBLOCK) on the rdma_cm event channel");
    }
  return channel;
}

/// An rdma_cm event channel whose fd (O_NONBLOCK) an executor waits on.
struct cm_channel {
  rdma_event_channel* channel = nullptr;
  /// Waited on while events are expected; destroyed by `release_fd` at close or when the io_context shuts
  /// down (see io_owner.hpp), never later.
  std::optional<asio::posix::stream_descriptor> fd;

  explicit cm_channel(const asio::any_io_executor& ex) : cm_channel(ex, new_event_channel(), true) {}
  /// Takes over `raw` (from new_event_channel). When this throws, `raw` is destroyed only if `own_on_failure`.
  cm_channel(const asio::any_io_executor& ex, rdma_event_channel* raw, bool own_on_failure) : fd(std::in_place, ex) {
    try {
      fd->assign(raw->fd);
    } catch (...) {
      if (own_on_failure) rdma_destroy_event_channel(raw);
      throw;
    }
    channel = raw;
  }
  ~cm_channel() {
    release_fd();
    rdma_destroy_event_channel(channel);
  }
  /// Stops waiting and destroys the descriptor object (the channel keeps its fd).
  void release_fd() noexcept {
    if (!fd) return;
    error_code ignored;
    fd->cancel(ignored);
    fd->release();
    fd.reset();
  }
  cm_channel(const cm_channel&) = delete;
  cm_channel& operator=(const cm_channel&) = delete;
};

/// What coverbs keeps of an event: copied, then the event is acknowledged at once.
struct cm_event {
  rdma_cm_event_type type{};
  int status = 0;
  rdma_cm_id* id = nullptr;
  std::vector<std::byte> private_data;
  std::uint8_t responder_resources = 0, initiator_depth = 0;
};

namespace {

constexpr std::size_t max_request_private_data = 56;  // IB CM REQ
constexpr std::size_t max_reply_private_data = 196;   // IB CM REP

/// A decimal port; 0 only when `allow_zero`.
error_code parse_port(std::string_view s, std::uint16_t& port, bool allow_zero) {
  if (s.empty() || s.size() > 5) return errc::invalid_port_number;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return errc::invalid_port_number;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > 65535 || (v == 0 && !allow_zero)) return errc::invalid_port_number;
  port = static_cast<std::uint16_t>(v);
  return {};
}

/// A numeric IPv4 or IPv6 address ("[v6]" too) and a port as a socket address.
error_code parse_endpoint(std::string_view host, std::uint16_t port, sockaddr_storage& out) {
  std::string h(host);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (::inet_pton(AF_INET, h.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return {};
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (::inet_pton(AF_INET6, h.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return {};
  }
  return errc::invalid_address;
}

std::string endpoint_string(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (!sa) return {};
  if (sa->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return {};
}

/// Takes the next event; false when none is pending (`ec` empty) or the call failed (`ec` set).
bool next_event(rdma_event_channel* channel, cm_event& out, error_code& ec) {
  rdma_cm_event* ev = nullptr;
  ec = verbs_errno_result(rdma_get_cm_event(channel, &ev));
  if (ec) {
    if (ec == std::errc::resource_unavailable_try_again || ec == std::errc::operation_would_block) ec = {};
    return false;
  }
  out.type = ev->event;
  out.status = ev->status;
  out.id = ev->id;
  const rdma_conn_param& p = ev->param.conn;
  const auto* data = static_cast<const std::byte*>(p.private_data);
  out.private_data.assign(data, data ? data + p.private_data_len : data);
  out.responder_resources = p.responder_resources;
  out.initiator_depth = p.initiator_depth;
  rdma_ack_cm_event(ev);
  return true;
}

error_code current_error() noexcept {
  try {
    throw;
  } catch (const system_error& e) {
    return e.code();
  } catch (const std::bad_alloc&) {
    return errno_code(ENOMEM);
  } catch (...) {
    return make_error_code(errc::unspecified_verbs_failure);
  }
}

}  // namespace

/// A connect or accept in progress: its handler, and where it is (queued at a listener, or with its
/// connection).
struct pending_op {
  connection_handler handler;
  connection_options options;
  std::weak_ptr<connection_impl> conn;
  std::weak_ptr<listener_impl> listener;
  /// Handlers without an associated executor complete here: the listener's (accept) or the one given to
  /// async_connect.
  asio::any_io_executor io_ex;
  /// Where the connection is (to be) bound: async_connect's executor, or the accept's peer executor.
  asio::any_io_executor peer;
};

namespace {

/// Runs `h(args...)` on its associated executor: posted (from an initiating function or a cancellation,
/// never inline) or dispatched (from the loop). (Asio 1.81's append() re-wraps an any_completion_handler
/// endlessly, hence the explicit binding.)
/// The cancellation slot is cleared there too, on the handler's executor (the thread that may emit its
/// signal), not on the thread completing the operation.
template <class Handler, class... Args>
void deliver(Handler h, const asio::any_io_executor& io_ex, bool post, Args... args) {
  auto handler_ex = asio::get_associated_executor(h, io_ex);
  auto f = asio::bind_executor(std::move(handler_ex), [h = std::move(h), ... args = std::move(args)]() mutable {
    if (auto slot = h.get_cancellation_slot(); slot.is_connected()) slot.clear();
    std::move(h)(std::move(args)...);
  });
  if (post)
    asio::post(io_ex, std::move(f));
  else
    asio::dispatch(io_ex, std::move(f));
}

/// Completes `op` (once), on the handler's associated executor, else `op.io_ex`.
void complete(pending_op& op, error_code ec, connection c, bool post) {
  if (op.handler) deliver(std::move(op.handler), op.io_ex, post, ec, std::move(c));
}

void cancel_op(const std::weak_ptr<pending_op>& weak);

/// Installed in the handler's cancellation slot.
struct op_cancellation {
  std::weak_ptr<pending_op> op;
  void operator()(asio::cancellation_type type) const {
    if ((type & (asio::cancellation_type::terminal | asio::cancellation_type::partial |
                 asio::cancellation_type::total)) == asio::cancellation_type::none)
      return;
    cancel_op(std::weak_ptr<pending_op>(op));  // a copy: completing clears the slot, destroying *this
  }
};

void install_cancellation(const std::shared_ptr<pending_op>& op) {
  if (auto slot = op->handler.get_cancellation_slot(); slot.is_connected())
    slot.emplace<op_cancellation>(op_cancellation{op});
}

}  // namespace

class connection_impl : public std::enable_shared_from_this<connection_impl>, public io_owner {
public:
  enum class phase {
    idle,
    resolving_address,
    resolving_route,
    connecting,
    accepting,
    established,
    disconnecting,
    down
  };

  explicit connection_impl(const asio::any_io_executor& ex) : ex_(ex), timer_(std::in_place, ex) {
    enroll(asio::query(ex_, asio::execution::context));
  }

  /// The io_context is shutting down: its timer and descriptor objects go now, while the services exist.
  void on_context_shutdown() noexcept override {
    timer_.reset();
    if (channel_) channel_->release_fd();
  }
  ~connection_impl() { close(); }

  asio::any_io_executor ex_;
  std::unique_ptr<cm_channel> channel_;
  rdma_cm_id* id_ = nullptr;
  device device_;
  std::optional<protection_domain> own_pd_;
  std::optional<completion_queue> own_cq_;
  protection_domain* pd_ = nullptr;
  completion_queue* cq_ = nullptr;
  std::optional<queue_pair> qp_;
  std::vector<std::byte> peer_private_data_;
  error_code error_;
  phase phase_ = phase::idle;
  std::shared_ptr<pending_op> op_;  // connect / accept in progress
  disconnect_handler disconnect_;   // disconnect in progress
  std::optional<asio::steady_timer> timer_;  // reset only when the io_context shuts down
  connection_options options_;
  std::chrono::milliseconds route_timeout_{2000};
  bool waiting_ = false, closed_ = false;

  void wait() {
    if (waiting_ || closed_ || !channel_ || !channel_->fd) return;
    waiting_ = true;
    channel_->fd->async_wait(asio::posix::stream_descriptor::wait_read,
                            [self = shared_from_this()](const error_code& ec) {
                              self->waiting_ = false;
                              self->on_readable(ec);
                            });
  }

  void start_timer(std::chrono::milliseconds limit) {
    if (limit.count() <= 0 || !timer_) return;
    timer_->expires_after(limit);
    timer_->async_wait([weak = weak_from_this()](const error_code& ec) {
      auto self = weak.lock();
      if (!ec && self && self->op_) self->fail(asio::error::timed_out, false);
    });
  }

  /// Fails the pending connect/accept with `ec` and releases everything (the peer's CM sees a reject or
  /// a disconnect request when the cm_id is destroyed).
  void fail(error_code ec, bool post) {
    auto keep = shared_from_this();
    std::shared_ptr<pending_op> op = std::move(op_);
    close();
    if (op) complete(*op, ec, connection{}, post);
  }

  void on_readable(const error_code& ec) {
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

  void on_event(const cm_event& e) {
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

  /// An error event: fails a pending connect/accept, else takes an established connection down.
  void fail_or_drop(errc why) {
    if (op_) return fail(why, false);
    if (phase_ != phase::established && phase_ != phase::disconnecting) return;
    // The queue pair is not attached to the cm_id, so rdma_cm leaves it alone: flush it ourselves.
    if (!error_) error_ = why;
    if (qp_) qp_->impl()->to_error(error_);
    if (phase_ == phase::established && why == errc::connection_reset)
      rdma_disconnect(id_);  // answers the peer's disconnect request; nothing to do if it fails
    phase_ = phase::down;
    if (disconnect_) {
      deliver(std::move(disconnect_), ex_, false, error_code{});
    }
  }

  /// Protection domain, completion queue and queue pair on the cm_id's device; the queue pair in INIT.
  void setup_qp() {
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
    qp_.emplace(*pd_, *cq_, qo);
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = IBV_QPS_INIT;
    throw_on_error(verbs_errno_result(rdma_init_qp_attr(id_, &attr, &mask)), "rdma_init_qp_attr(INIT)");
    attr.qp_access_flags = static_cast<unsigned>(to_verbs(options_.qp.remote_access));
    qp_->modify(attr, mask | IBV_QP_ACCESS_FLAGS);
  }

  /// RTR and RTS with rdma_cm's attributes; `responder_resources` / `initiator_depth` >= 0 override them.
  void to_rtr_rts(int responder_resources, int initiator_depth) {
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = IBV_QPS_RTR;
    throw_on_error(verbs_errno_result(rdma_init_qp_attr(id_, &attr, &mask)), "rdma_init_qp_attr(RTR)");
    if (responder_resources >= 0) attr.max_dest_rd_atomic = static_cast<std::uint8_t>(responder_resources);
    // rdma_cm leaves the RNR NAK timer at code 0 (655 ms): a send that arrives before its receive is posted
    // would wait that long for its retry. The queue pair's options say how long instead.
    attr.min_rnr_timer = options_.qp.min_rnr_timer;
    mask |= IBV_QP_MIN_RNR_TIMER;
    qp_->modify(attr, mask);
    attr = ibv_qp_attr{};
    attr.qp_state = IBV_QPS_RTS;
    throw_on_error(verbs_errno_result(rdma_init_qp_attr(id_, &attr, &mask)), "rdma_init_qp_attr(RTS)");
    if (initiator_depth >= 0) attr.max_rd_atomic = static_cast<std::uint8_t>(initiator_depth);
    qp_->modify(attr, mask);
  }

  rdma_conn_param conn_param(std::uint8_t responder_resources, std::uint8_t initiator_depth) const {
    rdma_conn_param p{};
    p.private_data = options_.private_data.empty() ? nullptr : options_.private_data.data();
    p.private_data_len = static_cast<std::uint8_t>(options_.private_data.size());
    p.responder_resources = responder_resources;
    p.initiator_depth = initiator_depth;
    p.flow_control = 1;
    p.retry_count = options_.retry_count;
    p.rnr_retry_count = options_.rnr_retry_count;
    p.qp_num = qp_->qp_num();
    return p;
  }

  /// Active side, route resolved: send the connection request.
  void request() {
    constexpr auto most_resp = static_cast<std::uint8_t>(RDMA_MAX_RESP_RES);
    constexpr auto most_init = static_cast<std::uint8_t>(RDMA_MAX_INIT_DEPTH);
    rdma_conn_param p = conn_param(options_.responder_resources ? options_.responder_resources : most_resp,
                                   options_.initiator_depth ? options_.initiator_depth : most_init);
    throw_on_error(verbs_errno_result(rdma_connect(id_, &p)), "rdma_connect");
    phase_ = phase::connecting;
  }

  /// Passive side, on the connection's executor: take over the requester's cm_id (already moved to
  /// `raw`, its own event channel, by the listener), bring the queue pair to RTS, accept.
  void accept(const cm_event& e, rdma_event_channel* raw) {
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
    throw_on_error(verbs_errno_result(rdma_accept(id_, &p)), "rdma_accept");
    phase_ = phase::accepting;
    wait();
  }

  void established() {
    phase_ = phase::established;
    if (timer_) timer_->cancel();
    std::shared_ptr<pending_op> op = std::move(op_);
    if (op) complete(*op, {}, connection(shared_from_this()), false);
  }

  void close() noexcept {
    if (closed_) return;
    closed_ = true;
    if (timer_) timer_->cancel();
    if (channel_) channel_->release_fd();
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
};

/// A connection request on its way to the accept's peer executor. Dropped unrun (its loop destroyed), it
/// rejects the request.
struct handed_request {
  std::shared_ptr<pending_op> op;
  cm_event e;
  rdma_event_channel* raw = nullptr;

  handed_request(std::shared_ptr<pending_op> o, const cm_event& ev, rdma_event_channel* r)
      : op(std::move(o)), e(ev), raw(r) {}
  handed_request(handed_request&& o) noexcept : op(std::move(o.op)), e(std::move(o.e)), raw(std::exchange(o.raw, nullptr)) {}
  handed_request& operator=(handed_request&&) = delete;
  ~handed_request() {
    if (!raw) return;
    rdma_destroy_id(e.id);
    rdma_destroy_event_channel(raw);
  }

  void operator()() {
    auto conn = std::make_shared<connection_impl>(op->peer);
    conn->options_ = op->options;
    conn->op_ = op;
    op->conn = conn;
    try {
      conn->accept(e, std::exchange(raw, nullptr));
    } catch (...) {
      conn->fail(current_error(), false);
    }
  }
};

class listener_impl : public std::enable_shared_from_this<listener_impl>, public io_owner {
public:
  listener_impl(const asio::any_io_executor& ex, const listener_options& options) : ex_(ex), options_(options) {}
  ~listener_impl() { close(); }

  /// The io_context is shutting down: the channel's descriptor object goes now, while the services exist.
  void on_context_shutdown() noexcept override {
    if (channel_) channel_->release_fd();
  }
  /// Once the channel (and with it the descriptor) exists.
  void enroll_in_context() { enroll(asio::query(ex_, asio::execution::context)); }

  asio::any_io_executor ex_;
  listener_options options_;
  std::unique_ptr<cm_channel> channel_;
  rdma_cm_id* id_ = nullptr;
  device device_;
  std::deque<std::shared_ptr<pending_op>> accepts_;
  bool waiting_ = false, closed_ = false;

  /// Waits on the channel while an accept is pending; requests wait in the kernel's backlog otherwise.
  void wait() {
    if (waiting_ || closed_ || accepts_.empty() || !channel_ || !channel_->fd) return;
    waiting_ = true;
    channel_->fd->async_wait(asio::posix::stream_descriptor::wait_read,
                            [self = shared_from_this()](const error_code& ec) {
                              self->waiting_ = false;
                              self->on_readable(ec);
                            });
  }

  void on_readable(error_code ec) {
    if (closed_) return;
    cm_event e;
    while (!ec && !closed_ && !accepts_.empty() && next_event(channel_->channel, e, ec)) {
      if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST)
        on_request(e);
      else if (e.type == RDMA_CM_EVENT_DEVICE_REMOVAL)
        ec = errc::device_removed;
    }
    if (closed_) return;
    if (ec && ec != asio::error::operation_aborted) fail_all(ec, false);
    wait();
  }

  /// On the listener's executor: moves the request's cm_id to a new event channel of its own (here, so
  /// that nothing reads the listener's channel meanwhile: rdma_migrate_id(3)), then hands it to the
  /// accept's peer executor, which creates the connection and accepts. Until then events for the cm_id
  /// wait in the kernel on the new channel.
  void on_request(const cm_event& e) {
    std::shared_ptr<pending_op> op = std::move(accepts_.front());
    accepts_.pop_front();
    op->listener.reset();
    rdma_event_channel* raw = nullptr;
    try {
      raw = new_event_channel();
      throw_on_error(verbs_errno_result(rdma_migrate_id(e.id, raw)), "rdma_migrate_id");
    } catch (...) {
      rdma_destroy_id(e.id);  // not taken over: reject it here
      if (raw) rdma_destroy_event_channel(raw);
      return complete(*op, current_error(), connection{}, false);
    }
    handed_request job{op, e, raw};
    if (op->peer == ex_)
      job();
    else
      asio::post(op->peer, std::move(job));
  }

  void cancel(const std::shared_ptr<pending_op>& op) {
    auto it = std::find(accepts_.begin(), accepts_.end(), op);
    if (it == accepts_.end()) return;
    accepts_.erase(it);
    complete(*op, asio::error::operation_aborted, connection{}, true);
    if (accepts_.empty() && waiting_ && channel_->fd) {
      error_code ignored;
      channel_->fd->cancel(ignored);
    }
  }

  void fail_all(error_code ec, bool post) {
    while (!accepts_.empty()) {
      std::shared_ptr<pending_op> op = std::move(accepts_.front());
      accepts_.pop_front();
      complete(*op, ec, connection{}, post);
    }
  }

  void close() noexcept {
    if (closed_) return;
    closed_ = true;
    if (channel_) channel_->release_fd();
    fail_all(asio::error::operation_aborted, true);
    if (id_) rdma_destroy_id(id_);
    id_ = nullptr;
    channel_.reset();
  }
};

namespace {
/// Runs where the cancellation is emitted: the handler's executor, which for an accept is the
/// listener's. A connection may live on another executor (a loop_pool member): it is cancelled there.
void cancel_op(const std::weak_ptr<pending_op>& weak) {
  auto op = weak.lock();
  if (!op) return;
  if (auto l = op->listener.lock()) return l->cancel(op);  // still queued at the listener
  asio::dispatch(op->peer, [weak] {
    auto op = weak.lock();
    if (!op) return;
    if (auto c = op->conn.lock(); c && c->op_ == op) c->fail(asio::error::operation_aborted, true);
  });
}
}  // namespace

void start_connect(const asio::any_io_executor& ex, std::string_view host, std::string_view port,
                   const connect_options& options, connection_handler handler) {
  auto op = std::make_shared<pending_op>();
  op->handler.swap(handler);  // Asio 1.81: any_completion_handler's move assignment recurses endlessly
  std::uint16_t port_number = 0;
  sockaddr_storage dst{}, src{};
  error_code ec = parse_port(port, port_number, false);
  if (!ec) ec = parse_endpoint(host, port_number, dst);
  if (!ec && !options.source_address.empty()) ec = parse_endpoint(options.source_address, 0, src);
  if (!ec && options.private_data.size() > max_request_private_data) ec = errc::private_data_too_long;
  if (!ec && options.cq && options.cq->get_executor() != ex) ec = errc::executor_mismatch;
  op->io_ex = ex;
  op->peer = ex;
  if (ec) return complete(*op, ec, connection{}, true);

  auto c = std::make_shared<connection_impl>(ex);
  c->options_ = options;
  c->route_timeout_ = options.resolve_route_timeout;
  c->op_ = op;
  op->conn = c;
  install_cancellation(op);
  // The connection's state is touched only on its executor: from here on, when this is another thread.
  asio::dispatch(ex, [c, host = std::string(host), src, dst, timeout = options.resolve_address_timeout,
                      connect_timeout = options.connect_timeout, has_source = !options.source_address.empty()]() mutable {
  try {
    c->channel_ = std::make_unique<cm_channel>(c->ex_);
    throw_on_error(verbs_errno_result(rdma_create_id(c->channel_->channel, &c->id_, c.get(), RDMA_PS_TCP)),
                   "rdma_create_id");
    throw_on_error(verbs_errno_result(rdma_resolve_addr(c->id_, has_source ? reinterpret_cast<sockaddr*>(&src) : nullptr,
                                                       reinterpret_cast<sockaddr*>(&dst), static_cast<int>(timeout.count()))),
                   "rdma_resolve_addr(" + host + ")");
    c->phase_ = connection_impl::phase::resolving_address;
    c->wait();
    c->start_timer(connect_timeout);
  } catch (...) {
    c->fail(current_error(), true);
  }
  });
}

void start_accept(listener_impl& l, const asio::any_io_executor& peer, const connection_options& options,
                  connection_handler handler) {
  auto op = std::make_shared<pending_op>();
  op->handler.swap(handler);
  op->io_ex = l.ex_;
  op->peer = peer;
  if (l.closed_) return complete(*op, asio::error::bad_descriptor, connection{}, true);
  if (options.private_data.size() > max_reply_private_data)
    return complete(*op, errc::private_data_too_long, connection{}, true);
  if (options.cq && options.cq->get_executor() != peer) return complete(*op, errc::executor_mismatch, connection{}, true);
  op->options = options;
  op->listener = l.shared_from_this();
  install_cancellation(op);
  l.accepts_.push_back(op);
  l.wait();  // the wait's handler runs from the loop, never inside this function
}

void start_disconnect(connection_impl* c, disconnect_handler handler) {
  auto fail_now = [&](const asio::any_io_executor& ex, error_code ec) { deliver(std::move(handler), ex, true, ec); };
  if (!c || c->closed_) return fail_now(asio::system_executor(), errno_code(ENOTCONN));
  if (c->disconnect_) return fail_now(c->ex_, errno_code(EALREADY));
  if (c->phase_ != connection_impl::phase::established) return fail_now(c->ex_, {});
  if (!c->error_) c->error_ = errc::disconnected;
  if (c->qp_) c->qp_->impl()->to_error(c->error_);
  if (const error_code ec = verbs_errno_result(rdma_disconnect(c->id_)); ec && ec != std::errc::invalid_argument) {
    c->phase_ = connection_impl::phase::down;
    return fail_now(c->ex_, ec);
  }
  c->phase_ = connection_impl::phase::disconnecting;
  c->disconnect_.swap(handler);
  c->wait();
}

}  // namespace detail

// --- connection ---

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

connection::~connection() {
  if (impl_) impl_->close();
}

connection::executor_type connection::get_executor() const noexcept { return impl_->ex_; }
queue_pair& connection::qp() const noexcept { return *impl_->qp_; }
protection_domain& connection::pd() const noexcept { return *impl_->pd_; }
completion_queue& connection::cq() const noexcept { return *impl_->cq_; }
device& connection::get_device() const noexcept { return impl_->device_; }
std::span<const std::byte> connection::peer_private_data() const noexcept {
  return impl_ ? std::span<const std::byte>(impl_->peer_private_data_) : std::span<const std::byte>{};
}
error_code connection::error() const noexcept { return impl_ ? impl_->error_ : errno_code(ENOTCONN); }
rdma_cm_id* connection::native_handle() const noexcept { return impl_ ? impl_->id_ : nullptr; }
std::string connection::local_endpoint() const {
  return impl_ && impl_->id_ ? detail::endpoint_string(rdma_get_local_addr(impl_->id_)) : std::string();
}
std::string connection::remote_endpoint() const {
  return impl_ && impl_->id_ ? detail::endpoint_string(rdma_get_peer_addr(impl_->id_)) : std::string();
}

// --- listener ---

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
  throw_on_error(verbs_errno_result(rdma_bind_addr(impl_->id_, reinterpret_cast<sockaddr*>(&a))),
                 "rdma_bind_addr(" + where + ")");
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

}  // namespace coverbs
