#pragma once
/// @file
/// `session`: one rdma_cm connection with its `message_endpoint`, ready to use, and what it owns until it closes
/// (window leases); `async_connect_session`, the client side. The server side (`async_serve`) is in
/// session_server.hpp.
///
/// @par No receiver-not-ready by design
/// The endpoint is made inside the connect or accept (`connection_options::prepare`), on the queue pair in INIT,
/// before the connection request or reply goes out: its receives are posted before the peer can send. It sends
/// nothing (not even its first credit message) until the connection is established (`message_endpoint::hold_sends`,
/// then `start_sending()` when the session is made), so no message ever meets a receive queue that is not ready.
///
/// @par Closing, in order
/// `async_close` (and, without waiting, destruction): (1) every kept window lease is revoked, and `async_close`
/// waits until each key is dead (so no late RDMA access reaches the memory behind it); (2) the endpoint's pending
/// operations complete with `operation_aborted` (`message_endpoint::shutdown`: its slots stay registered); (3) the
/// connection is disconnected — the queue pair leaves RTS, and `async_close` waits for rdma_cm's answer; (4) the
/// endpoint's slots are deregistered; (5) the queue pair, the connection's resources and the cm_id go. Destruction
/// cannot wait for (3): instead of disconnecting it moves the queue pair to the error state (nothing the peer sends
/// lands any more), then deregisters the slots, then the connection goes without a disconnect (the peer learns of it
/// from its own failed operations or rdma_cm's timeout) — prefer `async_close`.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use a session from its executor (its connection's).

#include <coverbs/connect.hpp>
#include <coverbs/connection.hpp>
#include <coverbs/connection_options.hpp>
#include <coverbs/detail/token_check.hpp>
#include <coverbs/error.hpp>
#include <coverbs/message_endpoint.hpp>
#include <coverbs/window_lease.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>

#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coverbs {

/// How a session's connection and endpoint are made (both sides).
struct session_options {
  session_options() = default;  // not an aggregate: see connection_options
  /// The connection (a server uses its `connection_options` part). Its `prepare` is replaced by the session's.
  connect_options connection;
  /// The endpoint's slots.
  message_options messages;
};

namespace detail {

/// Error code of what a coroutine threw: a system_error's code, else `errc::session_handler_threw`.
error_code code_of(const std::exception_ptr& e) noexcept;

/// Runs `a` on `ex` and completes `token` with its result, `void(error_code)`; an exception completes it with
/// `code_of`. The handler runs on its associated executor (else `ex`), never inside this call. With
/// `Cancellable`, the handler's cancellation slot reaches the coroutine; without, a cancellation is ignored (an
/// operation that must run to its end once started, such as closing in order).
template <bool Cancellable, class Token>
auto spawn_for_error(const boost::asio::any_io_executor& ex, boost::asio::awaitable<error_code> a, Token&& token) {
  return boost::asio::async_initiate<Token, void(error_code)>(
      [ex](auto handler, boost::asio::awaitable<error_code> a) {
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        auto where = boost::asio::get_associated_executor(handler, ex);
        auto done =
            boost::asio::bind_executor(where, [h = std::move(handler)](std::exception_ptr e, error_code ec) mutable {
              std::move(h)(e ? code_of(e) : ec);
            });
        if constexpr (Cancellable) {
          boost::asio::co_spawn(ex, std::move(a), boost::asio::bind_cancellation_slot(slot, std::move(done)));
        } else {
          (void)slot;
          boost::asio::co_spawn(ex, std::move(a), std::move(done));
        }
      },
      token, std::move(a));
}

}  // namespace detail

/// A connection and its message endpoint, made before the connection was established, and the window leases
/// the session keeps until it closes. Move-only; empty when default-constructed or moved from.
class session {
public:
  using executor_type = boost::asio::any_io_executor;
  using default_token = detail::default_token_t<executor_type>;

  session() noexcept = default;
  /// Takes `c`, which an accept or connect with `session_connection_options` made, and starts its endpoint's
  /// sends (the first credit message goes out).
  /// @throws system_error `errc::not_a_session_connection` when `c` is empty or holds no message endpoint.
  explicit session(connection c);
  session(session&&) noexcept;
  session& operator=(session&&) noexcept;
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  /// Closes without waiting: revokes the kept leases (their keys die asynchronously), closes the endpoint,
  /// destroys the connection (its cm_id's destruction disconnects the peer).
  ~session();

