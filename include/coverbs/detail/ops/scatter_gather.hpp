#pragma once
// Internal: the operation kinds over several registered spans (one work request, one SGE per span): a gathered
// send or write, a scattered read or receive. `prepare` is in lib/dataplane/ops/scatter_gather.cpp. Not part
// of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/ops/recv_op.hpp>
#include <coverbs/detail/ops/results.hpp>
#include <coverbs/detail/ops/srq_recv_op.hpp>

#include <array>
#include <cstdint>

namespace coverbs::detail {

/// The spans of one operation, copied at initiation (the caller's sequence need not outlive it). More than
/// `max_spans_per_operation` are counted, not kept: `prepare` refuses them with `errc::too_many_spans`.
struct span_list {
  std::array<registered_span, max_spans_per_operation> items{};
  std::size_t count = 0;

  template <registered_span_sequence Spans>
  static span_list of(const Spans& spans) {
    span_list l;
    for (auto&& s : spans) {
      if (l.count < max_spans_per_operation) l.items[l.count] = registered_span(s);
      ++l.count;
    }
    return l;
  }
};

/// A send or send_with_imm gathered from several spans.
struct gather_send_op {
  using completion = length_result;
  span_list bufs;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  std::uint32_t imm_or_rkey = 0;
  /// `errc::too_many_spans`, `errc::message_too_long` (the total) before posting.
  error_code prepare(queue_pair_impl* qp, wr_node& n) const;
};

/// A write (gathered from several local spans) or a read (scattered into them) of one remote range.
struct scatter_gather_rdma_op {
  using completion = length_result;
  span_list local;
  remote_key remote;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  std::uint32_t imm = 0;
  /// `errc::too_many_spans`, `errc::message_too_long`, `errc::remote_range_too_small` (the total) before posting.
  error_code prepare(queue_pair_impl* qp, wr_node& n) const;
};

/// A receive scattered into several spans, filled in order.
struct scatter_recv_op {
  using completion = recv_op::completion;
  span_list bufs;
  /// `errc::receive_queue_is_shared`, `errc::too_many_spans`, `errc::message_too_long` before posting.
  error_code prepare(queue_pair_impl* qp, wr_node& n) const;
};

/// A shared receive queue's receive scattered into several spans, filled in order.
struct scatter_srq_recv_op {
  using completion = srq_recv_op::completion;
  span_list bufs;
  /// `errc::too_many_spans` (above `srq_options::max_sge`), `errc::message_too_long` before posting.
  error_code prepare(shared_receive_queue_impl* srq, wr_node& n) const;
};

}  // namespace coverbs::detail
