#pragma once
/// @file
/// `connection_options`: the queue pair, the resources it is created on and the rdma_cm connection parameters of
/// one connection, for either side (`listener::async_accept`, `async_connect`). A `loop_pool` member fills its
/// placement (`pd`, `cq`, `lease`): `member::connection_options()` returns this type when none is named.

#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/placement_options.hpp>
#include <coverbs/protection_domain.hpp>
#include <coverbs/queue_pair.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace coverbs {

/// Queue pair, resources and connection parameters of one connection (either side).
///
/// The options types of the rdma_cm layer (this one, `connect_options`, `listener_options`) have a default
/// constructor, so they are not aggregates: GCC 12 destroys an aggregate-initialized temporary whose members
/// have destructors (here the vector, the string, the lease) as if half-built when it is an argument inside a
/// `co_await` expression, and the program aborts ("free(): invalid pointer"): `co_await async_connect(ex, host,
/// port, {}, token)` did. With a constructor, `{}` is value-initialization, which GCC 12 gets right. Set
/// members by name (`o.private_data = ...`); the overloads without options take the defaults.
struct connection_options {
  connection_options() = default;
  /// The queue pair's sizes and attributes. `port` is ignored (rdma_cm picks it); the path attributes
  /// (MTU, GID, timeouts, PSNs) come from rdma_cm (rdma_init_qp_attr), `remote_access` and `min_rnr_timer`
  /// (how soon a send that found no receive posted is retried) from here.
  queue_pair_options qp;
  /// Where the queue pair is created. Both null: the connection allocates its own protection domain and
  /// completion queue (depth max_send_wr + max_recv_wr) on the device rdma_cm chose, reachable through
  /// `connection::pd()` / `cq()`. Otherwise both must be set, live on that device
  /// (`errc::device_mismatch`), and outlive the connection.
  /// `cq` must be serviced by the executor the connection is bound to (`errc::executor_mismatch`).
  protection_domain* pd = nullptr;
  completion_queue* cq = nullptr;
  /// Held by the connection until it closes (or by the accept/connect until it fails); empty: nothing.
  /// `loop_pool` counts a member's load with it (`loop_pool::member::connection_options`): an accept's
  /// connection then holds a lease of its own on the member that made it, and the accept's lease goes when
  /// the accept completes.
  std::shared_ptr<void> lease;
  /// Sent to the peer with the connection request (at most 56 bytes) or the reply (at most 196 bytes).
  std::vector<std::byte> private_data;
  /// RDMA reads / atomics this side accepts as responder and issues as initiator; 0: the device's
  /// maximum. The passive side caps both by what the peer asked for.
  std::uint8_t responder_resources = 0, initiator_depth = 0;
  /// Transport retries of this side's own sends, reads and atomics (0..7): how often its queue pair resends
  /// a request the peer did not acknowledge before it fails with `wc_errc::retry_exc_err`. Set on this side's
  /// queue pair (ibv_modify_qp to RTS, `retry_cnt`) whatever the peer asked for. Also sent in the request
  /// (rdma_conn_param::retry_count), where rdma_cm applies it to the passive side's queue pair; a coverbs
  /// listener overrides that with its own option. The default is 6, not 7: Soft-RoCE (rxe) retries without
  /// end at 7, so a dead peer would never be noticed (measured across two hosts: 7 never failed in 9 minutes,
  /// 6 failed after 14.8 s at a 2.1 s ACK timeout); on NICs 6 costs one retry.
  std::uint8_t retry_count = 6;
  /// Receiver-not-ready retries of this side's own sends (0..7, 7: infinite): how often its queue pair resends
  /// a send that found no receive posted at the peer before it fails with `wc_errc::rnr_retry_exc_err`. Set on
  /// this side's queue pair (ibv_modify_qp to RTS, `rnr_retry`). rdma_cm (IBA CM REQ/REP) would instead give
  /// each queue pair the count the *peer* sent in rdma_conn_param::rnr_retry_count; coverbs overrides it, so
  /// the peer's option never governs this side's sends. The value is still sent to the peer, so a peer that
  /// leaves its queue pair to rdma_cm (plain librdmacm) retries its sends to us that often.
  std::uint8_t rnr_retry_count = 7;
  /// Runs on the connection's executor once its queue pair exists (in INIT, receives may be posted), before the
  /// connection request (rdma_connect, active side) or the reply (rdma_accept, passive side) goes out: what it
  /// posts is there before the peer can send, so the peer's first message never meets receiver-not-ready.
  /// The connection holds what it returns (e.g. a `message_endpoint` made with `message_endpoint::hold_sends`),
  /// gives it out through `connection::prepared()`, and destroys its reference first when it closes (before the
  /// queue pair and the protection domain). A throw fails the connect or accept with the exception's error (a
  /// listener keeps listening). A listener may handshake several requests for one accept (see
  /// `listener::async_accept`): each gets its own call, and those not accepted are closed. Passive side, on the
  /// user's completion queue: the queue pair reserves its entries there at once (receives may complete before
  /// the requester finished the handshake). Empty: nothing.
  std::function<std::shared_ptr<void>(queue_pair& qp, protection_domain& pd)> prepare;
};

/// What `loop_pool::member::connection_options()` fills when called without an options type.
template <>
struct detail::placement_options<detail::default_placement> {
  using type = coverbs::connection_options;
};

}  // namespace coverbs