  explicit operator bool() const noexcept { return state_ != nullptr; }
  executor_type get_executor() const noexcept;
  message_endpoint& endpoint() const noexcept;
  connection& conn() const noexcept;
  queue_pair& qp() const noexcept { return conn().qp(); }
  protection_domain& pd() const noexcept { return conn().pd(); }

  /// Keeps `lease` until the session closes, where it is revoked first (before the endpoint and the
  /// connection). @returns the kept lease (valid until the session is closed or moved).
  window_lease& keep(window_lease lease);

  /// Why the session is over, or empty while it is healthy: the connection's error (`errc::connection_reset`: the
  /// peer disconnected, `errc::device_removed`), else the endpoint's (`errc::protocol_violation`,
  /// `errc::credit_overrun`, a `wc_errc`; not `errc::endpoint_closed`), else empty. The endpoint's operations that
  /// fail because the session failed complete with the same cause: `void(error_code, ...)` with
  /// `errc::connection_reset` when the peer disconnected (from the connection, through its queue pair's
  /// `error()`; see message_endpoint.hpp, Errors), not with the `wc_errc::wr_flush_err` of the flushed requests,
  /// which remains only when nothing names a cause.
  error_code error() const noexcept;
  /// What the endpoint's `diagnostic()` says (e.g. which header field was wrong).
  std::string diagnostic() const;

  /// Closes in the order of the file comment and completes once every kept key is dead and the disconnect is
  /// answered (or failed: a peer already gone answers at once). The session is empty afterwards.
  /// @par Completion Signature `void(error_code)`: the first error of a step (the steps go on regardless).
  /// @par Per-Operation Cancellation Not supported, and ignored: once started, every step runs to its end (a
  /// close cancelled halfway would complete before the keys are dead).
  template <completion_token_or_handler<void(error_code)> Token = default_token>
  auto async_close(Token&& token = default_token{}) {
    const executor_type ex = get_executor();
    return detail::spawn_for_error<false>(ex, close_steps(std::move(state_)), std::forward<Token>(token));
  }

  struct state;

private:
  struct state_deleter {
    void operator()(state* s) const noexcept;
  };
  using state_ptr = std::unique_ptr<state, state_deleter>;
  static boost::asio::awaitable<error_code> close_steps(state_ptr s);
  state_ptr state_;
};

/// `base` with `connection_options::prepare` set to make a message endpoint with `messages` (held until the
/// connection is established): the options of an accept or connect whose connection becomes a `session`.
connection_options session_connection_options(connection_options base, const message_options& messages);

/// Connects to `host`:`port` (as `async_connect`) with a message endpoint made before the request goes out, and
/// completes with the session, its endpoint sending.
/// @par Completion Signature `void(error_code, session)`
/// @par Errors those of `async_connect`, and what `message_endpoint`'s constructor throws (e.g.
/// `errc::device_limit_exceeded`: recv_slots + 4 above `connection.qp.max_recv_wr`).
/// @par Per-Operation Cancellation As `async_connect`.
template <class Executor, completion_token_or_handler<void(error_code, session)> Token =
                              detail::default_token_t<boost::asio::any_io_executor>>
auto async_connect_session(const Executor& ex, std::string_view host, std::uint16_t port,
                           const session_options& options, Token&& token = Token{}) {
  connect_options o = options.connection;
  static_cast<connection_options&>(o) = session_connection_options(options.connection, options.messages);
  return boost::asio::async_initiate<Token, void(error_code, session)>(
      [](auto handler, boost::asio::any_io_executor ex, std::string host, std::uint16_t port, connect_options o) {
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        auto where = boost::asio::get_associated_executor(handler, ex);
        async_connect(
            ex, host, port, o,
            boost::asio::bind_cancellation_slot(
                slot, boost::asio::bind_executor(where, [h = std::move(handler)](error_code ec, connection c) mutable {
                  session s;
                  if (!ec) {
                    try {
                      s = session(std::move(c));
                    } catch (...) {
                      ec = detail::code_of(std::current_exception());
                    }
                  }
                  std::move(h)(ec, std::move(s));
                })));
      },
      token, boost::asio::any_io_executor(ex), std::string(host), port, std::move(o));
}

}  // namespace coverbs
