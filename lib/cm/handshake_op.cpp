// A listener's handshake: reporting back to the listener, ending it from there, and which accepts it may
// complete.

#include "cm/handshake_op.hpp"

#include "cm/connection_impl.hpp"
#include "cm/listener_impl.hpp"
#include "runtime/pool_lease.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>

#include <tuple>

namespace coverbs::detail {

void handshake_op::established(std::shared_ptr<connection_impl> c) { report({}, std::move(c)); }

void handshake_op::failed(error_code ec, bool) { report(ec, nullptr); }

void handshake_op::report(error_code ec, std::shared_ptr<connection_impl> c) {
  auto l = home.lock();
  if (!l) return drop(std::move(c));
  const boost::asio::any_io_executor ex = l->ex_;
  boost::asio::dispatch(ex, [l = std::move(l), h = shared_from_this(), ec, c = std::move(c)]() mutable {
    l->on_handshake(h, ec, std::move(c));
  });
}

void handshake_op::end(const std::shared_ptr<handshake_op>& h) {
  boost::asio::dispatch(h->peer, [weak = std::weak_ptr<handshake_op>(h)] {
    auto h = weak.lock();
    if (!h) return;
    if (auto c = h->conn.lock(); c && c->op_ == h) c->fail(boost::asio::error::operation_aborted, true);
  });
}

bool same_options(const handshake_op& h, const accept_op& a) {
  const connection_options& x = h.options;
  const connection_options& y = a.options;
  const auto qp = [](const queue_pair_options& q) {
    return std::tie(q.max_send_wr, q.max_recv_wr, q.max_send_sge, q.max_recv_sge, q.max_inline_data, q.min_rnr_timer,
                    q.remote_access);
  };
  // Two placements on one loop pool, each with its member's own pd and cq: the connection stays on the member
  // that made it (its executor, pd, cq and lease), whichever member the accept named.
  const void* pool = placed_on_pool(x.lease, x.pd, x.cq);
  const bool placed = pool && pool == placed_on_pool(y.lease, y.pd, y.cq);
  return (placed || (h.peer == a.peer && x.pd == y.pd && x.cq == y.cq)) && x.private_data == y.private_data &&
         x.responder_resources == y.responder_resources && x.initiator_depth == y.initiator_depth &&
         x.retry_count == y.retry_count && x.rnr_retry_count == y.rnr_retry_count && qp(x.qp) == qp(y.qp);
}

}  // namespace coverbs::detail
