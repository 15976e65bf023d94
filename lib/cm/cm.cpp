#include <coverbs/cm.hpp>

#include "dataplane/cq_impl.hpp"
#include "core/io_owner.hpp"
#include "dataplane/qp_impl.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/execution/bad_executor.hpp>

#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <string>
#include <optional>
#include <tuple>
#include <utility>

namespace coverbs {
namespace detail {

namespace asio = boost::asio;

/// A new rdma_cm event channel with its fd made O_NONBLOCK. @throws system_error
rdma_event_channel* new_event_channel() {
  rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
      const error_code cause = verbs_null_result(channel);
      // Out of file descriptors: say so first. Listing the devices would fail the same way and call it
      // "no RDMA device", hiding the cause.
      if (cause == boost::system::errc::too_many_files_open ||
          cause == boost::system::errc::too_many_files_open_in_system) {
        rlimit limit{};
        const std::string soft = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                                     ? std::to_string(limit.rlim_cur)
                                     : std::string("?");
        throw system_error(cause, "rdma_create_event_channel: no file descriptor left (RLIMIT_NOFILE soft limit " +
                                      soft + "); every connection and listener holds one or two: raise the limit "
                                             "(ulimit -n, or setrlimit(RLIMIT_NOFILE) up to the hard limit)");
      }
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

/// A numeric IPv4 or IPv6 address ("[v6]" too; "v6%interface" for a link-local one) and a port as a socket
/// address.
error_code parse_endpoint(std::string_view host, std::uint16_t port, sockaddr_storage& out) {
  std::string h(host);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::string scope;
  if (const auto at = h.find('%'); at != std::string::npos) {
    scope = h.substr(at + 1);
    h.resize(at);
  }
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (scope.empty() && ::inet_pton(AF_INET, h.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return {};
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (::inet_pton(AF_INET6, h.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    if (!scope.empty()) {  // an interface name, or its index
      unsigned index = ::if_nametoindex(scope.c_str());
      if (index == 0 && std::from_chars(scope.data(), scope.data() + scope.size(), index).ptr != scope.data() + scope.size())
        index = 0;
      if (index == 0) return errc::invalid_address;
      v6->sin6_scope_id = index;
    }
    // rdma_bind_addr / rdma_resolve_addr answer a bare EINVAL for a link-local address without one.
    if (IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr) && v6->sin6_scope_id == 0) return errc::link_local_needs_scope;
    return {};
  }
  return errc::invalid_address;
}

/// A loopback or wildcard address: rdma_cm reaches it only on devices that resolve it themselves (InfiniBand).
bool loopback_or_wildcard(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const std::uint32_t v4 = ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr);
    return v4 == INADDR_ANY || (v4 >> 24) == 127;
  }
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&v6))
    return v6.s6_addr[12] == 127 || (v6.s6_addr[12] | v6.s6_addr[13] | v6.s6_addr[14] | v6.s6_addr[15]) == 0;
  return IN6_IS_ADDR_LOOPBACK(&v6) || IN6_IS_ADDR_UNSPECIFIED(&v6);
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

