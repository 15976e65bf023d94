#include <coverbs/completion_queue.hpp>
#include <coverbs/device.hpp>

#include "core/metrics.hpp"
#include "core/readiness.hpp"
#include "dataplane/cq_impl.hpp"
#include "dataplane/dispatch_turn.hpp"
#include "dataplane/qp_impl.hpp"
#include "dataplane/srq_impl.hpp"

#include <boost/asio/defer.hpp>
#include <boost/asio/post.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <utility>

namespace coverbs {
namespace detail {

cq_impl::cq_impl(const boost::asio::any_io_executor& ex, ibv_context* context, const completion_queue_options& options)
    : executor_(ex), channel_fd_(std::in_place, ex), options_(options),
      typed_executor_(executor_.target<boost::asio::io_context::executor_type>()) {
  if (options.depth < 1)
    throw system_error(errno_code(EINVAL),
                       "completion_queue: depth must be at least 1 (got " + std::to_string(options.depth) + ")");
  if (options.max_completions_per_turn < 1)
    throw system_error(errno_code(EINVAL),
                       "completion_queue: max_completions_per_turn must be at least 1 (got 0); it bounds how many "
                       "completions one dispatch turn handles before other handlers on the loop run");
  if (options.turn_quota.count() < 0)
    throw system_error(errno_code(EINVAL), "completion_queue: turn_quota must not be negative (got " +
                                               std::to_string(options.turn_quota.count()) +
                                               " us); 0 bounds a dispatch turn by max_completions_per_turn alone");
  {
    ibv_device_attr attr{};
    throw_on_error(verbs_status_result(ibv_query_device(context, &attr)), "ibv_query_device");
    if (options.depth > attr.max_cqe)
      throw system_error(make_error_code(errc::device_limit_exceeded),
                         "completion_queue_options::depth = " + std::to_string(options.depth) +
                             " exceeds the limit of device " + ibv_get_device_name(context->device) + ", " +
                             std::to_string(attr.max_cqe) + " (ibv_device_attr::max_cqe): lower it to at most " +
                             std::to_string(attr.max_cqe) + ", or spread the queue pairs over several queues");
  }
  channel_ = ibv_create_comp_channel(context);
  throw_on_error(verbs_null_result(channel_), "ibv_create_comp_channel");
  const int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    const error_code ec = errno_code(errno);
    ibv_destroy_comp_channel(channel_);
    throw system_error(ec, "fcntl(O_NONBLOCK) on the completion channel");
  }
  cq_ = ibv_create_cq(context, options.depth, this, channel_, options.comp_vector);
  if (!cq_) {
    const error_code ec = verbs_null_result(cq_);
    ibv_destroy_comp_channel(channel_);
    throw system_error(ec, "ibv_create_cq(cqe=" + std::to_string(options.depth) +
                               ", comp_vector=" + std::to_string(options.comp_vector) + ")");
  }
  depth_ = options.depth;
  channel_fd_->assign(channel_->fd);
  enroll(boost::asio::query(executor_, boost::asio::execution::context));
}

cq_impl::~cq_impl() { close(); }

void cq_impl::close() noexcept {
  if (closed_) return;
  closed_ = true;
  release_channel_fd();
  ack_events(true);
  if (cq_) {
    const error_code ec = verbs_status_result(ibv_destroy_cq(cq_));
    if (ec)
      std::fprintf(stderr, "coverbs: ibv_destroy_cq failed (%s); destroy its queue pairs first — the queue is leaked\n",
                   ec.message().c_str());
    else if (ibv_destroy_comp_channel(channel_) != 0)
      std::fprintf(stderr, "coverbs: ibv_destroy_comp_channel failed\n");
  }
  cq_ = nullptr;
  channel_ = nullptr;
}

void cq_impl::release_channel_fd() noexcept {
  if (!channel_fd_) return;
  error_code ignored;
  channel_fd_->cancel(ignored);
  channel_fd_->release();  // the channel owns the fd
  channel_fd_.reset();
}

void cq_impl::ack_events(bool all) noexcept {
  if (unacked_ && (all || unacked_ >= options_.ack_batch)) {
    ibv_ack_cq_events(cq_, unacked_);
    unacked_ = 0;
  }
}

template <class Step>
void cq_impl::post_step(Step&& step) {
  if (typed_executor_)
    boost::asio::post(*typed_executor_, std::forward<Step>(step));
  else
    boost::asio::post(executor_, std::forward<Step>(step));
}

template <class Step>
void cq_impl::defer_step(Step&& step) {
  if (typed_executor_)
    boost::asio::defer(*typed_executor_, std::forward<Step>(step));
  else
    boost::asio::defer(executor_, std::forward<Step>(step));
}

void cq_impl::arm() noexcept {
  if (armed_) return;
  if (const int rc = ibv_req_notify_cq(cq_, 0); rc != 0) {
    std::fprintf(stderr, "coverbs: ibv_req_notify_cq failed (%s)\n", verbs_status_result(rc).message().c_str());
    return;
  }
  armed_ = true;
  ++stats_.arms;
}

void cq_impl::start_waiting() {
  // Called from an initiating function: never poll here (that could run a handler inside it). The next
  // turn of the loop arms the queue and polls it, or starts spinning.
  waiting_ = true;
  // Reading the clock is not free (microseconds in an emulated guest): only adaptive mode needs it.
  if (options_.spin.count() > 0 && options_.spin != completion_queue_options::spin_forever)
    spin_deadline_ = std::chrono::steady_clock::now() + options_.spin;
  if (options_.spin.count() > 0)
    post_step(step_handler<&cq_impl::spin_step>(shared_from_this()));
  else
    post_step(step_handler<&cq_impl::arm_and_wait>(shared_from_this()));
}

void cq_impl::arm_and_wait(owner self) {
  if (closed_ || !channel_fd_) return;
  arm();
  // A completion that arrived before the arming raises no event: poll again now.
  if (!drain_and_continue(self) || !channel_fd_) return;
  channel_fd_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                          step_handler<&cq_impl::on_readable>(std::move(self)));
}

