// Operations over several registered spans: one work request whose scatter/gather list has one SGE per span
// (wr_node::sg), checked against the queue pair's max_send_sge / max_recv_sge before posting.
#include <coverbs/detail/ops/scatter_gather.hpp>

#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"
#include "dataplane/srq_impl.hpp"

#include <arpa/inet.h>

namespace coverbs::detail {

namespace {

/// Copies the non-empty spans of `l` into `n.sg` (their number in `entries`, their total length in `total`):
/// an empty span adds nothing, and some providers read a zero-length SGE as 2 GiB. `errc::too_many_spans`
/// when `l` holds more spans than `max_sge` (or the room); `errc::message_too_long` when the total exceeds
/// `limit`, checked span by span so that no sum of lengths can wrap around.
error_code fill_list(wr_node& n, const span_list& l, std::uint32_t max_sge, std::size_t limit, std::size_t& entries,
                     std::size_t& total) {
  if (l.count > max_spans_per_operation || l.count > max_sge) return errc::too_many_spans;
  entries = total = 0;
  for (std::size_t i = 0; i < l.count; ++i) {
    const std::size_t size = l.items[i].size();
    if (size > limit - total) return errc::message_too_long;
    if (size == 0) continue;
    n.sg[entries++] = l.items[i].to_sge();
    total += size;
  }
  return {};
}

/// The signaled send-queue work request of `n` over its list `n.sg` of `count` entries, `total` bytes
/// (inline when they fit the queue pair's max_inline_data).
ibv_send_wr& fill_send_list(queue_pair_impl* qp, wr_node& n, std::size_t count, std::size_t total,
                            ibv_wr_opcode opcode) {
  n.sge = {0, static_cast<std::uint32_t>(total), 0};  // what the completion reports
  ibv_send_wr& wr = n.wr.send;
  wr.wr_id = reinterpret_cast<std::uintptr_t>(&n);
  wr.sg_list = n.sg;
  wr.num_sge = static_cast<int>(count);
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (opcode != IBV_WR_RDMA_READ && total && total <= qp->max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  return wr;
}

}  // namespace

error_code gather_send_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_list(n, bufs, qp->options_.max_send_sge, qp->max_message_, entries, total)) return ec;
  ibv_send_wr& wr = fill_send_list(qp, n, entries, total, opcode);
  if (opcode == IBV_WR_SEND_WITH_IMM) wr.imm_data = htonl(imm_or_rkey);
  if (opcode == IBV_WR_SEND_WITH_INV) wr.invalidate_rkey = imm_or_rkey;
  return {};
}

error_code scatter_gather_rdma_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_list(n, local, qp->options_.max_send_sge, qp->max_message_, entries, total)) return ec;
  if (remote.length < total) return errc::remote_range_too_small;
  ibv_send_wr& wr = fill_send_list(qp, n, entries, total, opcode);
  if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote.addr;
  wr.wr.rdma.rkey = remote.rkey;
  return {};
}

namespace {

/// Fills the receive work request of `n` over its list `n.sg` (`entries` spans, `total` bytes).
void fill_recv_list(wr_node& n, std::size_t entries, std::size_t total) noexcept {
  n.is_recv = true;
  n.sge = {0, static_cast<std::uint32_t>(total), 0};
  ibv_recv_wr& wr = n.wr.recv;
  wr = ibv_recv_wr{};
  wr.wr_id = reinterpret_cast<std::uintptr_t>(&n);
  wr.sg_list = n.sg;
  wr.num_sge = static_cast<int>(entries);
}

}  // namespace

error_code scatter_recv_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  if (qp->srq_) return errc::receive_queue_is_shared;
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_list(n, bufs, qp->options_.max_recv_sge, max_message, entries, total)) return ec;
  fill_recv_list(n, entries, total);
  return {};
}

error_code scatter_srq_recv_op::prepare(shared_receive_queue_impl* srq, wr_node& n) const {
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_list(n, bufs, srq->options_.max_sge, max_message, entries, total)) return ec;
  fill_recv_list(n, entries, total);
  return {};
}

}  // namespace coverbs::detail