  // A listener's handshake (no handler): one request being accepted, with the options of `owner`.
  bool handshake = false;
  /// The listener a handshake reports to when it ends.
  std::weak_ptr<listener_impl> home;
  /// The accept whose options made the queue pair; null once that accept completed and no other pending one
  /// has the same options. Listener's executor only.
  std::shared_ptr<pending_op> owner;
  std::chrono::milliseconds establish_timeout{0};
  /// Of an accept: its handshakes in progress. Listener's executor only.
  std::size_t handshakes = 0;
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

/// Completes `op` (once), on the handler's associated executor, else `op.io_ex`. A failure's empty
/// connection is bound to the executor the connection would have had.
void complete(pending_op& op, error_code ec, connection c, bool post) {
  if (!c) c = connection(op.peer);
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

/// A handshake ended: established (`c` set) or failed (`ec`). Runs the listener's side on its executor.
void report_handshake(std::shared_ptr<pending_op> h, error_code ec, std::shared_ptr<connection_impl> c);

class connection_impl final : public std::enable_shared_from_this<connection_impl>, public io_owner {
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
  bool passive_ = false;       // accepted by a listener
  bool loopback_dst_ = false;  // connecting to a loopback or wildcard address
  /// A listener's handshake on the accept's own completion queue (`options.cq`): the entries its queue pair
  /// reserved there, given back until the requester finished the handshake. Several handshakes may run on one
  /// accept's options (half-open peers, see listener::async_accept) though only one can become its
  /// connection; nothing completes on a queue pair nobody can post to, so only an established one holds entries.
  std::size_t deferred_entries_ = 0;

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
    // Resolving a loopback or wildcard address fails in many ways (ENODEV, EINVAL, ADDR_ERROR): name the cause.
    if (loopback_dst_ && id_ && ec != asio::error::operation_aborted &&
        (phase_ == phase::idle || phase_ == phase::resolving_address || phase_ == phase::resolving_route))
      ec = errc::loopback_address;
    close();
    if (!op) return;
    if (op->handshake) return report_handshake(std::move(op), ec, nullptr);
    complete(*op, ec, connection{}, post);
  }

  /// An rdma_* call on the cm_id (-1 and errno). While a listener accepts a request (passive, not yet
  /// accepted), EINVAL means the request is no longer there to accept: rdma_cm drops the events of a request
  /// not yet handed to the user, so a requester that gave up shows only as this.
  void check_cm(long rc, const std::string& what) const {
    error_code ec = verbs_errno_result(rc);
    if (passive_ && phase_ == phase::idle && ec == std::errc::invalid_argument) ec = errc::request_abandoned;
    throw_on_error(ec, what);
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
    const std::size_t reserved_before = cq_->impl().reserved_;
    qp_.emplace(*pd_, *cq_, qo);
    if (passive_ && options_.cq) {
      deferred_entries_ = cq_->impl().reserved_ - reserved_before;
      cq_->impl().unreserve(deferred_entries_);
    }
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = IBV_QPS_INIT;
    check_cm(rdma_init_qp_attr(id_, &attr, &mask), "rdma_init_qp_attr(INIT)");
    attr.qp_access_flags = static_cast<unsigned>(to_verbs(options_.qp.remote_access));
    qp_->modify(attr, mask | IBV_QP_ACCESS_FLAGS);
  }

  /// RTR and RTS with rdma_cm's attributes; `responder_resources` / `initiator_depth` >= 0 override them.
  void to_rtr_rts(int responder_resources, int initiator_depth) {
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
    p.srq = options_.qp.srq ? 1 : 0;  // the REQ/REP's SRQ bit (IBA 12.7.26)
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
    check_cm(rdma_accept(id_, &p), "rdma_accept");
    phase_ = phase::accepting;
    wait();
    start_timer(op_ ? op_->establish_timeout : std::chrono::milliseconds(0));  // a half-open peer is dropped then
  }

  void established() {
    if (deferred_entries_) {  // the handshake becomes a connection on the accept's queue: its entries now
      if (!cq_->impl().reserve(deferred_entries_))
        throw system_error(make_error_code(errc::cq_overcommitted),
                           "accept: the requester finished the handshake, but connection_options::cq (depth " +
                               std::to_string(cq_->impl().depth_) + ", " + std::to_string(cq_->impl().reserved_) +
                               " entries reserved) has no room for its queue pair (" +
                               std::to_string(deferred_entries_) + " entries); give each accept a deeper queue");
      deferred_entries_ = 0;
    }
    phase_ = phase::established;
    if (timer_) timer_->cancel();
    std::shared_ptr<pending_op> op = std::move(op_);
    if (!op) return;
    if (op->handshake) return report_handshake(std::move(op), {}, shared_from_this());
    complete(*op, {}, connection(shared_from_this()), false);
  }

  void close() noexcept {
    if (closed_) return;
    closed_ = true;
    if (timer_) timer_->cancel();
    if (channel_) channel_->release_fd();
    if (qp_ && deferred_entries_) cq_->impl().reserved_ += deferred_entries_;  // the queue pair gives them back
    deferred_entries_ = 0;
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
    conn->passive_ = true;
    conn->op_ = op;
    op->conn = conn;
    try {
      conn->accept(e, std::exchange(raw, nullptr));
    } catch (...) {
      conn->fail(current_error(), false);
    }
  }
};

namespace {

/// Whether a connection handshaken for accept `a` may complete accept `b`: same peer executor, resources and
/// connection parameters (the lease aside).
bool same_options(const pending_op& a, const pending_op& b) {
  const connection_options& x = a.options;
  const connection_options& y = b.options;
  const auto qp = [](const queue_pair_options& q) {
    return std::tie(q.max_send_wr, q.max_recv_wr, q.max_send_sge, q.max_recv_sge, q.max_inline_data, q.min_rnr_timer,
                    q.remote_access);
  };
  return a.peer == b.peer && x.pd == y.pd && x.cq == y.cq && x.private_data == y.private_data &&
         x.responder_resources == y.responder_resources && x.initiator_depth == y.initiator_depth &&
         x.retry_count == y.retry_count && x.rnr_retry_count == y.rnr_retry_count && qp(x.qp) == qp(y.qp);
}

/// The requester gave up on the handshake (or never existed any more): not this side's failure.
bool peer_gave_up(const error_code& ec) {
  return ec == errc::request_abandoned || ec == errc::connection_refused || ec == errc::connection_failed ||
         ec == errc::connection_unreachable || ec == errc::connection_reset;
}

/// Closes `c` on its own executor (its cm_id's destruction rejects or disconnects the peer).
void drop(std::shared_ptr<connection_impl> c) {
  if (!c) return;
  const asio::any_io_executor ex = c->ex_;
  asio::dispatch(ex, [c = std::move(c)] { c->close(); });
}

/// Ends handshake `h` on its connection's executor (after the request was handed there).
void end_handshake(const std::shared_ptr<pending_op>& h) {
  asio::dispatch(h->peer, [weak = std::weak_ptr<pending_op>(h)] {
    auto h = weak.lock();
    if (!h) return;
    if (auto c = h->conn.lock(); c && c->op_ == h) c->fail(asio::error::operation_aborted, true);
  });
}

}  // namespace

/// A listening cm_id and its accepts. Requests are taken while an accept is pending, and each is handshaken
/// on its own (`pending_op::handshake`), so a requester that never finishes holds nothing but its handshake;
/// every handshake reports back here (`on_handshake`) and an established one completes an accept.
class listener_impl final : public std::enable_shared_from_this<listener_impl>, public io_owner {
public:
  listener_impl(const asio::any_io_executor& ex, const listener_options& options) : ex_(ex), options_(options) {}
  ~listener_impl() { close(); }