bool cq_impl::drain_and_continue(owner& self) {
  drain_turn();
  if (closed_) return rethrow_pending(), false;
  if (outstanding_ == 0) waiting_ = false;
  if (!waiting_) return rethrow_pending(), false;
  if (turn_full_) {
    yield_turn(std::move(self));
    return rethrow_pending(), false;
  }
  return true;  // no exception pending: it would have ended the turn as full
}

void cq_impl::rethrow_pending() {
  if (!handler_exception_) return;
  std::exception_ptr e = std::exchange(handler_exception_, nullptr);
  std::rethrow_exception(e);
}

void cq_impl::yield_turn(owner self) {
  ++stats_.yields;
  if (metrics_on()) [[unlikely]]
    note(metric::capped_turns);
  if (options_.spin.count() > 0)
    defer_step(step_handler<&cq_impl::spin_step>(std::move(self)));
  else
    defer_step(step_handler<&cq_impl::continue_turn>(std::move(self)));
}

void cq_impl::continue_turn(owner self) {
  // The queue is armed from before the turn that yielded, or its event waits in the channel (`arm`);
  // it polls after that, so nothing that landed meanwhile is missed.
  if (closed_) return;
  arm_and_wait(std::move(self));
}

void cq_impl::work_abandoned() noexcept {
  --outstanding_;
  if (outstanding_ == 0 && waiting_ && channel_fd_) {
    error_code ignored;
    channel_fd_->cancel(ignored);  // on_readable(operation_aborted) ends the wait
  }
}

void cq_impl::on_readable(owner self, error_code ec) {
  if (stray_wait_error(ec)) [[unlikely]] {
    // Not the channel's doing (core/readiness.hpp: Boost 1.81's io_uring backend): a wake-up like any other.
    ++stats_.stray_wakeups;
    ec = {};
  }
  if (!closed_ && ec == boost::asio::error::operation_aborted && outstanding_ > 0) {
    // The wait was stopped by work_abandoned, and work was posted again before this ran: keep waiting.
    arm_and_wait(std::move(self));
    return;
  }
  if (closed_ || ec) {
    waiting_ = false;
    return;
  }
  bool any = false;
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  while (ibv_get_cq_event(channel_, &ev_cq, &ev_ctx) == 0) {
    ++unacked_;
    ++stats_.events;
    any = true;
  }
  if (any) armed_ = false;  // an event disarms the queue
  if (!any) ++stats_.spurious_wakeups;
  ack_events(false);
  if (options_.spin.count() > 0) spin_deadline_ = std::chrono::steady_clock::now() + options_.spin;
  if (!drain_and_continue(self)) return;
  if (options_.spin.count() > 0)
    defer_step(step_handler<&cq_impl::spin_step>(std::move(self)));
  else
    arm_and_wait(std::move(self));
}

