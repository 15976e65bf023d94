#pragma once
// Private to lib/: the state behind a `connection` — its cm_id and event channel, the queue pair and the
// resources it is created on, and the steps of its life: resolving and connecting (active side), accepting
// (passive side, handed over by a listener), established, disconnecting, down. The rdma_cm events of its own
// channel drive it, on its executor only.

#include <coverbs/completion_queue.hpp>
#include <coverbs/connection_options.hpp>
#include <coverbs/detail/cm_access.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>
#include <coverbs/protection_domain.hpp>
#include <coverbs/queue_pair.hpp>

#include "cm/cm_event.hpp"
#include "cm/event_channel.hpp"
#include "cm/setup_op.hpp"
#include "core/io_owner.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace coverbs::detail {

class connection_impl final : public std::enable_shared_from_this<connection_impl>, public io_owner {
public:
  enum class phase {
    idle,
    resolving_address,
    resolving_route,
    connecting,
    accepting,
    established,
    disconnecting,
    down
  };

  explicit connection_impl(const boost::asio::any_io_executor& ex);
  /// The io_context is shutting down: its timer and descriptor objects go now, while the services exist.
  void on_context_shutdown() noexcept override;
  /// A connect, accept or disconnect in progress, or the wait for its rdma_cm events (outstanding_work.hpp).
  void describe_work(std::vector<work_holder>& out) const override;
  ~connection_impl() { close(); }

  boost::asio::any_io_executor ex_;
  std::unique_ptr<cm_channel> channel_;
  rdma_cm_id* id_ = nullptr;
  device device_;
  std::optional<protection_domain> own_pd_;
  std::optional<completion_queue> own_cq_;
  protection_domain* pd_ = nullptr;
  completion_queue* cq_ = nullptr;
  std::optional<queue_pair> qp_;
  std::vector<std::byte> peer_private_data_;
  std::shared_ptr<void> prepared_;  // what connection_options::prepare returned; released first by close()
  error_code error_;
  phase phase_ = phase::idle;
  std::shared_ptr<setup_op> op_;                    // connect / handshake in progress
  disconnect_handler disconnect_;                   // disconnect in progress
  std::optional<boost::asio::steady_timer> timer_;  // reset only when the io_context shuts down
  connection_options options_;
  std::chrono::milliseconds route_timeout_{2000};
  bool waiting_ = false, closed_ = false;
  bool passive_ = false;       // accepted by a listener
  // For the metrics, whether the connection was handed to the user (bit 0: by an accept or a connect, counted
  // as accepted / connected) and how it ended (bits 1-2: 0 not yet, else 1 + the cause, end_cause). Only a
  // handed-out connection's end is counted, once, by whichever of the two comes second: a connection of a
  // listener's backlog may end (on its own loop) before an accept hands it out (on the listener's).
  std::atomic<std::uint8_t> end_state_{0};
  /// Marks it handed out (make_connection), counting its end if it has ended already.
  void note_handed_out() noexcept;
  bool loopback_dst_ = false;  // connecting to a loopback or wildcard address
  /// A listener's handshake on the accept's own completion queue (`options.cq`): the entries its queue pair
  /// reserved there, given back until the requester finished the handshake. Several handshakes may run on one
  /// accept's options (half-open peers, see listener::async_accept) though only one can become its
  /// connection; nothing completes on a queue pair nobody can post to, so only an established one holds entries.
  std::size_t deferred_entries_ = 0;

  /// Waits (once) for the event channel to be readable; then `on_readable`.
  void wait();
  /// Fails the setup in progress with `timed_out` after `limit` (zero or less: no limit).
  void start_timer(std::chrono::milliseconds limit);
  /// Fails the pending connect/accept with `ec` and releases everything (the peer's CM sees a reject or
  /// a disconnect request when the cm_id is destroyed).
  void fail(error_code ec, bool post);
  /// An rdma_* call on the cm_id (-1 and errno). While a listener accepts a request (passive, not yet
  /// accepted), EINVAL means the request is no longer there to accept: rdma_cm drops the events of a request
  /// not yet handed to the user, so a requester that gave up shows only as this.
  void check_cm(long rc, const std::string& what) const;
  /// Reads every pending event and handles it (`on_event`); waits again while events are expected.
  void on_readable(const error_code& ec);
  /// One event of the connection's cm_id, per phase. @throws system_error from the step it starts
  void on_event(const cm_event& e);
  /// An error event: fails a pending connect/accept, else takes an established connection down.
  void fail_or_drop(errc why);
  /// An established connection ended (`local`: by this side, async_disconnect or destruction; else by the peer's
  /// disconnect; `failed`: a device event): counts its cause, once, when it was handed out (end_state_). An
  /// error when its queue pair had failed first (a completion with an error status other than a flush, or a
  /// device event), whoever disconnected then.
  void count_end(bool local, bool failed = false) noexcept;
  /// Protection domain, completion queue and queue pair on the cm_id's device; the queue pair in INIT, then
  /// `connection_options::prepare`.
  void setup_qp();
  /// RTR and RTS with rdma_cm's attributes; `responder_resources` / `initiator_depth` >= 0 override them.
  void to_rtr_rts(int responder_resources, int initiator_depth);
  /// The parameters of the request (active side) or the reply (passive side) from `options_`.
  rdma_conn_param conn_param(std::uint8_t responder_resources, std::uint8_t initiator_depth) const;
  /// Active side, route resolved: send the connection request.
  void request();
  /// Passive side, on the connection's executor: take over the requester's cm_id (already moved to
  /// `raw`, its own event channel, by the listener), bring the queue pair to RTS, accept.
  void accept(const cm_event& e, rdma_event_channel* raw);
  /// The handshake finished (reply or ready-to-use received): hands the connection to the setup's operation.
  void established();
  /// Releases everything, in order: queue pair, own completion queue and domain, cm_id, channel, lease. A
  /// disconnect in progress completes with `operation_aborted`. Idempotent.
  void close() noexcept;
};

/// Closes `c` on its own executor (its cm_id's destruction rejects or disconnects the peer). Null: nothing.
void drop(std::shared_ptr<connection_impl> c);

}  // namespace coverbs::detail
