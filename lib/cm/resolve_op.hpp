#pragma once
// Private to lib/: an `async_resolve_datagram_peer` in progress, on a UDP-port-space id of its own (`ud_id`):
// address, route, service ID resolution (rdma_connect on a UD id, a SIDR REQ), then the peer's address handle.
// It runs on the sending queue pair's executor; its id and channel are gone once it completes.

#include <coverbs/datagram_resolve.hpp>
#include <coverbs/error.hpp>

#include "cm/ud_id.hpp"

#include <cstdint>
#include <memory>

namespace coverbs::detail {

class resolve_op final : public ud_id {
public:
  enum class phase { idle, resolving_address, resolving_route, resolving_service, done };

  using ud_id::ud_id;

  datagram_peer_handler handler;
  datagram_resolve_options options_;
  phase phase_ = phase::idle;

  bool expecting() const noexcept override { return phase_ != phase::done; }
  void on_event(const cm_event& e) override;
  void fail(error_code ec, bool post) override { complete(ec, datagram_peer{}, post); }
  /// Completes with `ec` (or `peer`), once, and releases the id and channel.
  void complete(error_code ec, datagram_peer peer, bool post);
  /// Runs where the cancellation is emitted; fails the operation with `operation_aborted` on its executor.
  static void cancel(const std::weak_ptr<resolve_op>& weak);
};

}  // namespace coverbs::detail