void cq_impl::spin_step(owner self) {
  if (closed_) return;
  const std::size_t n = drain_turn();
  if (closed_) return rethrow_pending();
  if (outstanding_ == 0) {
    waiting_ = false;
    return rethrow_pending();
  }
  if (options_.spin != completion_queue_options::spin_forever) {
    const auto now = std::chrono::steady_clock::now();
    if (n > 0) spin_deadline_ = now + options_.spin;
    if (now >= spin_deadline_ && !turn_full_) {
      arm_and_wait(std::move(self));
      return;
    }
  }
  // Every step is a handler of its own: the rest of the loop runs between two steps.
  if (turn_full_) {
    ++stats_.yields;
    if (metrics_on()) [[unlikely]]
      note(metric::capped_turns);
  }
  defer_step(step_handler<&cq_impl::spin_step>(std::move(self)));
  rethrow_pending();
}

const ibv_wc* cq_impl::pop() {
  if (batch_pos_ == batch_len_) {
    if (closed_) return nullptr;
    if (!taken_.empty()) [[unlikely]] {  // completions a cancellation took from the queue come first
      refill_from_taken();
    } else {
      ++stats_.polls;
      const int n = ibv_poll_cq(cq_, static_cast<int>(batch_.size()), batch_.data());
      if (metrics_on()) [[unlikely]]
        n > 0 ? note_poll(n) : note(metric::empty_polls);
      if (n <= 0) {
        if (n < 0) std::fprintf(stderr, "coverbs: ibv_poll_cq failed (%d)\n", n);
        batch_pos_ = batch_len_ = 0;
        return nullptr;
      }
      batch_pos_ = 0;
      batch_len_ = n;
    }
  }
  return &batch_[static_cast<std::size_t>(batch_pos_++)];
}

void cq_impl::refill_from_taken() noexcept {
  const std::size_t n = std::min(batch_.size(), taken_.size() - taken_pos_);
  std::copy_n(taken_.begin() + static_cast<std::ptrdiff_t>(taken_pos_), n, batch_.begin());
  taken_pos_ += n;
  if (taken_pos_ == taken_.size()) {
    taken_.clear();
    taken_pos_ = 0;
  }
  batch_pos_ = 0;
  batch_len_ = static_cast<int>(n);
}

bool cq_impl::holds_completion_of(const wr_node* node, const wr_node* later) noexcept {
  const auto id = reinterpret_cast<std::uintptr_t>(node);
  const auto of_node = [id](const ibv_wc& wc) { return wc.wr_id == id; };
  bool retired = false;  // a completion of a later send request was found
  const auto of_later = [&](const ibv_wc& wc) {
    for (const wr_node* p = later; p && !retired; p = p->next)
      retired = wc.wr_id == reinterpret_cast<std::uintptr_t>(p);
  };
  // Taken already: in the unhandled part of the batch, or taken ahead of it by an earlier cancellation.
  auto found = static_cast<std::size_t>(
      std::count_if(batch_.begin() + batch_pos_, batch_.begin() + batch_len_, of_node) +
      std::count_if(taken_.begin() + static_cast<std::ptrdiff_t>(taken_pos_), taken_.end(), of_node));
  if (later) {
    std::for_each(batch_.begin() + batch_pos_, batch_.begin() + batch_len_, of_later);
    std::for_each(taken_.begin() + static_cast<std::ptrdiff_t>(taken_pos_), taken_.end(), of_later);
  }
  // Else take what has arrived since, in order, until the node's completions are found or the queue is empty
  // (bounded by its depth); the dispatch handles them after the batch, as usual.
  while (found < node->pending && !retired && !closed_) {
    try {
      taken_.reserve(taken_.size() + batch_.size());  // before polling: a polled completion is never dropped
    } catch (...) {
      return false;  // out of memory: the caller treats the operation as in flight
    }
    std::array<ibv_wc, std::tuple_size_v<decltype(batch_)>> polled;
    ++stats_.polls;
    const int n = ibv_poll_cq(cq_, static_cast<int>(polled.size()), polled.data());
    if (n <= 0) break;
    found += static_cast<std::size_t>(std::count_if(polled.begin(), polled.begin() + n, of_node));
    if (later) std::for_each(polled.begin(), polled.begin() + n, of_later);
    taken_.insert(taken_.end(), polled.begin(), polled.begin() + n);  // within the reserved capacity: cannot throw
  }
  return retired || found >= node->pending;
}

