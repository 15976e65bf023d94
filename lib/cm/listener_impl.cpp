// A listener's accepts: taking requests while an accept is pending (and, after a grace, alongside busy ones),
// handing each to its accept's peer executor as a handshake, and completing accepts as handshakes end.

#include "cm/listener_impl.hpp"

#include "cm/address.hpp"
#include "cm/completion.hpp"
#include "cm/handed_request.hpp"
#include "core/metrics.hpp"
#include "core/readiness.hpp"
#include "core/work_phrase.hpp"
#include "runtime/pool_lease.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <rdma/rdma_cma.h>

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {

/// The requester gave up on the handshake (or never existed any more): not this side's failure.
bool peer_gave_up(const error_code& ec) {
  return ec == errc::request_abandoned || ec == errc::connection_refused || ec == errc::connection_failed ||
         ec == errc::connection_unreachable || ec == errc::connection_reset;
}

}  // namespace

void listener_impl::on_context_shutdown() noexcept {
  if (channel_) channel_->release_fd();
  grace_timer_.reset();
}

void listener_impl::describe_work(std::vector<work_holder>& out) const {
  work_phrase p;
  p.add(accepts_.size(), "async_accept pending", "async_accept calls pending");
  p.add(handshakes_.size(), "handshake in progress", "handshakes in progress");
  p.add(ready_.size(), "connection ready, waiting for an accept", "connections ready, waiting for an accept");
  if (p.empty()) return;
  const std::string where = id_ ? endpoint_string(rdma_get_local_addr(id_)) : std::string("?");
  out.push_back({"listener", "listener on " + where, p.count(),
                 p.text() + (grace_armed_ ? " (its backlog's grace timer is armed)" : "")});
}

void listener_impl::enroll_in_context() { enroll(asio::query(ex_, asio::execution::context)); }

void listener_impl::arm_grace() {
  if (grace_armed_ || closed_ || accepts_.empty() || free_accept() || !grace_timer_) return;
  if (overdue_ && handshakes_.size() >= most_handshakes()) return;  // a handshake that ends calls wait()
  grace_armed_ = true;
  if (overdue_)
    grace_timer_->expires_at(last_alongside_ + alongside_spacing);
  else
    grace_timer_->expires_after(grace);
  grace_timer_->async_wait([weak = weak_from_this(), round = accepts_completed_](const error_code& ec) {
    auto self = weak.lock();
    if (!self) return;
    self->grace_armed_ = false;
    // An accept completed since (its cancel may come too late for a timer that had expired): a new grace.
    if (ec || self->closed_ || self->accepts_.empty() || self->free_accept() || round != self->accepts_completed_)
      return self->wait();
    self->overdue_ = true;
    self->wait();
  });
}

void listener_impl::wait() {
  if (!taking()) return arm_grace();
  if (waiting_ || !channel_ || !channel_->fd) return;
  waiting_ = true;
  channel_->fd->async_wait(asio::posix::stream_descriptor::wait_read,
                           [self = shared_from_this()](const error_code& ec) {
                             self->waiting_ = false;
                             self->on_readable(detail::readiness_result(ec));
                           });
}

void listener_impl::on_readable(error_code ec) {
  if (closed_) return;
  cm_event e;
  while (!ec && taking() && next_event(channel_->channel, e, ec)) {
    if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST)
      on_request(e);
    else if (e.type == RDMA_CM_EVENT_DEVICE_REMOVAL)
      ec = errc::device_removed;
  }
  if (closed_) return;
  if (ec && ec != asio::error::operation_aborted) fail_all(ec, false);
  wait();
}

void listener_impl::on_request(const cm_event& e) {
  // The oldest accept without a handshake in progress, else the oldest.
  const auto free = std::find_if(accepts_.begin(), accepts_.end(), [](const auto& a) { return a->handshakes == 0; });
  const std::shared_ptr<accept_op> owner = free != accepts_.end() ? *free : accepts_.front();
  if (free == accepts_.end()) last_alongside_ = std::chrono::steady_clock::now();
  rdma_event_channel* raw = nullptr;
  try {
    raw = new_event_channel();
    throw_on_error(verbs_errno_result(rdma_migrate_id(e.id, raw)), "rdma_migrate_id");
  } catch (...) {
    rdma_destroy_id(e.id);  // not taken over: reject it here
    if (raw) rdma_destroy_event_channel(raw);
    tally(stats_.failed, metric::refused);
    return finish(owner, current_error(), nullptr, false);
  }
  auto h = std::make_shared<handshake_op>();
  h->home = weak_from_this();
  h->owner = owner;
  h->options = owner->options;
  // Its own placement on the accept's member: a handshake taken alongside, or carried over to another accept,
  // counts as one connection there (the accept's lease goes with the accept).
  h->options.lease = another_lease(owner->options.lease);
  h->peer = owner->peer;
  h->timeout = options_.establish_timeout;
  ++owner->handshakes;
  handshakes_.push_back(h);
  handed_request job{h, e, raw};
  if (h->peer == ex_)
    job();
  else
    asio::post(h->peer, std::move(job));
}

