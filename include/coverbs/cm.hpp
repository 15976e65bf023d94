#pragma once
/// @file
/// Connections through rdma_cm (librdmacm): `listener::async_accept`, `async_connect`,
/// `connection::async_disconnect`, as Asio asynchronous operations.
///
/// Event channels: every listener and every connection owns one rdma_cm event channel. Its fd
/// (O_NONBLOCK) is waited on as an Asio descriptor on the object's executor; each event is copied,
/// acknowledged at once with rdma_ack_cm_event(3) and handed to the owner named by `rdma_cm_id::context`.
/// An accepted connection's cm_id is moved from the listener's channel to its own (rdma_migrate_id(3)),
/// so a connection never depends on its listener. One fd per connection keeps destruction simple and
/// local (rdma_destroy_id never waits: every event is acknowledged as soon as it is read).
///
/// Several loops (`loop_pool`): `listener::async_accept(peer_executor, options)` accepts on the listener's
/// executor and binds the connection to `peer_executor`. The listener's thread takes the request and moves
/// its cm_id to a fresh event channel (rdma_migrate_id must not race a read of the old channel, and there
/// only the listener reads it); the request is then posted to `peer_executor`, which waits on that channel
/// (so disconnects are serviced there), creates the queue pair on `options.cq` and accepts. The accept's
/// handler runs on its associated executor, else the listener's, like Asio's
/// `acceptor::async_accept(peer_context)`. `async_connect(ex, ...)` does all of its work on `ex`.
///
/// Devices: rdma_cm opens its own `ibv_context` per device (`rdma_cm_id::verbs`) and keeps it open for
/// the life of the process. `listener::get_device()` and `connection::get_device()` give a non-owning
/// `device` view of it (`device::adopt`), on which protection domains, completion queues and memory
/// regions are created as usual.
///
/// Queue pairs: coverbs creates the RC queue pair itself (it is not attached to the cm_id) and drives
/// its transitions with rdma_init_qp_attr(3) + ibv_modify_qp(3): the passive side goes INIT/RTR/RTS
/// before rdma_accept; the active side goes INIT before rdma_connect and RTR/RTS on
/// RDMA_CM_EVENT_CONNECT_RESPONSE, then calls rdma_establish(3).
///
/// Disconnects: when the peer disconnects (RDMA_CM_EVENT_DISCONNECTED) the queue pair is moved to the
/// error state, so every outstanding operation completes (`wc_errc::wr_flush_err`) and
/// `connection::error()` / `queue_pair::error()` report `errc::connection_reset`.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use a listener or connection from its executor (a
/// connection handed from a listener on another loop: move it to its own executor, e.g. `co_spawn(
/// conn.get_executor(), ...)`, and use and destroy it there). Cancellation of an accept or connect is
/// emitted on the handler's executor.

#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>
#include <coverbs/protection_domain.hpp>
#include <coverbs/queue_pair.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

struct rdma_cm_id;

namespace coverbs {

class connection;

/// Queue pair, resources and connection parameters of one connection (either side).
///
/// The options types of this file have a default constructor, so they are not aggregates: GCC 12 destroys an
/// aggregate-initialized temporary whose members have destructors (here the vector, the string, the lease)
/// as if half-built when it is an argument inside a `co_await` expression, and the program aborts ("free():
/// invalid pointer"): `co_await async_connect(ex, host, port, {}, token)` did. With a constructor, `{}` is
/// value-initialization, which GCC 12 gets right. Set members by name (`o.private_data = ...`); the
/// overloads without options take the defaults.
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
  /// `loop_pool` counts a member's load with it (`loop_pool::member::connection_options`).
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
};

/// What `async_connect` does and how long each step may take.
struct connect_options : connection_options {
  connect_options() = default;  // not an aggregate: see connection_options
  std::chrono::milliseconds resolve_address_timeout{2000};  ///< rdma_resolve_addr(3) timeout_ms
  std::chrono::milliseconds resolve_route_timeout{2000};    ///< rdma_resolve_route(3) timeout_ms
  /// The whole operation, resolution included; zero: no limit beyond rdma_cm's own retries.
  std::chrono::milliseconds connect_timeout{10000};
  /// Numeric local address to connect from; empty: the route decides.
  std::string source_address;
};

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

