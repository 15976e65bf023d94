// Reading rdma_cm events: the next event of a channel, copied and acknowledged.

#include "cm/cm_event.hpp"

namespace coverbs::detail {

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

}  // namespace coverbs::detail
