// The initiations of the rdma_cm operations (declared in coverbs/detail/cm_access.hpp and
// coverbs/datagram_resolve.hpp): each checks its arguments (failures complete at once, posted), then starts
// its operation — a connect on its connection's executor, an accept at its listener, a disconnect on the
// connection, a datagram peer's resolution and a multicast join on the queue pair's executor.

#include <coverbs/connect.hpp>
#include <coverbs/detail/cm_access.hpp>

#include "cm/accept_op.hpp"
#include "cm/address.hpp"
#include "cm/completion.hpp"
#include "cm/connect_op.hpp"
#include "cm/connection_impl.hpp"
#include "cm/handshake_op.hpp"
#include "cm/listener_impl.hpp"
#include "cm/multicast_impl.hpp"
#include "cm/resolve_op.hpp"
#include "core/metrics.hpp"
#include "dataplane/qp_impl.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/bad_executor.hpp>

#include <rdma/rdma_cma.h>

#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {
constexpr std::size_t max_request_private_data = 56;  // IB CM REQ
constexpr std::size_t max_reply_private_data = 196;   // IB CM REP
constexpr std::size_t max_sidr_request_private_data = 216 - 36;  // IB CM SIDR REQ, less rdma_cm's header
}  // namespace

void start_connect(const asio::any_io_executor& ex, std::string_view host, std::string_view port,
                   const connect_options& options, connection_handler handler) {
  auto op = std::make_shared<connect_op>();
  op->handler.swap(handler);  // Asio 1.81: any_completion_handler's move assignment recurses endlessly
  sockaddr_storage dst{}, src{};
  error_code ec = parse_active_endpoints(host, port, options.source_address, dst, src);
  if (!ec && options.private_data.size() > max_request_private_data) ec = errc::private_data_too_long;
  if (!ec && options.cq && options.cq->get_executor() != ex) ec = errc::executor_mismatch;
  op->io_ex = ex;
  op->peer = ex;
  if (ec) return op->complete(ec, connection{}, true);

  auto c = std::make_shared<connection_impl>(ex);
  c->options_ = options;
  c->route_timeout_ = options.resolve_route_timeout;
  c->loopback_dst_ = loopback_or_wildcard(dst);
  c->op_ = op;
  op->conn = c;
  install_cancellation(op);
  // The connection's state is touched only on its executor: from here on, when this is another thread.
  asio::dispatch(ex, [c, host = std::string(host), src, dst, timeout = options.resolve_address_timeout,
                      connect_timeout = options.connect_timeout,
                      has_source = !options.source_address.empty()]() mutable {
    try {
      c->channel_ = std::make_unique<cm_channel>(c->ex_);
      throw_on_error(verbs_errno_result(rdma_create_id(c->channel_->channel, &c->id_, c.get(), RDMA_PS_TCP)),
                     "rdma_create_id");
      throw_on_error(
          verbs_errno_result(rdma_resolve_addr(c->id_, has_source ? reinterpret_cast<sockaddr*>(&src) : nullptr,
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

void start_resolve_datagram_peer(protection_domain& pd, const datagram_queue_pair& via, std::string_view host,
                                 std::string_view port, const datagram_resolve_options& options,
                                 datagram_peer_handler handler) {
  // No executor to complete on: thrown, as a disconnect of a connection that never was.
  if (!via.native_handle())
    throw system_error(errno_code(EBADF), "async_resolve_datagram_peer: the queue pair is empty (moved from)");
  const asio::any_io_executor ex = via.get_executor();
  auto op = std::make_shared<resolve_op>(ex);
  op->handler.swap(handler);  // Asio 1.81: any_completion_handler's move assignment recurses endlessly
  sockaddr_storage dst{}, src{};
  error_code ec = parse_active_endpoints(host, port, options.source_address, dst, src);
  if (!ec && options.private_data.size() > max_sidr_request_private_data) ec = errc::private_data_too_long;
  if (!ec && !pd) ec = errno_code(EBADF);
  if (!ec && via.native_handle()->pd != pd.native_handle()) ec = errc::address_handle_mismatch;
  if (ec) return op->fail(ec, true);
  op->pd_ = &pd;
  op->port_ = via.port();
  op->options_ = options;
  op->loopback_dst_ = loopback_or_wildcard(dst);
  install_cancellation(op);
  asio::dispatch(ex, [op, dst, src, has_source = !options.source_address.empty()]() mutable {
    try {
      op->start(dst, has_source ? &src : nullptr, op->options_.resolve_address_timeout, op->options_.timeout);
      op->phase_ = resolve_op::phase::resolving_address;
    } catch (...) {
      op->fail(current_error(), true);
    }
  });
}

void start_join_multicast(protection_domain& pd, datagram_queue_pair& via, std::string_view group,
                          const multicast_options& options, multicast_handler handler) {
  if (!via.native_handle())
    throw system_error(errno_code(EBADF), "async_join_multicast: the queue pair is empty (moved from)");
  const asio::any_io_executor ex = via.get_executor();
  auto op = std::make_shared<multicast_impl>(ex);
  op->handler.swap(handler);
  sockaddr_storage src{};
  error_code ec = parse_endpoint(group, 0, op->group_);
  if (!ec && !options.source_address.empty()) ec = parse_endpoint(options.source_address, 0, src);
  const auto& v4 = reinterpret_cast<const sockaddr_in&>(op->group_);
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(op->group_);
  if (!ec && !(op->group_.ss_family == AF_INET ? IN_MULTICAST(ntohl(v4.sin_addr.s_addr))
                                                : IN6_IS_ADDR_MULTICAST(&v6.sin6_addr)))
    ec = errc::invalid_address;
  if (!ec && !pd) ec = errno_code(EBADF);
  if (!ec && via.native_handle()->pd != pd.native_handle()) ec = errc::address_handle_mismatch;
  if (ec) return op->fail(ec, true);
  op->pd_ = &pd;
  op->qp_ = via.native_handle();
  op->port_ = via.port();
  op->qp_qkey_ = via.qkey();
  install_cancellation(op);
  asio::dispatch(ex, [op, src, has_source = !options.source_address.empty(), options]() mutable {
    try {
      op->start(op->group_, has_source ? &src : nullptr, options.resolve_address_timeout, options.timeout);
      op->phase_ = multicast_impl::phase::resolving_address;
    } catch (...) {
      op->fail(current_error(), true);
    }
  });
}

void start_accept(listener_impl& l, const asio::any_io_executor& peer, const connection_options& options,
                  connection_handler handler) {
  auto op = std::make_shared<accept_op>();
  op->handler.swap(handler);
  op->io_ex = l.ex_;
  op->peer = peer;
  if (l.closed_) return op->complete(asio::error::bad_descriptor, connection{}, true);
  if (options.private_data.size() > max_reply_private_data)
    return op->complete(errc::private_data_too_long, connection{}, true);
  if (options.cq && options.cq->get_executor() != peer)
    return op->complete(errc::executor_mismatch, connection{}, true);
  op->options = options;
  // An established connection made for an earlier accept with these options takes this one.
  const auto ready =
      std::find_if(l.ready_.begin(), l.ready_.end(), [&](const auto& r) { return same_options(*r.first, *op); });
  if (ready != l.ready_.end()) {
    std::shared_ptr<connection_impl> c = std::move(ready->second);
    l.ready_.erase(ready);
    tally(l.stats_.accepted, metric::accepted);
    return op->complete({}, cm_access::make_connection(std::move(c)), true);
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
  if (c->qp_) impl_of(*c->qp_)->to_error(c->error_);
  if (const error_code ec = verbs_errno_result(rdma_disconnect(c->id_)); ec && ec != std::errc::invalid_argument) {
    c->count_end(true);  // ended here: no DISCONNECTED event will say so
    c->phase_ = connection_impl::phase::down;
    return fail_now(c->ex_, ec);
  }
  c->phase_ = connection_impl::phase::disconnecting;
  c->disconnect_.swap(handler);
  c->wait();
}

}  // namespace coverbs::detail
