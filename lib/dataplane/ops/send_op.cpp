// The send family: IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV.
#include <coverbs/detail/ops/send_op.hpp>

#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"

#include <arpa/inet.h>

namespace coverbs::detail {

errc send_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.wr.send.opcode = opcode;  // the kind, before any refusal (metrics count a refused operation by it)
  if (buf.size() > qp->max_message_) return errc::message_too_long;
  ibv_send_wr& wr = fill_send(qp, n, buf, opcode);
  if (opcode == IBV_WR_SEND_WITH_IMM) wr.imm_data = htonl(imm_or_rkey);
  if (opcode == IBV_WR_SEND_WITH_INV) wr.invalidate_rkey = imm_or_rkey;
  return {};
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const send_op&);

}  // namespace coverbs::detail
