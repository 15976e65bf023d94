// Operations over several registered spans: one work request whose scatter/gather list has one SGE per span
// (wr_node::sg), checked against the queue pair's max_send_sge / max_recv_sge before posting.
#include <coverbs/detail/ops/scatter_gather.hpp>

#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"
#include "dataplane/srq_impl.hpp"

#include <arpa/inet.h>

#include <cstring>

namespace coverbs::detail {

error_code gather_send_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.wr.send.opcode = opcode;  // the kind, before any refusal
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_list(n, bufs, qp->options_.max_send_sge, qp->max_message_, entries, total)) return ec;
  ibv_send_wr& wr = fill_send_list(qp, n, entries, total, opcode);
  if (opcode == IBV_WR_SEND_WITH_IMM) wr.imm_data = htonl(imm_or_rkey);
  if (opcode == IBV_WR_SEND_WITH_INV) wr.invalidate_rkey = imm_or_rkey;
  return {};
}

error_code scatter_gather_rdma_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.wr.send.opcode = opcode;  // the kind, before any refusal
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_list(n, local, qp->options_.max_send_sge, qp->max_message_, entries, total)) return ec;
  if (remote.length < total) return errc::remote_range_too_small;
  ibv_send_wr& wr = fill_send_list(qp, n, entries, total, opcode);
  if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote.addr;
  wr.wr.rdma.rkey = remote.rkey;
  return {};
}

error_code scatter_recv_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.is_recv = true;  // the kind, before any refusal
  if (qp->srq_) return errc::receive_queue_is_shared;
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_list(n, bufs, qp->options_.max_recv_sge, max_message, entries, total)) return ec;
  fill_recv_list(n, entries, total);
  return {};
}

error_code scatter_srq_recv_op::prepare(shared_receive_queue_impl* srq, wr_node& n) const {
  n.is_recv = true;  // the kind, before any refusal
  std::size_t entries = 0, total = 0;
  if (srq->grh_ && bufs.count + 2 > max_spans_per_operation) return errc::too_many_spans;  // GRH slot, overflow
  if (error_code ec = fill_list(n, bufs, srq->options_.max_sge, max_message, entries, total)) return ec;
  if (!srq->grh_) {
    fill_recv_list(n, entries, total);
    return {};
  }
  std::memmove(&n.sg[1], &n.sg[0], entries * sizeof n.sg[0]);
  srq->fill_datagram_recv(n, entries, total);
  return {};
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const gather_send_op&);
template void qp_start(queue_pair_impl*, wr_node*, const scatter_gather_rdma_op&);
template void qp_start(queue_pair_impl*, wr_node*, const scatter_recv_op&);

}  // namespace coverbs::detail
