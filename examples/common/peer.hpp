#pragma once
// What an example does with its peer, every wait bounded: a patient connect (a client may start with its
// server), `peer_timeout`, a disconnect that waits for the peer's answer only so long, and `cause`, what
// really ended an operation (a port that went down, not the flush it caused).
#include "common/command_line.hpp"
#include "common/prelude.hpp"

#include <coverbs/cm.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

namespace example {

/// `coverbs::async_connect` to `where`; a refused request (nobody listens there yet) is tried again every
/// 100 ms for up to `patience`, so a client may be started together with its server. Each try's error is
/// stored in `*last_try` when given, so a caller whose own time limit ends first can still say why (e.g.
/// "connection refused", not that nothing replied).
/// @returns the last try's error (success, or as `async_connect`) and the connection.
inline asio::awaitable<std::tuple<error_code, coverbs::connection>>
connect_patiently(asio::any_io_executor ex, command_line where, coverbs::connect_options options,
                  std::chrono::milliseconds patience = std::chrono::seconds(10), error_code* last_try = nullptr) {
  const auto give_up = clock::now() + patience;
  for (;;) {
    auto [ec, conn] = co_await coverbs::async_connect(ex, where.address, where.port, options, tuple);
    if (last_try) *last_try = ec;
    if (ec != coverbs::errc::connection_refused || clock::now() >= give_up) co_return std::tuple(ec, std::move(conn));
    asio::steady_timer pause(ex, std::chrono::milliseconds(100));
    co_await pause.async_wait(tuple);
  }
}

/// How long an example waits for anything its peer must do (a message, an echo, a reply, the answer to a
/// disconnect) before it gives that peer up: generous for a busy emulated guest, short enough that no
/// process hangs on a peer or a port that is gone.
inline constexpr std::chrono::seconds peer_timeout{20};

/// "20 s", for messages.
inline std::string seconds_text(std::chrono::seconds s) { return std::to_string(s.count()) + " s"; }

/// What ended an operation on `conn` that completed with `ec`, for the report: the queue pair's own error
/// when a device event moved it to the error state (`errc::port_error`, `device_fatal`, `qp_fatal`, ...: the
/// flushed operation's `wr_flush_err` is only the consequence); `errc::port_error` when the connection's port
/// is down now (an operation may fail, e.g. with rxe's `loc_qp_op_err`, before the port event was read);
/// else `ec`. Success stays success.
inline error_code cause(const error_code& ec, const coverbs::connection& conn) {
  if (!ec || !conn) return ec;
  using coverbs::errc;
  const error_code qp = conn.qp().error();
  for (errc e : {errc::port_error, errc::device_fatal, errc::qp_fatal, errc::qp_request_error, errc::qp_access_error,
                 errc::cq_error})
    if (qp == e) return qp;
  const rdma_cm_id* id = conn.native_handle();
  // rxe fails a request whose packet finds no route (the link just went down) with loc_qp_op_err, which can
  // happen before the port's state says so: then the port gets up to 500 ms to catch up.
  const bool unrouted = qp == coverbs::wc_errc::loc_qp_op_err || ec == coverbs::wc_errc::loc_qp_op_err;
  for (int attempt = 0; attempt < (unrouted ? 10 : 1); ++attempt) {
    if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    try {
      if (id && id->port_num != 0 && !conn.get_device().query_port(id->port_num).active())
        return coverbs::make_error_code(errc::port_error);
    } catch (const coverbs::system_error&) {  // the device is gone: nothing more to say than `ec`
      return ec;
    }
  }
  return ec;
}

/// How long a disconnect of `conn` waits for rdma_cm's answer: `limit`, or 1 s at most when the connection
/// ended by its port going down (`end` says so, or its queue pair failed and `cause` finds the port's error:
/// the port's event may not have been read yet, the port's state is asked then): a port that is down carries
/// no answer, and the kernel's connection manager then holds the destruction of the connection for its own
/// timeout too (10 s and more on rxe), so a full `limit` on top could outlast what a user waits.
inline std::chrono::milliseconds disconnect_limit(const coverbs::connection& conn, const error_code& end = {},
                                                  std::chrono::milliseconds limit = peer_timeout) {
  const error_code qp = conn.qp().error();
  if (end == coverbs::errc::port_error || (qp && cause(qp, conn) == coverbs::errc::port_error))
    return std::min<std::chrono::milliseconds>(limit, std::chrono::seconds(1));
  return limit;
}

/// Disconnects `conn` (connection::async_disconnect: its queue pair goes to the error state at once, so its
/// operations flush) and waits at most `limit` for rdma_cm to report the connection closed, which takes the
/// peer's answer, or rdma_cm's retries when the peer or the port is gone (1 s at most after the port went
/// down: disconnect_limit).
/// @returns the disconnect's error, or `std::errc::timed_out` past `limit` (the disconnect then stays
/// pending; destroying the connection ends it). Needs a non-empty connection.
inline asio::awaitable<error_code> disconnect_within(coverbs::connection& conn,
                                                     std::chrono::milliseconds limit = peer_timeout) {
  limit = disconnect_limit(conn, {}, limit);
  struct state {
    explicit state(const asio::any_io_executor& ex) : done(ex) {}
    asio::steady_timer done;
    std::optional<error_code> ec;
  };
  const auto s = std::make_shared<state>(conn.get_executor());
  s->done.expires_after(limit);
  conn.async_disconnect([s](error_code ec) {
    s->ec = ec;
    s->done.cancel();
  });
  co_await s->done.async_wait(tuple);
  co_return s->ec ? *s->ec : error_code(std::make_error_code(std::errc::timed_out));
}

/// The asynchronous events (coverbs::device_events) of the devices this program's listener and connections
/// use, read for as long as the watch exists. With it, a port going down moves every queue pair of this
/// process on that port to the error state at once: their operations flush and `queue_pair::error()` says
/// `errc::port_error` (see `cause`). Without a reader nothing does: a posted receive waits forever, and a
/// send fails only after the transport's retries, as a local error that does not name the port. Each port
/// and fatal event is printed once on stderr, as "`who`: rxe0 port 1 went down (port error) ...".

}  // namespace example
