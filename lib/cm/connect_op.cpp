// An async_connect in progress: completion and cancellation.

#include "cm/connect_op.hpp"

#include "cm/connection_impl.hpp"
#include "core/metrics.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>

namespace coverbs::detail {

void connect_op::established(std::shared_ptr<connection_impl> c) {
  tally(metric::connected);
  complete({}, cm_access::make_connection(std::move(c)), false);
}

void connect_op::failed(error_code ec, bool post) {
  tally(metric::connect_failed);
  complete(ec, connection{}, post);
}

void connect_op::cancel(const std::weak_ptr<connect_op>& weak) {
  auto op = weak.lock();
  if (!op) return;
  boost::asio::dispatch(op->peer, [weak] {
    auto op = weak.lock();
    if (!op) return;
    if (auto c = op->conn.lock(); c && c->op_ == op) c->fail(boost::asio::error::operation_aborted, true);
  });
}

}  // namespace coverbs::detail
