#pragma once
// Internal: a queue pair's receive (ibv_post_recv): one operation kind; its handler receives `received`.
// `prepare` is in lib/dataplane/ops/recv_op.cpp. Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/wr_node.hpp>
#include <coverbs/received.hpp>

#include <tuple>

namespace coverbs::detail {

/// What the receive completion `wc` reports.
received received_of(const ibv_wc* wc) noexcept;

struct recv_op {
  registered_span buf;

  /// `errc::receive_queue_is_shared`, `errc::message_too_long` before posting; fills `n.wr.recv`.
  errc prepare(queue_pair_impl* qp, wr_node& n) const;  // errc{}: accepted

  /// The completion arguments.
  struct completion {
    using signature = void(error_code, received);
    static auto result(error_code ec, const wr_node&, const ibv_wc* wc) {
      return std::tuple(ec, ec ? received{} : received_of(wc));
    }
  };
};

}  // namespace coverbs::detail
