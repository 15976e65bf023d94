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
  // librdmacm fills `param.ud` instead of `param.conn` for an id of the UDP port space.
  out.ud = ev->id && ev->id->ps == RDMA_PS_UDP;
  const void* data = nullptr;
  std::size_t length = 0;
  if (out.ud) {
    const rdma_ud_param& p = ev->param.ud;
    data = p.private_data;
    length = p.private_data_len;
    out.ah_attr = p.ah_attr;
    out.ud_qp_num = p.qp_num;
    out.ud_qkey = p.qkey;
    out.responder_resources = out.initiator_depth = 0;
  } else {
    const rdma_conn_param& p = ev->param.conn;
    data = p.private_data;
    length = p.private_data_len;
    out.ah_attr = {};
    out.ud_qp_num = out.ud_qkey = 0;
    out.responder_resources = p.responder_resources;
    out.initiator_depth = p.initiator_depth;
  }
  const auto* bytes = static_cast<const std::byte*>(data);
  out.private_data.assign(bytes, bytes ? bytes + length : bytes);
  rdma_ack_cm_event(ev);
  return true;
}

}  // namespace coverbs::detail
