#pragma once
// Internal: the one-sided family of a queue pair (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
// IBV_WR_RDMA_READ): one operation kind. `prepare` is in lib/dataplane/ops/rdma_op.cpp. Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/ops/results.hpp>

#include <cstdint>

namespace coverbs::detail {

struct rdma_op {
  using completion = length_result;
  registered_span local;
  remote_key remote;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  std::uint32_t imm = 0;  ///< immediate data of a write_with_imm (host byte order)

  /// `errc::message_too_long`, `errc::remote_range_too_small` before posting; fills `n.wr.send`.
  errc prepare(queue_pair_impl* qp, wr_node& n) const;  // errc{}: accepted
};

}  // namespace coverbs::detail
