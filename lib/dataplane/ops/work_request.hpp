#pragma once
// The work requests every operation kind builds on: one signaled send-queue work request, or one receive,
// over one buffer or a list of spans, with wr_id = the node.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/ops/scatter_gather.hpp>
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
errc fill_recv(wr_node& n, const registered_span& buf);

// --- over a list of spans (wr_node::sg): scatter/gather and datagram operations ---

/// Copies the non-empty spans of `l` into `n.sg` (their number in `entries`, their total length in `total`):
/// an empty span adds nothing, and some providers read a zero-length SGE as 2 GiB. `errc::too_many_spans`
/// when `l` holds more spans than `max_sge` (or the room); `errc::message_too_long` when the total exceeds
/// `limit`, checked span by span so that no sum of lengths can wrap around.
inline error_code fill_list(wr_node& n, const span_list& l, std::uint32_t max_sge, std::size_t limit,
                            std::size_t& entries, std::size_t& total) {
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
inline ibv_send_wr& fill_send_list(queue_pair_impl* qp, wr_node& n, std::size_t count, std::size_t total,
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

/// Fills the receive work request of `n` over its list `n.sg` (`entries` spans, `total` bytes).
inline void fill_recv_list(wr_node& n, std::size_t entries, std::size_t total) noexcept {
  n.is_recv = true;
  n.sge = {0, static_cast<std::uint32_t>(total), 0};
  ibv_recv_wr& wr = n.wr.recv;
  wr = ibv_recv_wr{};
  wr.wr_id = reinterpret_cast<std::uintptr_t>(&n);
  wr.sg_list = n.sg;
  wr.num_sge = static_cast<int>(entries);
}

}  // namespace coverbs::detail