void listener_impl::on_handshake(const std::shared_ptr<handshake_op>& h, error_code ec,
                                 std::shared_ptr<connection_impl> c) {
  const auto it = std::find(handshakes_.begin(), handshakes_.end(), h);
  if (it == handshakes_.end() || closed_) return drop(std::move(c));  // withdrawn
  handshakes_.erase(it);
  const std::shared_ptr<accept_op> owner = std::move(h->owner);
  if (owner) --owner->handshakes;
  if (c) {
    if (auto target = take_accept_for(*h, owner)) {
      finish(target, {}, std::move(c), false);
    } else if (!h->options.pd && ready_.size() < most_handshakes()) {
      ready_.emplace_back(h, std::move(c));  // its own pd and cq: it waits for the next accept like it
    } else {
      tally(stats_.dropped, metric::half_open_reaped);
      drop(std::move(c));
    }
  } else if (ec == asio::error::timed_out) {
    tally(stats_.timed_out, metric::half_open_reaped);
  } else if (peer_gave_up(ec)) {
    tally(stats_.abandoned, metric::half_open_reaped);
  } else if (ec != asio::error::operation_aborted) {
    tally(stats_.failed, metric::refused);  // this side's failure (resources, options): the accept hears of it
    if (owner && std::find(accepts_.begin(), accepts_.end(), owner) != accepts_.end())
      finish(owner, ec, nullptr, false);
  }
  wait();
}

std::shared_ptr<accept_op> listener_impl::take_accept_for(const handshake_op& h,
                                                          const std::shared_ptr<accept_op>& owner) {
  auto it = owner ? std::find(accepts_.begin(), accepts_.end(), owner) : accepts_.end();
  if (it == accepts_.end())
    it = std::find_if(accepts_.begin(), accepts_.end(), [&](const auto& a) { return same_options(h, *a); });
  if (it == accepts_.end()) return nullptr;
  std::shared_ptr<accept_op> op = *it;
  accepts_.erase(it);
  return op;
}

void listener_impl::finish(std::shared_ptr<accept_op> op, error_code ec, std::shared_ptr<connection_impl> c,
                           bool post) {
  if (const auto it = std::find(accepts_.begin(), accepts_.end(), op); it != accepts_.end()) accepts_.erase(it);
  op->listener.reset();
  overdue_ = false;  // the next accept gets a grace of its own
  ++accepts_completed_;
  if (grace_armed_ && grace_timer_) grace_timer_->cancel();  // its handler re-arms it from now
  const bool orphans = op->handshakes != 0;
  if (orphans) {
    op->handshakes = 0;
    for (const auto& h : handshakes_)
      if (h->owner == op) h->owner.reset();
    if (ec) settle();
  }
  if (c) tally(stats_.accepted, metric::accepted);
  // The accept's own lease goes now, so that a loop placing the next accept from this handler sees the loads
  // without it (its connection holds a lease of its own).
  op->options.lease.reset();
  op->complete(ec, c ? cm_access::make_connection(std::move(c)) : connection{}, post);
  if (orphans && !ec)
    asio::post(ex_, [weak = weak_from_this()] {
      if (auto self = weak.lock(); self && !self->closed_) self->settle();
    });
}

void listener_impl::settle() {
  std::vector<std::shared_ptr<handshake_op>> ending;
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    handshake_op& h = **it;
    if (!h.owner) {
      const auto next =
          std::find_if(accepts_.begin(), accepts_.end(), [&](const auto& a) { return same_options(h, *a); });
      if (next != accepts_.end()) {
        h.owner = *next;
        ++(*next)->handshakes;
      } else if (h.options.pd) {
        ending.push_back(*it);
        it = handshakes_.erase(it);
        tally(stats_.dropped, metric::half_open_reaped);
        continue;
      }
    }
    ++it;
  }
  for (const auto& h : ending)
    handshake_op::end(h);  // after the loop: this may report back inline
  wait();
}

void listener_impl::cancel(const std::shared_ptr<accept_op>& op) {
  if (std::find(accepts_.begin(), accepts_.end(), op) == accepts_.end()) return;
  finish(op, asio::error::operation_aborted, nullptr, true);
  if (accepts_.empty() && waiting_ && channel_->fd) {
    error_code ignored;
    channel_->fd->cancel(ignored);
  }
}

void listener_impl::fail_all(error_code ec, bool post) {
  while (!accepts_.empty())
    finish(accepts_.front(), ec, nullptr, post);
}

void listener_impl::close() noexcept {
  if (closed_) return;
  closed_ = true;
  if (channel_) channel_->release_fd();
  if (grace_timer_) grace_timer_->cancel();
  fail_all(asio::error::operation_aborted, true);
  for (const auto& h : std::exchange(handshakes_, {}))
    handshake_op::end(h);
  for (auto& r : std::exchange(ready_, {}))
    drop(std::move(r.second));
  if (id_) rdma_destroy_id(id_);
  id_ = nullptr;
  channel_.reset();
}
}  // namespace coverbs::detail
