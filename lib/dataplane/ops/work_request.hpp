#pragma once
// The work requests every operation kind builds on: one signaled send-queue work request, or one receive,
// over one buffer, with wr_id = the node.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/wr_node.hpp>

#include "dataplane/qp_impl.hpp"

#include <cstddef>
#include <cstdint>

namespace coverbs::detail {

/// IBA: the longest message of any port (2^31 bytes).
inline constexpr std::size_t max_message = std::size_t{1} << 31;

/// The signaled send-queue work request of `n` over `buf` with `opcode` (inline when the payload fits the
/// queue pair's max_inline_data). Inline: it is every send-queue operation's data path.
inline ibv_send_wr& fill_send(queue_pair_impl* qp, wr_node& n, const registered_span& buf, ibv_wr_opcode opcode) {
  n.sge = buf.to_sge();
  ibv_send_wr& wr = n.wr.send;
  wr.wr_id = reinterpret_cast<std::uintptr_t>(&n);
  wr.sg_list = &n.sge;
  wr.num_sge = buf.size() ? 1 : 0;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  const bool carries_data = opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_SEND_WITH_INV ||
                            opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (carries_data && buf.size() && buf.size() <= qp->max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  return wr;
}

/// Fills the receive work request of `n` (wr_id = n) over `buf`; `errc::message_too_long` above 2^31 bytes.
error_code fill_recv(wr_node& n, const registered_span& buf);

}  // namespace coverbs::detail
