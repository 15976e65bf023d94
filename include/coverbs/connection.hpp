#pragma once
/// @file
/// `connection`: an established RC connection made through rdma_cm (librdmacm) — by `listener::async_accept`
/// (coverbs/listener.hpp) or `async_connect` (coverbs/connect.hpp) — and `connection::async_disconnect`.
///
/// Event channels: every listener and every connection owns one rdma_cm event channel. Its fd
/// (O_NONBLOCK) is waited on as an Asio descriptor on the object's executor; each event is copied,
/// acknowledged at once with rdma_ack_cm_event(3) and handed to the owner named by `rdma_cm_id::context`.
/// An accepted connection's cm_id is moved from the listener's channel to its own (rdma_migrate_id(3)),
/// so a connection never depends on its listener. One fd per connection keeps destruction simple and
/// local (rdma_destroy_id never waits: every event is acknowledged as soon as it is read).
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

#include <coverbs/detail/token_check.hpp>
#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/cm_access.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>
#include <coverbs/protection_domain.hpp>
#include <coverbs/queue_pair.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>

struct rdma_cm_id;

namespace coverbs {

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
  /// What `connection_options::prepare` returned (made before the peer could send); null without one, or on an
  /// empty connection. Destroying the connection drops its reference before the queue pair.
  const std::shared_ptr<void>& prepared() const noexcept;
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
  template <completion_token_or_handler<void(error_code)> Token = default_token>
  auto async_disconnect(Token&& token = default_token{}) {
    return detail::initiate_checked<Token, void(error_code)>(
        [impl = impl_.get(), ex = impl_ ? executor_type() : ex_](auto handler) {
          const executor_type where = ex ? ex : detail::associated_io_executor(handler);
          detail::start_disconnect(impl, where, std::move(handler));
        },
        token);
  }

private:
  friend struct detail::cm_access;
  explicit connection(std::shared_ptr<detail::connection_impl> impl) noexcept : impl_(std::move(impl)) {}

  executor_type ex_;  // of an empty connection only
  std::shared_ptr<detail::connection_impl> impl_;
};

}  // namespace coverbs