namespace detail {
class connection_impl;
class listener_impl;
using connection_handler = boost::asio::any_completion_handler<void(error_code, connection)>;
using disconnect_handler = boost::asio::any_completion_handler<void(error_code)>;
void start_connect(const boost::asio::any_io_executor& ex, std::string_view host, std::string_view port,
                   const connect_options& options, connection_handler handler);
void start_accept(listener_impl& l, const boost::asio::any_io_executor& peer, const connection_options& options,
                  connection_handler handler);
void start_disconnect(connection_impl* c, const boost::asio::any_io_executor& ex, disconnect_handler handler);

/// The handler's associated executor as an I/O executor; empty when it has none (a plain callback).
template <class Handler>
boost::asio::any_io_executor associated_io_executor(const Handler& h) {
  using executor = boost::asio::associated_executor_t<Handler>;
  if constexpr (std::is_same_v<executor, boost::asio::system_executor> ||
                !std::is_convertible_v<executor, boost::asio::any_io_executor>)
    return {};
  else
    return boost::asio::get_associated_executor(h);
}
}  // namespace detail

/// An established RC connection: the cm_id and the queue pair on it. Move-only.
///
/// Lifetime: destroying a connection destroys its queue pair (outstanding operations are flushed, their
/// handlers posted), then its own completion queue and protection domain if it made them, then the
/// cm_id (which sends a disconnect request if still connected) and its event channel. A user-supplied
/// protection domain and completion queue must outlive it; memory regions registered in `pd()` must
/// be destroyed before the connection.
/// While connected, the connection waits on its event channel for the peer's disconnect, which keeps
/// its executor's `run()` busy, as a pending socket read would.
class connection {
public:
  using executor_type = boost::asio::any_io_executor;
  using default_token = detail::default_token_t<executor_type>;

  /// An empty connection, with no executor.
  connection() noexcept = default;
  /// An empty connection bound to `ex` (what a failed connect or accept completes with: the executor the
  /// connection would have been bound to).
  explicit connection(executor_type ex) noexcept : ex_(std::move(ex)) {}
  connection(connection&&) noexcept = default;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection();

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  /// The executor the connection's events are serviced on; for an empty connection the one it was bound
  /// to (empty for a default-constructed one). The accessors below (up to `peer_private_data`) need a
  /// non-empty connection.
  executor_type get_executor() const noexcept;

  /// The queue pair, in RTS once the connection is established.
  coverbs::queue_pair& qp() const noexcept;
  /// The protection domain and completion queue of the queue pair (the connection's own or the user's).
  protection_domain& pd() const noexcept;
  completion_queue& cq() const noexcept;
  /// A non-owning view of the device rdma_cm chose (rdma_cm's own ibv_context).
  coverbs::device& get_device() const noexcept;
  /// The private data the peer sent with its request (passive side) or its reply (active side). The
  /// transport may pad it (IB CM rounds up to its field size), so lengths are at least what was sent.
  std::span<const std::byte> peer_private_data() const noexcept;
  /// Empty while connected; `errc::connection_reset` once the peer disconnected, `errc::disconnected`
  /// after a local disconnect, `errc::device_removed` when the device went away.
  error_code error() const noexcept;
  bool connected() const noexcept { return impl_ && !error(); }
  /// Local and peer addresses as "a.b.c.d:port" / "[v6]:port".
  std::string local_endpoint() const;
  std::string remote_endpoint() const;
  rdma_cm_id* native_handle() const noexcept;

