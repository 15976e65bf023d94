#pragma once
// Private to lib/: the state behind a `listener` — a listening cm_id and its accepts. Requests are taken
// while an accept is pending, and each is handshaken on its own (`handshake_op`), so a requester that never
// finishes holds nothing but its handshake; every handshake reports back here (`on_handshake`) and an
// established one completes an accept. Listener's executor only.

#include <coverbs/device.hpp>
#include <coverbs/error.hpp>
#include <coverbs/listener.hpp>

#include "cm/accept_op.hpp"
#include "cm/cm_event.hpp"
#include "cm/connection_impl.hpp"
#include "cm/event_channel.hpp"
#include "cm/handshake_op.hpp"
#include "core/io_owner.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

struct rdma_cm_id;

namespace coverbs::detail {

class listener_impl final : public std::enable_shared_from_this<listener_impl>, public io_owner {
public:
  listener_impl(const boost::asio::any_io_executor& ex, const listener_options& options) : ex_(ex), options_(options) {}
  ~listener_impl() { close(); }

  /// The io_context is shutting down: the channel's descriptor and the timer go now, while the services exist.
  void on_context_shutdown() noexcept override;
  /// Pending accepts, handshakes in progress and connections ready to hand over (outstanding_work.hpp).
  void describe_work(std::vector<work_holder>& out) const override;
  /// Once the channel (and with it the descriptor) exists.
  void enroll_in_context();

  /// How long a request waits in the backlog while every pending accept is mid-handshake before it is
  /// handshaken alongside (a well-behaved requester finishes well within it; a half-open one never does).
  static constexpr std::chrono::milliseconds grace{2000};
  /// Once overdue, how long after one request is taken alongside before the next is: a well-behaved requester
  /// finishes within it (its ready-to-use is one round trip away) and completes the accept, so the next
  /// request gets a free accept of its own instead of racing it for one accept's resources (the loser would be
  /// dropped, `listener_stats::dropped`); a half-open one costs the backlog no more than this.
  static constexpr std::chrono::milliseconds alongside_spacing{250};

  boost::asio::any_io_executor ex_;
  listener_options options_;
  std::unique_ptr<cm_channel> channel_;
  rdma_cm_id* id_ = nullptr;
  device device_;
  std::deque<std::shared_ptr<accept_op>> accepts_;         // pending accepts, oldest first
  std::vector<std::shared_ptr<handshake_op>> handshakes_;  // in progress
  /// Established connections no pending accept could take, with the handshake that made them.
  std::deque<std::pair<std::shared_ptr<handshake_op>, std::shared_ptr<connection_impl>>> ready_;
  listener_stats stats_;
  std::optional<boost::asio::steady_timer> grace_timer_{std::in_place,
                                                        ex_};  // reset only when the io_context shuts down
  bool waiting_ = false, closed_ = false;
  bool grace_armed_ = false;
  /// Every pending accept has been mid-handshake for `grace`: requests are taken alongside until one completes.
  bool overdue_ = false;
  std::chrono::steady_clock::time_point last_alongside_{};  ///< when a request was last taken alongside
  std::uint64_t accepts_completed_ = 0;  ///< for the grace timer: an accept completed since it was armed

  std::size_t most_handshakes() const noexcept { return static_cast<std::size_t>(std::max(options_.backlog, 1)); }
  bool free_accept() const noexcept {
    return std::any_of(accepts_.begin(), accepts_.end(), [](const auto& a) { return a->handshakes == 0; });
  }
  /// Requests are taken while an accept is pending with no handshake in progress (or all have been busy for
  /// `grace`, and the last one taken alongside had `alongside_spacing` to finish) and fewer than `backlog`
  /// handshakes run; otherwise they wait in the kernel's backlog.
  bool taking() const noexcept {
    return !closed_ && !accepts_.empty() && handshakes_.size() < most_handshakes() &&
           (free_accept() || (overdue_ && std::chrono::steady_clock::now() - last_alongside_ >= alongside_spacing));
  }

  /// Every pending accept is mid-handshake: after `grace` requests are taken alongside, so that peers which
  /// never finish (half-open) hold the listener no longer than that. Once overdue: wakes when the next
  /// request may be taken alongside.
  void arm_grace();
  /// Waits for a request while `taking()`, else arms the grace timer.
  void wait();
  /// Takes connection requests while `taking()`; a device removal or a read error fails every pending accept.
  void on_readable(error_code ec);

  /// On the listener's executor: moves the request's cm_id to a new event channel of its own (here, so
  /// that nothing reads the listener's channel meanwhile: rdma_migrate_id(3)), then hands it, as a handshake
  /// with the options of a pending accept, to that accept's peer executor, which creates the connection and
  /// accepts. Until then events for the cm_id wait in the kernel on the new channel.
  void on_request(const cm_event& e);
  /// Handshake `h` ended: established (`c`) or failed (`ec`).
  void on_handshake(const std::shared_ptr<handshake_op>& h, error_code ec, std::shared_ptr<connection_impl> c);
  /// The accept an established handshake completes: its own if pending, else the oldest with the same options.
  std::shared_ptr<accept_op> take_accept_for(const handshake_op& h, const std::shared_ptr<accept_op>& owner);
  /// Completes accept `op` with `ec` / `c` (taking it out of `accepts_`). Its handshakes in progress go on
  /// (`settle`): after a failure or cancellation at once (the user may destroy its pd/cq now), after a success
  /// once the handler had its turn (an accept loop starts its next accept there).
  void finish(std::shared_ptr<accept_op> op, error_code ec, std::shared_ptr<connection_impl> c, bool post);
  /// Handshakes whose accept completed: each goes on for the oldest pending accept with the same options.
  /// Without one, those on the user's pd/cq end now (the user may destroy them); the others go on and wait in
  /// `ready_` once established.
  void settle();
  /// Accept `op`, if still pending, completes with `operation_aborted` (posted).
  void cancel(const std::shared_ptr<accept_op>& op);
  /// Every pending accept completes with `ec`.
  void fail_all(error_code ec, bool post);
  /// Fails the pending accepts, ends the handshakes, drops the ready connections, destroys the cm_id and the
  /// channel. Idempotent.
  void close() noexcept;
};

}  // namespace coverbs::detail
