// A queue pair's receive (ibv_post_recv), and what a receive completion reports.
#include <coverbs/detail/ops/recv_op.hpp>

#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"

#include <arpa/inet.h>

namespace coverbs::detail {

errc recv_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.is_recv = true;  // the kind, before any refusal (metrics count a refused operation by it)
  if (qp->srq_) return errc::receive_queue_is_shared;
  return fill_recv(n, buf);
}

/// Whether a receive consumed a send-with-invalidate. rxe (Linux 6.1) writes the kernel's IB_WC_WITH_INVALIDATE
/// (bit 2) into its user-mapped completion queue, where libibverbs' IBV_WC_WITH_INV is bit 3 and bit 2 means
/// IBV_WC_IP_CSUM_OK — which no provider reports for an RC receive. Read both as invalidation.
bool received_invalidation(const ibv_wc& wc) noexcept {
  if (wc.wc_flags & IBV_WC_WITH_INV) return true;
  return wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_IP_CSUM_OK) && !(wc.wc_flags & IBV_WC_WITH_IMM);
}

received received_of(const ibv_wc* wc) noexcept {
  received r;
  if (!wc) return r;
  r.bytes = wc->byte_len;
  if (wc->wc_flags & IBV_WC_WITH_IMM) r.imm = ntohl(wc->imm_data);
  if (received_invalidation(*wc)) r.invalidated_rkey = wc->invalidated_rkey;
  r.rdma_with_imm = wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM;
  return r;
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const recv_op&);

}  // namespace coverbs::detail
