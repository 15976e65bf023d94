#pragma once
// Private to lib/: a listener's handshake — one connection request being accepted, with the options of a
// pending accept (its `owner`), on that accept's peer executor. It has no handler: it reports to its listener
// (`listener_impl::on_handshake`), which completes an accept with the connection, keeps it for the next one,
// or drops it. So a requester that never finishes (a half-open peer) holds its handshake, never an accept.

#include <coverbs/connection_options.hpp>

#include "cm/accept_op.hpp"
#include "cm/setup_op.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <memory>

namespace coverbs::detail {

class listener_impl;

struct handshake_op final : setup_op, std::enable_shared_from_this<handshake_op> {
  /// The options of the accept that started it, and its peer executor (where the connection is bound).
  connection_options options;
  boost::asio::any_io_executor peer;
  /// The listener it reports to when it ends.
  std::weak_ptr<listener_impl> home;
  /// The accept whose options made the queue pair; null once that accept completed and no other pending one
  /// has the same options. Listener's executor only.
  std::shared_ptr<accept_op> owner;
  /// Once accepted, how long the requester may take to finish (`listener_options::establish_timeout`).
  std::chrono::milliseconds timeout{0};
  /// The connection, once the request reached the peer executor (`handed_request`).
  std::weak_ptr<connection_impl> conn;

  /// Both report to the listener, on its executor (`report`).
  void established(std::shared_ptr<connection_impl> c) override;
  void failed(error_code ec, bool post) override;
  std::chrono::milliseconds establish_timeout() const noexcept override { return timeout; }

  /// The handshake ended: established (`c` set) or failed (`ec`). Runs the listener's side on its executor;
  /// with the listener gone, `c` is closed.
  void report(error_code ec, std::shared_ptr<connection_impl> c);
  /// Ends the handshake from the listener's side (its accept completed with no successor, or the listener
  /// closed): fails its connection with `operation_aborted` on the connection's executor.
  static void end(const std::shared_ptr<handshake_op>& h);
};

/// Whether a connection handshaken for one accept may complete accept `a`: same connection parameters, and the
/// same peer executor and resources, or both placements on one loop pool with their members' own pd and cq
/// (`member::connection_options()`).
bool same_options(const handshake_op& h, const accept_op& a);

}  // namespace coverbs::detail
