#pragma once
/// @file
/// What a receive completion reports: `received` (a queue pair's receive), `srq_received` (a shared
/// receive queue's, which also names the queue pair the message arrived on) and `received_datagram` (a
/// datagram queue pair's, which also names its sender).

#include <coverbs/config.hpp>
#include <coverbs/device.hpp>
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

/// Who sent a datagram, from its work completion and the 40-byte global route header the device wrote in
/// front of it. An `address_handle` made from it reaches the sender (the reply path).
struct datagram_sender {
  /// The sender's GID: on RoCE v2 over IPv4 `::ffff:a.b.c.d` made from the IPv4 header's source address (the
  /// header's bytes 20..39 of the GRH area), else the GRH's SGID (bytes 8..23).
  gid source_gid;
  std::uint32_t qp_num = 0;      ///< the sending queue pair (ibv_wc::src_qp)
  /// The Q_Key the datagram carried: the receiving queue pair's own, which the device checked — a datagram
  /// with another Q_Key is dropped by the device and never delivered.
  std::uint32_t qkey = 0;
  std::uint8_t sl = 0;           ///< service level (ibv_wc::sl; 0 on RoCE)
  std::uint16_t pkey_index = 0;  ///< ibv_wc::pkey_index
  std::uint16_t lid = 0;         ///< the sender's LID (ibv_wc::slid; InfiniBand only)
  bool ipv4 = false;             ///< the header was an IPv4 one (RoCE v2 over IPv4)
};

/// What a datagram queue pair's receive reports: `bytes` is the payload alone (the global route header's
/// 40 bytes are not counted: coverbs keeps them out of the caller's buffers), placed from the start of the
/// first span; `imm` as for a queue pair's receive; and the sender.
struct received_datagram : received {
  datagram_sender sender;
};

/// What a receive on a shared receive queue reports: what a queue pair's receive reports, and which queue
/// pair the message arrived on (ibv_wc::qp_num); on a datagram SRQ (`srq_options::datagram`), the sender too,
/// and `bytes` is then the payload alone, as in `received_datagram`.
struct srq_received : received {
  std::uint32_t qp_num = 0;  ///< the local queue pair (`queue_pair::qp_num()`) the message was sent to
  std::optional<datagram_sender> sender;  ///< set by a datagram SRQ
};

}  // namespace coverbs