  /// The io_context is shutting down: the channel's descriptor and the timer go now, while the services exist.
  void on_context_shutdown() noexcept override {
    if (channel_) channel_->release_fd();
    grace_timer_.reset();
  }
  /// Once the channel (and with it the descriptor) exists.
  void enroll_in_context() { enroll(asio::query(ex_, asio::execution::context)); }

  /// How long a request waits in the backlog while every pending accept is mid-handshake before it is
  /// handshaken alongside (a well-behaved requester finishes well within it; a half-open one never does).
  static constexpr std::chrono::milliseconds grace{2000};
  /// Once overdue, how long after one request is taken alongside before the next is: a well-behaved requester
  /// finishes within it (its ready-to-use is one round trip away) and completes the accept, so the next
  /// request gets a free accept of its own instead of racing it for one accept's resources (the loser would be
  /// dropped, `listener_stats::dropped`); a half-open one costs the backlog no more than this.
  static constexpr std::chrono::milliseconds alongside_spacing{250};

  asio::any_io_executor ex_;
  listener_options options_;
  std::unique_ptr<cm_channel> channel_;
  rdma_cm_id* id_ = nullptr;
  device device_;
  std::deque<std::shared_ptr<pending_op>> accepts_;      // pending accepts, oldest first
  std::vector<std::shared_ptr<pending_op>> handshakes_;  // in progress
  /// Established connections no pending accept could take, with the handshake that made them.
  std::deque<std::pair<std::shared_ptr<pending_op>, std::shared_ptr<connection_impl>>> ready_;
  listener_stats stats_;
  std::optional<asio::steady_timer> grace_timer_{std::in_place, ex_};  // reset only when the io_context shuts down
  bool waiting_ = false, closed_ = false;
  bool grace_armed_ = false;
  /// Every pending accept has been mid-handshake for `grace`: requests are taken alongside until one completes.
  bool overdue_ = false;
  std::chrono::steady_clock::time_point last_alongside_{};  ///< when a request was last taken alongside
  std::uint64_t accepts_completed_ = 0;  ///< for the grace timer: an accept completed since it was armed

