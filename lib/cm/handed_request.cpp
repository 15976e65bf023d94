// The hand-off of a connection request from the listener's executor to the accept's peer executor.

#include "cm/handed_request.hpp"

#include "cm/completion.hpp"
#include "cm/connection_impl.hpp"

#include <rdma/rdma_cma.h>

#include <utility>

namespace coverbs::detail {

handed_request::handed_request(std::shared_ptr<handshake_op> o, const cm_event& ev, rdma_event_channel* r)
    : op(std::move(o)), e(ev), raw(r) {}

handed_request::handed_request(handed_request&& o) noexcept
    : op(std::move(o.op)), e(std::move(o.e)), raw(std::exchange(o.raw, nullptr)) {}

handed_request::~handed_request() {
  if (!raw) return;
  rdma_destroy_id(e.id);
  rdma_destroy_event_channel(raw);
}

void handed_request::operator()() {
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

}  // namespace coverbs::detail
