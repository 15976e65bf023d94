#pragma once
/// @file
/// `async_serve`: accepts sessions on a `listener` — on the listener's loop, or spread over a `loop_pool` — and
/// runs one coroutine per session; each ends on its own, closed in order, with a report of why.
///
/// ```cpp
/// co_await coverbs::async_serve(l, [](coverbs::session& s) -> asio::awaitable<void> {
///   for (;;) {
///     auto request = co_await s.endpoint().async_receive_request(asio::use_awaitable);
///     co_await s.endpoint().async_reply(request, request.bytes(), asio::use_awaitable);
///   }
/// }, options);
/// ```
///
/// @par What ends a session, and what it reports
/// The session's coroutine returning or throwing ends it. An operation of a session whose peer disconnected or
/// broke the protocol fails (its endpoint failed) with that cause (`errc::connection_reset`,
/// `errc::protocol_violation`, ...: what `session::error()` says, not the `wc_errc::wr_flush_err` of the flushed
/// requests), so a coroutine that awaits its endpoint ends then. The
/// session is then closed in order (`session::async_close`: leases revoked, endpoint closed, disconnected) and
/// `server_options::on_end` gets a `session_report`: `reason` is the connection's error (`errc::connection_reset`:
/// the peer disconnected), else the endpoint's (`errc::protocol_violation` — a bad header, a length above the slot
/// size —, `errc::credit_overrun`: more messages than credits, a `wc_errc`), else the error of what the coroutine
/// threw (`errc::session_handler_threw` for an exception without one), else empty (it returned). A peer that
/// breaks the protocol ends its own session only: the server and the other sessions go on.
///
/// @par Bounds a server keeps against its peers
/// `server_options::max_sessions` caps the sessions running at once: at the cap the server accepts nothing, so
/// connection requests wait in the listener's backlog (a requester whose request waits longer than its connect
/// timeout gets `errc::connection_unreachable`) until a session ends. `server_options::idle_timeout` ends a
/// session in which nothing was received or sent for that long (`errc::session_idle`): a peer that connects and
/// stays silent holds a session's slots and a place under the cap only that long.
///
/// @par Per-Operation Cancellation
/// Terminal: `async_serve` stops accepting and completes with `operation_aborted`; sessions already running go
/// on to their own end (each still reports).

#include <coverbs/detail/token_check.hpp>
#include <coverbs/listener.hpp>
#include <coverbs/loop_pool.hpp>
#include <coverbs/session.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace coverbs {

/// Why a session ended, for the server's log.
struct session_report {
  error_code reason;              ///< see the file comment; empty: the coroutine returned, nothing failed
  /// The endpoint's diagnostic, or the exception's what(); for a failed accept "accept: " and what the session's
  /// `connection_options::prepare` threw ("accept: prepare threw: " + what(), e.g. message_endpoint's constructor
  /// refusing `message_options`; `reason` is its error code), else the error's message.
  std::string diagnostic;
  std::string peer;               ///< the peer's address ("a.b.c.d:port")
  message_statistics statistics;  ///< the endpoint's, at the end
  error_code close_error;         ///< the first error of closing (`session::async_close`), usually empty
};

/// How a server accepts and reports.
struct server_options {
  server_options() = default;  // not an aggregate: see connection_options
  /// Each session's connection (its `connection_options` part) and endpoint.
  session_options session;
  /// Spread sessions over this pool (the least loaded member takes the next accept; a session runs on its
  /// member's loop, its queue pair on the member's completion queue); null: on the listener's executor. The pool
  /// is made with the listener's device, runs, and outlives the server and its sessions.
  loop_pool* pool = nullptr;
  /// Called on the session's executor once a session is closed; also for a failed accept (`peer` empty).
  std::function<void(const session_report&)> on_end;
  /// The most sessions running at once (0: no limit); see the file comment. A session gives its place back when
  /// its coroutine ends, and also when its coroutine frame is destroyed without ending (its io_context — a pool
  /// member's — destroyed while it was suspended; no `on_end` then); by a post to the listener's executor, none
  /// once the listener's io_context has shut down.
  std::size_t max_sessions = 0;
  /// A session quiet for this long — no message or credit update received or sent — is ended with
  /// `errc::session_idle` (zero: never). Checked four times per period, so it ends within 1.25 times it. A
  /// handler that works on one request longer than this without sending anything must allow more.
  std::chrono::milliseconds idle_timeout{0};
};

/// A session's coroutine: runs on the session's executor, holds the session by reference while it runs.
using session_handler = std::function<boost::asio::awaitable<void>(session&)>;

namespace detail {
boost::asio::awaitable<error_code> serve_loop(listener& l, session_handler handler, server_options options);
}  // namespace detail

/// Accepts on `l` until cancelled, running `handler` once per session (see the file comment).
/// @par Completion Signature `void(error_code)`: `operation_aborted` once cancelled; `invalid_argument` at once
/// for an empty `handler`. A failed accept is reported to `on_end` (`reason` its error; `diagnostic` what a
/// throwing `prepare` said, see `session_report`; the peer is refused) and the server goes on, after a pause that
/// doubles from 10 ms to 1 s while accepts keep failing (reset by a session accepted).
/// @par Sessions running when it completes go on to their own end (each still reported to `on_end`): end them
/// through your handler (e.g. a stop signal it awaits) before the pool or the listener goes.
/// @par Thread Safety Any thread, also before the listener's io_context runs (as `main` in docs/messaging.md
/// does): the call takes its arguments and `co_spawn`s the accept loop onto the listener's executor, which
/// dispatches it there (it starts inside the call on a thread running that executor, else once one does), so
/// everything the loop does with `l` runs on that executor. `l` outlives the operation.
template <completion_token_or_handler<void(error_code)> Token = detail::default_token_t<listener::executor_type>>
auto async_serve(listener& l, session_handler handler, const server_options& options = {}, Token&& token = Token{}) {
  return detail::spawn_for_error<true>(l.get_executor(), detail::serve_loop(l, std::move(handler), options),
                                       std::forward<Token>(token));
}

}  // namespace coverbs