  std::size_t most_handshakes() const noexcept { return static_cast<std::size_t>(std::max(options_.backlog, 1)); }
  bool free_accept() const noexcept {
    return std::any_of(accepts_.begin(), accepts_.end(), [](const auto& a) { return a->handshakes == 0; });
  }
  /// Requests are taken while an accept is pending with no handshake in progress (or all have been busy for
  /// `grace`, and the last one taken alongside had `alongside_spacing` to finish) and fewer than `backlog`
  /// handshakes run; otherwise they wait in the kernel's backlog.
  bool taking() const noexcept {
    return !closed_ && !accepts_.empty() && handshakes_.size() < most_handshakes() &&
           (free_accept() || (overdue_ && std::chrono::steady_clock::now() - last_alongside_ >= alongside_spacing));
  }

  /// Every pending accept is mid-handshake: after `grace` requests are taken alongside, so that peers which
  /// never finish (half-open) hold the listener no longer than that. Once overdue: wakes when the next
  /// request may be taken alongside.
  void arm_grace() {
    if (grace_armed_ || closed_ || accepts_.empty() || free_accept() || !grace_timer_) return;
    if (overdue_ && handshakes_.size() >= most_handshakes()) return;  // a handshake that ends calls wait()
    grace_armed_ = true;
    if (overdue_)
      grace_timer_->expires_at(last_alongside_ + alongside_spacing);
    else
      grace_timer_->expires_after(grace);
    grace_timer_->async_wait([weak = weak_from_this(), round = accepts_completed_](const error_code& ec) {
      auto self = weak.lock();
      if (!self) return;
      self->grace_armed_ = false;
      // An accept completed since (its cancel may come too late for a timer that had expired): a new grace.
      if (ec || self->closed_ || self->accepts_.empty() || self->free_accept() || round != self->accepts_completed_)
        return self->wait();
      self->overdue_ = true;
      self->wait();
    });
  }

