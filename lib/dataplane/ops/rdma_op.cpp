// The one-sided family: IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ.
#include <coverbs/detail/ops/rdma_op.hpp>

#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"

#include <arpa/inet.h>

namespace coverbs::detail {

errc rdma_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.wr.send.opcode = opcode;  // the kind, before any refusal (metrics count a refused operation by it)
  if (local.size() > qp->max_message_) return errc::message_too_long;
  if (remote.length < local.size()) return errc::remote_range_too_small;
  ibv_send_wr& wr = fill_send(qp, n, local, opcode);
  if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote.addr;
  wr.wr.rdma.rkey = remote.rkey;
  return {};
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const rdma_op&);

}  // namespace coverbs::detail
