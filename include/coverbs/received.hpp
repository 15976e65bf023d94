#pragma once
/// @file
/// What a receive completion reports: `received` (a queue pair's receive) and `srq_received` (a shared
/// receive queue's, which also names the queue pair the message arrived on).

#include <coverbs/config.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace coverbs {

/// What a receive completion reports (`ibv_wc` of an IBV_WC_RECV / IBV_WC_RECV_RDMA_WITH_IMM).
struct received {
  std::size_t bytes = 0;                          ///< bytes placed in the receive buffer
  std::optional<std::uint32_t> imm;               ///< immediate data (host byte order), if the peer sent any
  std::optional<std::uint32_t> invalidated_rkey;  ///< rkey the peer invalidated with send_with_invalidate
  bool rdma_with_imm = false;                     ///< true for the receive side of write_with_imm
};

/// What a receive on a shared receive queue reports: what a queue pair's receive reports, and which queue
/// pair the message arrived on (ibv_wc::qp_num).
struct srq_received : received {
  std::uint32_t qp_num = 0;  ///< the local queue pair (`queue_pair::qp_num()`) the message was sent to
};

}  // namespace coverbs