  void wait() {
    if (!taking()) return arm_grace();
    if (waiting_ || !channel_ || !channel_->fd) return;
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
    while (!ec && taking() && next_event(channel_->channel, e, ec)) {
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
  /// that nothing reads the listener's channel meanwhile: rdma_migrate_id(3)), then hands it, as a handshake
  /// with the options of a pending accept, to that accept's peer executor, which creates the connection and
  /// accepts. Until then events for the cm_id wait in the kernel on the new channel.
  void on_request(const cm_event& e) {
    // The oldest accept without a handshake in progress, else the oldest.
    const auto free = std::find_if(accepts_.begin(), accepts_.end(), [](const auto& a) { return a->handshakes == 0; });
    const std::shared_ptr<pending_op> owner = free != accepts_.end() ? *free : accepts_.front();
    if (free == accepts_.end()) last_alongside_ = std::chrono::steady_clock::now();
    rdma_event_channel* raw = nullptr;
    try {
      raw = new_event_channel();
      throw_on_error(verbs_errno_result(rdma_migrate_id(e.id, raw)), "rdma_migrate_id");
    } catch (...) {
      rdma_destroy_id(e.id);  // not taken over: reject it here
      if (raw) rdma_destroy_event_channel(raw);
      ++stats_.failed;
      return finish(owner, current_error(), nullptr, false);
    }
    auto h = std::make_shared<pending_op>();
    h->handshake = true;
    h->home = weak_from_this();
    h->owner = owner;
    h->options = owner->options;
    h->peer = owner->peer;
    h->io_ex = ex_;
    h->establish_timeout = options_.establish_timeout;
    ++owner->handshakes;
    handshakes_.push_back(h);
    handed_request job{h, e, raw};
    if (h->peer == ex_)
      job();
    else
      asio::post(h->peer, std::move(job));
  }

  /// Handshake `h` ended: established (`c`) or failed (`ec`).
  void on_handshake(const std::shared_ptr<pending_op>& h, error_code ec, std::shared_ptr<connection_impl> c) {
    const auto it = std::find(handshakes_.begin(), handshakes_.end(), h);
    if (it == handshakes_.end() || closed_) return drop(std::move(c));  // withdrawn
    handshakes_.erase(it);
    const std::shared_ptr<pending_op> owner = std::move(h->owner);
    if (owner) --owner->handshakes;
    if (c) {
      if (auto target = take_accept_for(*h, owner)) {
        finish(target, {}, std::move(c), false);
      } else if (!h->options.pd && ready_.size() < most_handshakes()) {
        ready_.emplace_back(h, std::move(c));  // its own pd and cq: it waits for the next accept like it
      } else {
        ++stats_.dropped;
        drop(std::move(c));
      }
    } else if (ec == asio::error::timed_out) {
      ++stats_.timed_out;
    } else if (peer_gave_up(ec)) {
      ++stats_.abandoned;
    } else if (ec != asio::error::operation_aborted) {
      ++stats_.failed;  // this side's failure (resources, options): the accept hears of it
      if (owner && std::find(accepts_.begin(), accepts_.end(), owner) != accepts_.end())
        finish(owner, ec, nullptr, false);
    }
    wait();
  }

  /// The accept an established handshake completes: its own if pending, else the oldest with the same options.
  std::shared_ptr<pending_op> take_accept_for(const pending_op& h, const std::shared_ptr<pending_op>& owner) {
    auto it = owner ? std::find(accepts_.begin(), accepts_.end(), owner) : accepts_.end();
    if (it == accepts_.end())
      it = std::find_if(accepts_.begin(), accepts_.end(), [&](const auto& a) { return same_options(h, *a); });
    if (it == accepts_.end()) return nullptr;
    std::shared_ptr<pending_op> op = *it;
    accepts_.erase(it);
    return op;
  }

  /// Completes accept `op` with `ec` / `c` (taking it out of `accepts_`). Its handshakes in progress go on
  /// (`settle`): after a failure or cancellation at once (the user may destroy its pd/cq now), after a success
  /// once the handler had its turn (an accept loop starts its next accept there).
  void finish(std::shared_ptr<pending_op> op, error_code ec, std::shared_ptr<connection_impl> c, bool post) {
    if (const auto it = std::find(accepts_.begin(), accepts_.end(), op); it != accepts_.end()) accepts_.erase(it);
    op->listener.reset();
    overdue_ = false;  // the next accept gets a grace of its own
    ++accepts_completed_;
    if (grace_armed_ && grace_timer_) grace_timer_->cancel();  // its handler re-arms it from now
    const bool orphans = op->handshakes != 0;
    if (orphans) {
      op->handshakes = 0;
      for (const auto& h : handshakes_)
        if (h->owner == op) h->owner.reset();
      if (ec) settle();
    }
    if (c) ++stats_.accepted;
    complete(*op, ec, c ? connection(std::move(c)) : connection{}, post);
    if (orphans && !ec)
      asio::post(ex_, [weak = weak_from_this()] {
        if (auto self = weak.lock(); self && !self->closed_) self->settle();
      });
  }

  /// Handshakes whose accept completed: each goes on for the oldest pending accept with the same options.
  /// Without one, those on the user's pd/cq end now (the user may destroy them); the others go on and wait in
  /// `ready_` once established.
  void settle() {
    std::vector<std::shared_ptr<pending_op>> ending;
    for (auto it = handshakes_.begin(); it != handshakes_.end();) {
      pending_op& h = **it;
      if (!h.owner) {
        const auto next = std::find_if(accepts_.begin(), accepts_.end(), [&](const auto& a) { return same_options(h, *a); });
        if (next != accepts_.end()) {
          h.owner = *next;
          ++(*next)->handshakes;
        } else if (h.options.pd) {
          ending.push_back(*it);
          it = handshakes_.erase(it);
          ++stats_.dropped;
          continue;
        }
      }
      ++it;
    }
    for (const auto& h : ending) end_handshake(h);  // after the loop: this may report back inline
    wait();
  }

  void cancel(const std::shared_ptr<pending_op>& op) {
    if (std::find(accepts_.begin(), accepts_.end(), op) == accepts_.end()) return;
    finish(op, asio::error::operation_aborted, nullptr, true);
    if (accepts_.empty() && waiting_ && channel_->fd) {
      error_code ignored;
      channel_->fd->cancel(ignored);
    }
  }

  void fail_all(error_code ec, bool post) {
    while (!accepts_.empty()) finish(accepts_.front(), ec, nullptr, post);
  }

  void close() noexcept {
    if (closed_) return;
    closed_ = true;
    if (channel_) channel_->release_fd();
    if (grace_timer_) grace_timer_->cancel();
    fail_all(asio::error::operation_aborted, true);
    for (const auto& h : std::exchange(handshakes_, {})) end_handshake(h);
    for (auto& r : std::exchange(ready_, {})) drop(std::move(r.second));
    if (id_) rdma_destroy_id(id_);
    id_ = nullptr;
    channel_.reset();
  }
};

void report_handshake(std::shared_ptr<pending_op> h, error_code ec, std::shared_ptr<connection_impl> c) {
  auto l = h->home.lock();
  if (!l) return drop(std::move(c));
  const asio::any_io_executor ex = l->ex_;
  asio::dispatch(ex, [l = std::move(l), h = std::move(h), ec, c = std::move(c)]() mutable {
    l->on_handshake(h, ec, std::move(c));
  });
}

namespace {
/// Runs where the cancellation is emitted: the handler's executor, which for an accept is the
/// listener's. A connection may live on another executor (a loop_pool member): it is cancelled there.
void cancel_op(const std::weak_ptr<pending_op>& weak) {
  auto op = weak.lock();
  if (!op) return;
  if (auto l = op->listener.lock()) return l->cancel(op);  // an accept still pending at the listener
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
  c->loopback_dst_ = loopback_or_wildcard(dst);
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
  // An established connection made for an earlier accept with these options takes this one.
  const auto ready = std::find_if(l.ready_.begin(), l.ready_.end(), [&](const auto& r) { return same_options(*r.first, *op); });
  if (ready != l.ready_.end()) {
    std::shared_ptr<connection_impl> c = std::move(ready->second);
    l.ready_.erase(ready);
    ++l.stats_.accepted;
    return complete(*op, {}, connection(std::move(c)), true);
  }
  op->listener = l.shared_from_this();
  install_cancellation(op);
  l.accepts_.push_back(op);
  l.wait();  // the wait's handler runs from the loop, never inside this function
}

void start_disconnect(connection_impl* c, const asio::any_io_executor& ex, disconnect_handler handler) {
  auto fail_now = [&](const asio::any_io_executor& ex, error_code ec) { deliver(std::move(handler), ex, true, ec); };
  if (!c || c->closed_) {
    // An empty connection: its executor (a failed connect's or accept's), else the handler's own.
    const asio::any_io_executor& where = c ? c->ex_ : ex;
    if (!where) throw asio::execution::bad_executor();
    return fail_now(where, errno_code(ENOTCONN));
  }
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
