#pragma once
// Private to lib/: the hand-off between loops. A listener takes a connection request on its own executor,
// moves the request's cm_id to a new event channel there (rdma_migrate_id(3) must not race a read of the
// listener's channel, which only the listener's thread reads) and posts a `handed_request` to the accept's
// peer executor, where the connection is created, waits on that channel and accepts. Until then the cm_id's
// events wait in the kernel on the new channel.

#include "cm/cm_event.hpp"
#include "cm/handshake_op.hpp"

#include <memory>

struct rdma_event_channel;

namespace coverbs::detail {

/// A connection request on its way to the accept's peer executor. Dropped unrun (its loop destroyed), it
/// rejects the request.
struct handed_request {
  std::shared_ptr<handshake_op> op;
  cm_event e;
  rdma_event_channel* raw = nullptr;

  handed_request(std::shared_ptr<handshake_op> o, const cm_event& ev, rdma_event_channel* r);
  handed_request(handed_request&& o) noexcept;
  handed_request& operator=(handed_request&&) = delete;
  ~handed_request();

  /// On the peer executor: creates the connection and accepts (`connection_impl::accept`); a failure fails
  /// the handshake, which reports to the listener.
  void operator()();
};

}  // namespace coverbs::detail
