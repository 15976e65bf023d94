#pragma once
// Internal: a shared receive queue's receive (ibv_post_srq_recv): one operation kind; its handler receives
// `srq_received`. `prepare` is in lib/dataplane/shared_receive_queue.cpp. Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/wr_node.hpp>
#include <coverbs/received.hpp>

#include <tuple>

namespace coverbs::detail {

/// What the receive completion `wc` reports, with the queue pair it arrived on.
srq_received srq_received_of(const wr_node& n, const ibv_wc* wc, error_code& ec) noexcept;

struct srq_recv_op {
  registered_span buf;

  /// `errc::message_too_long` before posting; fills `n.wr.recv`.
  error_code prepare(shared_receive_queue_impl* srq, wr_node& n) const;

  /// The completion arguments.
  struct completion {
    using signature = void(error_code, srq_received);
    static auto result(error_code ec, const wr_node& n, const ibv_wc* wc) {
      // A foreign remote invalidation still reports the message: its qp_num names the peer to drop.
      const bool reported = !ec || ec == errc::foreign_remote_invalidation;
      if (!reported) return std::tuple(ec, srq_received{});
      srq_received r = srq_received_of(n, wc, ec);  // a datagram SRQ's: errc::datagram_truncated
      return std::tuple(ec, r);
    }
  };
};

}  // namespace coverbs::detail