void cq_impl::handle(const ibv_wc& wc, completion_mode mode) {
  --outstanding_;
  ++stats_.completions;
  auto* node = reinterpret_cast<wr_node*>(static_cast<std::uintptr_t>(wc.wr_id));
  if (node->srq) [[unlikely]]
    srq_on_completion(node->srq, node, wc, mode);
  else
    node->qp->on_completion(node, wc, mode);
}

std::size_t cq_impl::drain(completion_mode mode, std::size_t limit, bool timed) {
  // Completions are taken one at a time from a batch kept in this object, so a handler that destroys a
  // queue pair (which drains this queue for its own flushed requests) sees the rest of the batch too.
  std::size_t n = 0;
  turn_full_ = false;
  // Send requests the handlers initiate are held back in their queue pairs' lists and posted before the queue
  // is polled again, and when the turn ends: one list per queue pair for the handlers of one polled batch
  // (dispatch_turn.hpp). The poll that follows the posting finds what completed meanwhile in this turn.
  dispatch_turn::end_all();  // a nested turn: what the handler around it initiated goes first
  dispatch_turn turn(mode == completion_mode::invoke && typed_executor_ ? &typed_executor_->context() : nullptr);
  // The turn's time is read after its third completion (a lone operation's turn never reads the clock:
  // microseconds in an emulated guest) and checked after every fourth (completion_queue_options::turn_quota);
  // a bound of 4 or less ends the turn before any check could.
  std::size_t clock_at =
      timed && options_.turn_quota.count() > 0 && limit > 4 ? 3 : std::numeric_limits<std::size_t>::max();
  std::chrono::steady_clock::time_point since{};
  while (n < limit && !closed_) {
    if (batch_pos_ == batch_len_) turn.end();
    const ibv_wc* wc = pop();
    if (!wc) break;
    ++n;
    try {
      handle(*wc, mode);
    } catch (...) {
      // A handler run in place threw (not in completion_mode::post). As Asio does for a handler dispatched in
      // place: finish the turn — the queue's state is whole, the rest is left for the continuation, as
      // after a full turn — and rethrow it from the turn's end, out of io_context::run().
      handler_exception_ = std::current_exception();
      turn_full_ = true;
      return n;
    }
    if (n == clock_at && n < limit) [[unlikely]] {  // at the bound the turn ends anyway: no reading
      const auto now = std::chrono::steady_clock::now();
      if (n == 3) {
        since = now;
        clock_at = 4;
      } else if (std::chrono::duration_cast<std::chrono::microseconds>(now - since) > options_.turn_quota) {
        turn_full_ = true;  // over its time: yield as a full turn does
        return n;
      } else {
        clock_at = n + 4;
      }
    }
  }
  turn_full_ = n == limit;
  return n;
}

}  // namespace detail

completion_queue::completion_queue(const executor_type& ex, device& dev, const completion_queue_options& options) {
  if (!dev) throw system_error(errno_code(EBADF), "completion_queue: the device is not open");
  impl_ = std::make_shared<detail::cq_impl>(ex, dev.native_handle(), options);
}

completion_queue::completion_queue(completion_queue&&) noexcept = default;
completion_queue& completion_queue::operator=(completion_queue&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
completion_queue::~completion_queue() {
  if (impl_) impl_->close();
}

completion_queue::executor_type completion_queue::get_executor() const noexcept { return impl_->executor_; }
ibv_cq* completion_queue::native_handle() const noexcept { return impl_ ? impl_->cq_ : nullptr; }
int completion_queue::depth() const noexcept { return impl_ ? impl_->depth_ : 0; }
std::size_t completion_queue::outstanding() const noexcept { return impl_ ? impl_->outstanding_ : 0; }
completion_queue_stats completion_queue::stats() const noexcept {
  return impl_ ? impl_->stats_ : completion_queue_stats{};
}
std::size_t completion_queue::poll() {
  if (!impl_) return 0;
  const std::size_t n = impl_->drain_polled();
  impl_->rethrow_pending();
  return n;
}

}  // namespace coverbs
