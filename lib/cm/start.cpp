// The initiations of the rdma_cm operations (declared in coverbs/detail/cm_access.hpp): each checks its
// arguments (failures complete at once, posted), then starts its operation — a connect on its connection's
// executor, an accept at its listener, a disconnect on the connection.

#include <coverbs/connect.hpp>
#include <coverbs/detail/cm_access.hpp>

#include "cm/accept_op.hpp"
#include "cm/address.hpp"
#include "cm/completion.hpp"
#include "cm/connect_op.hpp"
#include "cm/connection_impl.hpp"
#include "cm/handshake_op.hpp"
#include "cm/listener_impl.hpp"
#include "dataplane/qp_impl.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/bad_executor.hpp>

#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {
constexpr std::size_t max_request_private_data = 56;  // IB CM REQ
constexpr std::size_t max_reply_private_data = 196;   // IB CM REP
}  // namespace

void start_connect(const asio::any_io_executor& ex, std::string_view host, std::string_view port,
                   const connect_options& options, connection_handler handler) {
  auto op = std::make_shared<connect_op>();
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
    ++l.stats_.accepted;
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
    c->phase_ = connection_impl::phase::down;
    return fail_now(c->ex_, ec);
  }
  c->phase_ = connection_impl::phase::disconnecting;
  c->disconnect_.swap(handler);
  c->wait();
}

}  // namespace coverbs::detail