  /// Disconnects (rdma_disconnect(3)): moves the queue pair to the error state — outstanding operations
  /// complete with `wc_errc::wr_flush_err` — and completes once rdma_cm reports the connection closed
  /// (RDMA_CM_EVENT_DISCONNECTED: the peer answered, or its retries ran out). Disconnecting a
  /// connection the peer already closed completes with success at once (via post).
  /// Every completion runs on the handler's associated executor, else the connection's (`get_executor()`,
  /// which an empty connection from a failed connect or accept also has), never inside this call.
  /// @par Completion Signature `void(error_code)`
  /// @par Errors errno of rdma_disconnect(3) other than EINVAL (EINVAL means it was not connected);
  /// ENOTCONN on an empty connection.
  /// @throws boost::asio::execution::bad_executor on a connection with no executor (default-constructed or
  /// moved-from) when the handler has no associated executor either: there is no thread to complete on.
  /// @par Per-Operation Cancellation Not supported: the disconnect request cannot be recalled.
  /// @par Thread Safety Call from the connection's executor.
  template <boost::asio::completion_token_for<void(error_code)> Token = default_token>
  auto async_disconnect(Token&& token = default_token{}) {
    return boost::asio::async_initiate<Token, void(error_code)>(
        [impl = impl_.get(), ex = impl_ ? executor_type() : ex_](auto handler) {
          const executor_type where = ex ? ex : detail::associated_io_executor(handler);
          detail::start_disconnect(impl, where, std::move(handler));
        },
        token);
  }

  /// Internal.
  explicit connection(std::shared_ptr<detail::connection_impl> impl) noexcept : impl_(std::move(impl)) {}

private:
  executor_type ex_;  // of an empty connection only
  std::shared_ptr<detail::connection_impl> impl_;
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
  template <boost::asio::completion_token_for<void(error_code, connection)> Token = default_token>
  auto async_accept(const connection_options& options, Token&& token = default_token{}) {
    return async_accept(get_executor(), options, std::forward<Token>(token));
  }
  /// As above, with the connection bound to `peer_executor` (e.g. a `loop_pool` member's): its queue pair
  /// is created, the request accepted and its rdma_cm events serviced there (see the file comment). The
  /// handler runs on its associated executor, else the listener's.
  /// @par Errors as above, and `errc::executor_mismatch` (posted, nothing taken from the backlog) when
  /// `options.cq` is serviced by another executor than `peer_executor`.
  template <boost::asio::completion_token_for<void(error_code, connection)> Token = default_token>
  auto async_accept(const executor_type& peer_executor, const connection_options& options,
                    Token&& token = default_token{}) {
    return boost::asio::async_initiate<Token, void(error_code, connection)>(
        [impl = impl_.get()](auto handler, const executor_type& peer, const connection_options& o) {
          detail::start_accept(*impl, peer, o, std::move(handler));
        },
        token, peer_executor, options);
  }
  /// As above with `listener_options::connection`.
  template <boost::asio::completion_token_for<void(error_code, connection)> Token = default_token>
  auto async_accept(const executor_type& peer_executor, Token&& token = default_token{}) {
    return async_accept(peer_executor, options_connection(), std::forward<Token>(token));
  }
  /// As the two above with the connection bound to `peer_context.get_executor()` (e.g. an `io_context`).
  template <class ExecutionContext, boost::asio::completion_token_for<void(error_code, connection)> Token = default_token>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  auto async_accept(ExecutionContext& peer_context, const connection_options& options,
                    Token&& token = default_token{}) {
    return async_accept(executor_type(peer_context.get_executor()), options, std::forward<Token>(token));
  }
  template <class ExecutionContext, boost::asio::completion_token_for<void(error_code, connection)> Token = default_token>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  auto async_accept(ExecutionContext& peer_context, Token&& token = default_token{}) {
    return async_accept(executor_type(peer_context.get_executor()), options_connection(), std::forward<Token>(token));
  }
  /// As `async_accept(options, token)` with `listener_options::connection`.
  template <boost::asio::completion_token_for<void(error_code, connection)> Token = default_token>
  auto async_accept(Token&& token = default_token{}) {
    return async_accept(options_connection(), std::forward<Token>(token));
  }

private:
  const connection_options& options_connection() const noexcept;
  std::shared_ptr<detail::listener_impl> impl_;
};

