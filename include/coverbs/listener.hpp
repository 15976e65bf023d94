#pragma once
/// @file
/// `listener`: a passive rdma_cm endpoint and `listener::async_accept`, with its options (`listener_options`)
/// and counters (`listener_stats`). Event channels, devices, queue pairs and thread safety: see
/// coverbs/connection.hpp.
///
/// Several loops (`loop_pool`): `listener::async_accept(peer_executor, options)` accepts on the listener's
/// executor and binds the connection to `peer_executor` (with a pool's placement, possibly another member's:
/// see `async_accept`). The listener's thread takes the request and moves
/// its cm_id to a fresh event channel (rdma_migrate_id must not race a read of the old channel, and there
/// only the listener reads it); the request is then posted to `peer_executor`, which waits on that channel
/// (so disconnects are serviced there), creates the queue pair on `options.cq` and accepts. The accept's
/// handler runs on its associated executor, else the listener's, like Asio's
/// `acceptor::async_accept(peer_context)`. `async_connect(ex, ...)` does all of its work on `ex`.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/connection.hpp>
#include <coverbs/connection_options.hpp>
#include <coverbs/detail/cm_access.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

struct rdma_cm_id;

namespace coverbs {

/// How a listener is set up.
struct listener_options {
  listener_options() = default;  // not an aggregate: see connection_options
  /// Connection requests the kernel queues while no accept is pending (rdma_listen(3)); also the most
  /// handshakes the listener runs at once (more requests wait in the kernel's queue until one ends).
  int backlog = 64;
  /// How long a handshake may take from the reply (rdma_accept, the IB CM REP) to the requester's
  /// ready-to-use (RTU, RDMA_CM_EVENT_ESTABLISHED), in milliseconds; zero: no limit (rdma_cm's own REP
  /// retries, 60-90 s). A requester that never finishes (a half-open peer) is dropped then: its cm_id is
  /// destroyed, which rejects it. Half-open peers never hold an accept: see `listener::async_accept`.
  std::chrono::milliseconds establish_timeout{5000};
  connection_options connection;  ///< used by `async_accept(token)`
};

/// What a listener did with the requests it took (`listener::stats()`).
struct listener_stats {
  std::uint64_t accepted = 0;   ///< accepts completed with a connection
  /// Requests skipped because their requester gave up before the connection was established: it withdrew
  /// the request (e.g. it sat in the backlog past the requester's timeout: `errc::request_abandoned`),
  /// rejected the reply, or disconnected.
  std::uint64_t abandoned = 0;
  std::uint64_t timed_out = 0;  ///< handshakes dropped after `listener_options::establish_timeout` (half-open peers)
  /// Handshakes that failed on this side (queue pair creation, a pd/cq on another device, ...); the accept
  /// whose options they used completes with the error.
  std::uint64_t failed = 0;
  /// Handshakes and established connections closed because no pending accept could take them (their queue
  /// pair was made for an accept with other resources, see `listener::async_accept`).
  std::uint64_t dropped = 0;
  std::size_t handshakes = 0;  ///< handshakes in progress now
  std::size_t ready = 0;       ///< established connections waiting for the next accept
};

/// A passive rdma_cm endpoint: bound to an address and port, listening. Move-only.
///
/// Lifetime: destroying the listener completes its pending accepts with `operation_aborted` and
/// destroys its cm_id; connections it accepted live on independently.
class listener {
public:
  using executor_type = boost::asio::any_io_executor;
  using default_token = detail::default_token_t<executor_type>;

  /// Binds to `address` (numeric IPv4/IPv6; "" or "0.0.0.0": every RDMA device; an IPv6 link-local address
  /// with its interface, "fe80::1%eth0") and `port` (0: one is picked, see `local_port()`), then listens
  /// (rdma_bind_addr(3), rdma_listen(3)).
  /// @throws system_error `errc::invalid_address`, `errc::link_local_needs_scope` (an IPv6 link-local
  /// address without "%interface"), or the errno of rdma_create_event_channel /
  /// rdma_create_id / rdma_bind_addr (EADDRINUSE: port taken; EADDRNOTAVAIL / ENODEV: no RDMA device
  /// has that address) / rdma_listen.
  listener(const executor_type& ex, std::string_view address, std::uint16_t port = 0,
           const listener_options& options = {});
  /// As above, on `context.get_executor()` (e.g. an `io_context`).
  template <class ExecutionContext>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  listener(ExecutionContext& context, std::string_view address, std::uint16_t port = 0,
           const listener_options& options = {})
      : listener(executor_type(context.get_executor()), address, port, options) {}
  listener(listener&&) noexcept = default;
  listener& operator=(listener&& other) noexcept;
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  ~listener();

  executor_type get_executor() const noexcept;
  std::uint16_t local_port() const noexcept;
  /// A non-owning view of the device the listener is bound to; empty when bound to every device.
  coverbs::device& get_device() const noexcept;
  rdma_cm_id* native_handle() const noexcept;
  /// Counts of what the listener did with the requests it took. Call from the listener's executor.
  listener_stats stats() const noexcept;

