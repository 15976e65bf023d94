// A datagram queue pair's send (wr.ud: address handle, queue pair number, Q_Key) and receive (behind a GRH
// slot), and the sender a receive reports, parsed from the global route header.
#include <coverbs/detail/ops/datagram_op.hpp>

#include "dataplane/grh_slots.hpp"
#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"

#include <arpa/inet.h>

#include <cstring>

namespace coverbs::detail {

namespace {

/// The refusals of a destination (address handle of another PD, Q_Key bit 31, a queue pair number above 24 bits).
error_code check_destination(const queue_pair_impl* qp, const ibv_ah* ah, std::uint32_t qpn,
                             std::uint32_t qkey) noexcept {
  if (!ah || ah->pd != qp->qp_->pd) [[unlikely]]
    return errc::address_handle_mismatch;
  if (qkey & 0x80000000u) [[unlikely]]
    return errc::invalid_qkey;
  if (qpn > 0xFFFFFFu) [[unlikely]]
    return errc::invalid_destination_qp;
  return {};
}

/// The payload's SGEs into `n.sg` from `first` on: one span (none when empty), or a list as fill_list.
error_code fill_payload(wr_node& n, const registered_span& buf, std::size_t first, std::uint32_t, std::size_t limit,
                        std::size_t& entries, std::size_t& total) noexcept {
  if (buf.size() > limit) return errc::message_too_long;
  entries = buf.size() ? 1 : 0;
  total = buf.size();
  n.sg[first] = buf.to_sge();
  return {};
}
error_code fill_payload(wr_node& n, const span_list& bufs, std::size_t first, std::uint32_t max_sge, std::size_t limit,
                        std::size_t& entries, std::size_t& total) noexcept {
  if (error_code ec = fill_list(n, bufs, max_sge, limit, entries, total)) return ec;
  if (first) std::memmove(&n.sg[first], &n.sg[0], entries * sizeof n.sg[0]);
  return {};
}

/// The send-queue work request over the payload: the send's own SGE for one span (as send_op), a list otherwise.
ibv_send_wr& fill_payload_send(queue_pair_impl* qp, wr_node& n, const registered_span& buf, ibv_wr_opcode opcode,
                               error_code& ec) {
  if (buf.size() > qp->max_message_) ec = errc::datagram_too_long;
  return fill_send(qp, n, buf, opcode);
}
ibv_send_wr& fill_payload_send(queue_pair_impl* qp, wr_node& n, const span_list& bufs, ibv_wr_opcode opcode,
                               error_code& ec) {
  std::size_t entries = 0, total = 0;
  ec = fill_list(n, bufs, qp->options_.max_send_sge, qp->max_message_, entries, total);
  if (ec == errc::message_too_long) ec = errc::datagram_too_long;
  return fill_send_list(qp, n, entries, total, opcode);
}

std::size_t span_count(const registered_span&) noexcept { return 1; }
std::size_t span_count(const span_list& l) noexcept { return l.count; }

}  // namespace

template <class Buffers>
error_code datagram_send_op<Buffers>::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.wr.send.opcode = opcode;  // the kind, before any refusal
  if (error_code ec = check_destination(qp, ah, remote_qpn, remote_qkey)) return ec;
  error_code ec;
  ibv_send_wr& wr = fill_payload_send(qp, n, bufs, opcode, ec);
  if (ec) return ec;
  if (opcode == IBV_WR_SEND_WITH_IMM) wr.imm_data = htonl(imm);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = remote_qkey;
  return {};
}

template <class Buffers>
error_code datagram_recv_op<Buffers>::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.is_recv = true;  // the kind, before any refusal
  if (qp->srq_) [[unlikely]]
    return errc::receive_queue_is_shared;  // datagram_options::srq: receive through the SRQ
  if (span_count(bufs) + 2 > max_spans_per_operation) return errc::too_many_spans;
  std::size_t entries = 0, total = 0;
  if (error_code ec = fill_payload(n, bufs, 1, qp->options_.max_recv_sge, max_message, entries, total)) return ec;
  n.sg[0] = ibv_sge{0, grh_bytes, 0};  // the slot comes when the receive is posted
  std::size_t sges = entries + 1;
  // A datagram longer than the spans would fail the receive (rxe: loc_qp_op_err) and error the queue pair every
  // peer shares: the rest of a datagram goes to a scratch area instead, and the completion says truncated.
  if (total < qp->max_message_) n.sg[sges++] = qp->grh_->overflow(static_cast<std::uint32_t>(qp->max_message_ - total));
  fill_recv_list(n, sges, total);
  n.post = &post_datagram_recv;
  n.on_complete = &release_grh_slot;
  n.context = qp->grh_.get();
  return {};
}

template struct datagram_send_op<registered_span>;
template struct datagram_send_op<span_list>;
template struct datagram_recv_op<registered_span>;
template struct datagram_recv_op<span_list>;

namespace {

/// Whether the 40 bytes hold RoCE v2's IPv4 header (at offset 20) rather than an IPv6 or IB GRH, decided as
/// libibverbs' ibv_init_ah_from_wc does: by the version nibbles and, when both could be, the IPv4 checksum.
bool holds_ipv4_header(const std::uint8_t* grh) noexcept {
  const std::uint8_t* ip4 = grh + 20;
  if ((grh[0] >> 4) != 6) return (ip4[0] >> 4) == 4;
  if ((ip4[0] & 0x0f) != 5) return false;  // RoCE v2's IPv4 header has no options
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2)
    sum += static_cast<std::uint32_t>(ip4[i] << 8 | ip4[i + 1]);
  while (sum >> 16)
    sum = (sum & 0xffff) + (sum >> 16);
  return sum == 0xffff;  // a header with its checksum adds up to all ones
}

}  // namespace

received_datagram received_datagram_of(const wr_node& n, const ibv_wc* wc) noexcept {
  received_datagram r;
  if (!wc) return r;
  r.bytes = wc->byte_len > grh_bytes ? wc->byte_len - grh_bytes : 0;
  if (wc->wc_flags & IBV_WC_WITH_IMM) r.imm = ntohl(wc->imm_data);
  r.sender = sender_of(n, *wc, n.qp->create_.qkey);
  return r;
}

datagram_sender sender_of(const wr_node& n, const ibv_wc& wc, std::uint32_t qkey) noexcept {
  datagram_sender s;
  s.qp_num = wc.src_qp;
  s.qkey = qkey;
  s.sl = wc.sl;
  s.pkey_index = wc.pkey_index;
  s.lid = wc.slid;
  if (wc.wc_flags & IBV_WC_GRH) {
    const std::uint8_t* grh = grh_of(n);
    s.ipv4 = holds_ipv4_header(grh);
    if (s.ipv4) {
      s.source_gid.raw[10] = s.source_gid.raw[11] = 0xff;  // ::ffff:a.b.c.d
      std::memcpy(&s.source_gid.raw[12], grh + 20 + 12, 4);
    } else {
      std::memcpy(s.source_gid.raw.data(), grh + 8, 16);
    }
  }
  return s;
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const datagram_send_op<registered_span>&);
template void qp_start(queue_pair_impl*, wr_node*, const datagram_send_op<span_list>&);
template void qp_start(queue_pair_impl*, wr_node*, const datagram_recv_op<registered_span>&);
template void qp_start(queue_pair_impl*, wr_node*, const datagram_recv_op<span_list>&);

}  // namespace coverbs::detail