/// Connects to `host`:`port`: resolves the address (rdma_resolve_addr(3)) and the route
/// (rdma_resolve_route(3)), creates the queue pair per `options` on the device rdma_cm chose, moves it
/// to INIT, requests the connection (rdma_connect(3)), and on the reply moves it to RTR and RTS and
/// completes the handshake (rdma_establish(3)).
/// @param host numeric IPv4 or IPv6 address (no name lookup); an IPv6 link-local one with its interface
/// ("fe80::1%eth0"). Loopback and wildcard addresses (127.0.0.0/8, ::1, 0.0.0.0, ::) work only where the
/// device resolves them (InfiniBand); on RoCE / rxe connect to the address of the RDMA device's interface.
/// @param port decimal 1..65535
/// @par Completion Signature `void(error_code, connection)`
/// @par Errors `errc::invalid_address`, `errc::link_local_needs_scope`, `errc::invalid_port_number`,
/// `errc::private_data_too_long` (checked before anything starts); `errc::loopback_address` (a loopback or
/// wildcard host the device could not resolve or route); `errc::address_resolution_failed` (RDMA_CM_EVENT_ADDR_ERROR: no RDMA device
/// reaches the host, or it did not answer within resolve_address_timeout), `errc::route_resolution_failed`
/// (RDMA_CM_EVENT_ROUTE_ERROR), `errc::connection_refused` (RDMA_CM_EVENT_REJECTED: nobody listens on that
/// port, or the server refused), `errc::connection_unreachable` (RDMA_CM_EVENT_UNREACHABLE: no reply to the
/// request), `errc::connection_failed` (RDMA_CM_EVENT_CONNECT_ERROR), `boost::asio::error::timed_out`
/// (connect_timeout elapsed), `errc::device_mismatch`, `errc::executor_mismatch` (options.cq serviced by
/// another executor than `ex`; checked before anything starts), errno of the rdma_* calls (-1/errno) and
/// of ibv_create_qp / ibv_modify_qp.
/// @par Per-Operation Cancellation terminal, partial, total: completes with `operation_aborted`; the cm_id
/// and queue pair are destroyed (a request already sent is withdrawn by the peer's CM).
/// @par Thread Safety The connection is bound to `ex`, which may be another loop than the caller's: the
/// connect runs there; the handler runs on its associated executor, else `ex`.
/// @param ex where the connection is bound: an executor, or an execution context (e.g. an `io_context`)
/// standing for its executor. The default token is the executor's (`asio::default_completion_token_t`,
/// e.g. from `asio::as_tuple(asio::use_awaitable).as_default_on(ex)`), else `asio::deferred` (awaited by `co_await`).
template <detail::executor_or_context ExecutorOrContext,
          boost::asio::completion_token_for<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::string_view port,
                   const connect_options& options, Token&& token = Token{}) {
  return boost::asio::async_initiate<Token, void(error_code, connection)>(
      [ex = boost::asio::any_io_executor(detail::executor_of(ex))](auto handler, const std::string& h,
                                                                    const std::string& p, const connect_options& o) {
        detail::start_connect(ex, h, p, o, std::move(handler));
      },
      token, std::string(host), std::string(port), options);
}

/// As above with a numeric port.
template <detail::executor_or_context ExecutorOrContext,
          boost::asio::completion_token_for<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::uint16_t port, const connect_options& options,
                   Token&& token = Token{}) {
  return async_connect(ex, host, std::string_view(std::to_string(port)), options, std::forward<Token>(token));
}

/// As above with default `connect_options` (no options argument to write inside a `co_await`).
template <detail::executor_or_context ExecutorOrContext,
          boost::asio::completion_token_for<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::string_view port, Token&& token = Token{}) {
  return async_connect(ex, host, port, connect_options(), std::forward<Token>(token));
}

/// As above with a numeric port.
template <detail::executor_or_context ExecutorOrContext,
          boost::asio::completion_token_for<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::uint16_t port, Token&& token = Token{}) {
  return async_connect(ex, host, std::string_view(std::to_string(port)), connect_options(),
                       std::forward<Token>(token));
}

}  // namespace coverbs