  /// Completes with the next connection established on this listener: takes connection requests
  /// (RDMA_CM_EVENT_CONNECT_REQUEST) while an accept is pending, creates each one's queue pair per
  /// `options` on the requester's device, moves it to RTS, accepts (rdma_accept(3)), and completes once the
  /// requester finished the handshake (RDMA_CM_EVENT_ESTABLISHED).
  ///
  /// Handshakes run side by side, so a requester that receives the reply and never finishes (a half-open
  /// peer) holds no accept: it is rejected after `listener_options::establish_timeout`, and others are
  /// accepted meanwhile. While every pending accept has a handshake in progress, requests wait in the
  /// backlog; once that has lasted 2 s (a well-behaved requester finishes well within it, a half-open one
  /// never does) they are taken and handshaken alongside, with the options of the oldest pending accept,
  /// one every 250 ms (time for a well-behaved requester to finish and complete that accept, so that the
  /// next one gets an accept of its own), until an accept completes. A handshake's queue pair reserves its
  /// entries in `options.cq` only once its requester finished (nothing can complete on it before): however
  /// many half-open peers are handshaken alongside, they take no room from the connection the accept is for.
  ///
  /// The first of an accept's handshakes to finish completes it; a later one completes the oldest pending
  /// accept with the same options (peer executor, pd, cq, private data, queue pair sizes, retry counts: e.g.
  /// every accept with `listener_options::connection`, or a loop that passes the same options each time).
  /// Accepts placed on one `loop_pool` (options from `member::connection_options()`) count as the same
  /// whichever member they name: the connection stays on the member that made it (its executor, pd, cq and
  /// lease; the named member's lease goes with the accept), so bind what serves it to `c.get_executor()`.
  /// With none pending, an established connection with its own pd and cq waits for the next such accept
  /// (at most `backlog` wait); handshakes and connections on the user's pd/cq are closed instead
  /// (`listener_stats::dropped`: the requester sees a reject or a disconnect) — after a failed or cancelled
  /// accept at once, after a successful one once its handler ran (so the next accept of a loop takes them).
  ///
  /// Requests whose requester gave up (it timed out while the request waited in the backlog:
  /// `errc::request_abandoned`; it rejected the reply or disconnected) are skipped and counted in `stats()`;
  /// they never complete an accept.
  /// @par Completion Signature `void(error_code, connection)`
  /// @par Errors `errc::device_mismatch` (options.pd/cq on another device), `errc::private_data_too_long`,
  /// `errc::cq_overcommitted` (options.cq has no room for another queue pair of `options.qp`'s sizes),
  /// errno of ibv_create_qp / ibv_modify_qp / rdma_accept (the request is then rejected). In every case the
  /// listener keeps listening. A failed accept's empty connection is bound to its peer executor.
  /// @par Per-Operation Cancellation terminal, partial, total: a pending accept completes with
  /// `operation_aborted`; its handshakes go on for other accepts with the same options, or are rejected /
  /// their cm_ids destroyed; nothing leaks.
  /// @par Thread Safety Call from the listener's executor.
  template <completion_token_or_handler<void(error_code, connection)> Token = default_token>
  auto async_accept(const connection_options& options, Token&& token = default_token{}) {
    return async_accept(get_executor(), options, std::forward<Token>(token));
  }
  /// As above, with the connection bound to `peer_executor` (e.g. a `loop_pool` member's): its queue pair
  /// is created, the request accepted and its rdma_cm events serviced there (see the file comment). With
  /// options of a pool member (`member::connection_options()`), a connection made on another member of the
  /// same pool may complete it (above): it is bound to that member's executor, so use `c.get_executor()`.
  /// The handler runs on its associated executor, else the listener's.
  /// @par Errors as above, and `errc::executor_mismatch` (posted, nothing taken from the backlog) when
  /// `options.cq` is serviced by another executor than `peer_executor`.
  template <completion_token_or_handler<void(error_code, connection)> Token = default_token>
  auto async_accept(const executor_type& peer_executor, const connection_options& options,
                    Token&& token = default_token{}) {
    return detail::initiate_checked<Token, void(error_code, connection)>(
        [impl = impl_.get()](auto handler, const executor_type& peer, const connection_options& o) {
          detail::start_accept(*impl, peer, o, std::move(handler));
        },
        token, peer_executor, options);
  }
  /// As above with `listener_options::connection`.
  template <completion_token_or_handler<void(error_code, connection)> Token = default_token>
  auto async_accept(const executor_type& peer_executor, Token&& token = default_token{}) {
    return async_accept(peer_executor, options_connection(), std::forward<Token>(token));
  }
  /// As the two above with the connection bound to `peer_context.get_executor()` (e.g. an `io_context`).
  template <class ExecutionContext, completion_token_or_handler<void(error_code, connection)> Token = default_token>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  auto async_accept(ExecutionContext& peer_context, const connection_options& options,
                    Token&& token = default_token{}) {
    return async_accept(executor_type(peer_context.get_executor()), options, std::forward<Token>(token));
  }
  template <class ExecutionContext, completion_token_or_handler<void(error_code, connection)> Token = default_token>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  auto async_accept(ExecutionContext& peer_context, Token&& token = default_token{}) {
    return async_accept(executor_type(peer_context.get_executor()), options_connection(), std::forward<Token>(token));
  }
  /// As `async_accept(options, token)` with `listener_options::connection`.
  template <completion_token_or_handler<void(error_code, connection)> Token = default_token>
  auto async_accept(Token&& token = default_token{}) {
    return async_accept(options_connection(), std::forward<Token>(token));
  }

private:
  const connection_options& options_connection() const noexcept;
  std::shared_ptr<detail::listener_impl> impl_;
};

}  // namespace coverbs
