#pragma once
// Internal: the send family of a queue pair (IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV): one
// operation kind. `prepare` (lib/dataplane/ops/send_op.cpp) validates the request and fills the work request.
// Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/ops/results.hpp>

#include <cstdint>

namespace coverbs::detail {

struct send_op {
  using completion = length_result;
  registered_span buf;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  std::uint32_t imm_or_rkey = 0;  ///< immediate data (host byte order) or the rkey to invalidate at the peer

  /// `errc::message_too_long` above the port's max_msg_sz; fills `n.wr.send` (inline when it fits).
  errc prepare(queue_pair_impl* qp, wr_node& n) const;  // errc{}: accepted
};

}  // namespace coverbs::detail
