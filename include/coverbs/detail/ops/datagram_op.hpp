#pragma once
// Internal: a datagram queue pair's operation kinds: a send to a destination (IBV_WR_SEND, IBV_WR_SEND_WITH_IMM
// with wr.ud) and a receive whose scatter list starts with a GRH slot. `prepare` and the parsing of what a
// receive reports are in lib/dataplane/ops/datagram_op.cpp. Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/ops/results.hpp>
#include <coverbs/detail/ops/scatter_gather.hpp>
#include <coverbs/received.hpp>

#include <cstdint>
#include <tuple>

namespace coverbs::detail {

/// What the datagram receive `n` (its header copied into the node) and its completion `wc` report.
received_datagram received_datagram_of(const wr_node& n, const ibv_wc* wc) noexcept;

/// A datagram send, over one span (`Buffers` = registered_span: the send's own SGE, as `send_op`) or a list
/// (`span_list`: gathered, as `gather_send_op`).
template <class Buffers>
struct datagram_send_op {
  using completion = length_result;
  Buffers bufs;
  ibv_ah* ah = nullptr;
  std::uint32_t remote_qpn = 0;
  std::uint32_t remote_qkey = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  std::uint32_t imm = 0;  ///< immediate data (host byte order)

  /// `errc::address_handle_mismatch`, `errc::invalid_qkey`, `errc::invalid_destination_qp`,
  /// `errc::too_many_spans`, `errc::datagram_too_long` before posting; fills `n.wr.send` with wr.ud.
  error_code prepare(queue_pair_impl* qp, wr_node& n) const;
};

/// A datagram receive into one span or a list (`Buffers` as above), behind a GRH slot.
template <class Buffers>
struct datagram_recv_op {
  Buffers bufs;

  /// `errc::too_many_spans` (above max_recv_sge, or above max_spans_per_operation - 2: the GRH slot and the
  /// overflow area take two) before posting; fills `n.wr.recv` behind the GRH slot, taken when it is posted,
  /// and ahead of the overflow area when the spans hold less than a datagram.
  error_code prepare(queue_pair_impl* qp, wr_node& n) const;

  /// The completion arguments.
  struct completion {
    using signature = void(error_code, received_datagram);
    static auto result(error_code ec, const wr_node& n, const ibv_wc* wc) {
      if (ec) return std::tuple(ec, received_datagram{});
      received_datagram r = received_datagram_of(n, wc);
      if (r.bytes > n.sge.length) {  // the rest went to the overflow scratch area
        r.bytes = n.sge.length;
        ec = errc::datagram_truncated;
      }
      return std::tuple(ec, r);
    }
  };
};

extern template struct datagram_send_op<registered_span>;
extern template struct datagram_send_op<span_list>;
extern template struct datagram_recv_op<registered_span>;
extern template struct datagram_recv_op<span_list>;

}  // namespace coverbs::detail
