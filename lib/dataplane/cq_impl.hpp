#pragma once
// Private to lib/: the state behind a completion_queue.

#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/wr_node.hpp>

#include "core/io_owner.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

namespace coverbs::detail {

class cq_impl final : public std::enable_shared_from_this<cq_impl>, public io_owner {
public:
  cq_impl(const boost::asio::any_io_executor& ex, ibv_context* context, const completion_queue_options& options);
  ~cq_impl();

  /// `n` work requests were posted: each will produce a completion, or be retired by a later one's
  /// (`work_retired`).
  void work_started(std::size_t n = 1) noexcept {
    outstanding_ += n;
    if (!waiting_ && n) start_waiting();
  }
  /// `n` unsignaled send requests completed with a later request's completion: none of their own will come.
  void work_retired(std::size_t n) noexcept { outstanding_ -= n; }
  /// A work request will produce no completion (its shared receive queue was destroyed with it posted).
  /// The last one stops a readiness wait on the channel: no event would ever end it, and the pending wait
  /// would keep io_context::run() from returning.
  void work_abandoned() noexcept;

  /// Polls and dispatches until the queue is empty or `limit` completions were handled (then `turn_full_`),
  /// each completion's handler reached as `mode` says; `timed`: also stops (as full) past `turn_quota`, checked
  /// after every fourth completion from a clock reading after the third (completion_queue_options::turn_quota).
  std::size_t drain(completion_mode mode, std::size_t limit, bool timed = false);
  /// One dispatch turn, at most `max_completions_per_turn` completions (fewer past `turn_quota`), run by the
  /// queue's own steps (handlers of `executor_`): on an io_context's executor they run inside it on this thread, so a
  /// handler associated with it is called directly (`completion_mode::invoke`); on any other executor, dispatched.
  std::size_t drain_turn() {
    return drain(typed_executor_ ? completion_mode::invoke : completion_mode::dispatch,
                 options_.max_completions_per_turn, true);
  }
  /// As drain_turn, for completion_queue::poll (any thread, any handler): handlers are called directly only when
  /// this thread runs the queue's io_context (one check per call), else dispatched. Bounded by the count alone:
  /// the caller of poll() drives its own loop and calls again while it returns max_completions_per_turn.
  std::size_t drain_polled() {
    return drain(typed_executor_ && typed_executor_->running_in_this_thread() ? completion_mode::invoke
                                                                              : completion_mode::dispatch,
                 options_.max_completions_per_turn);
  }

  /// For a queue pair being destroyed: polls (handlers only posted) until `done()` or `deadline`.
  template <class Pred>
  bool drain_until(Pred done, std::chrono::steady_clock::time_point deadline);

  /// Reserves entries for a queue pair's queues; false when they would not fit.
  bool reserve(std::size_t entries) noexcept {
    if (entries > static_cast<std::size_t>(depth_) - reserved_) return false;
    reserved_ += entries;
    return true;
  }
  void unreserve(std::size_t entries) noexcept { reserved_ -= entries; }

  /// For a cancellation: whether every completion `node` still waits for (`wr_node::pending`), or one of a
  /// node of `later` (the send operations posted after it, linked through `next`: their completion retires
  /// it), has been taken from the queue — it is in the batch being dispatched — or is in the queue now,
  /// however far back (then it takes the completions in front of it, in order, into `taken_`, which the
  /// dispatch handles next, as usual). Runs no handler; costs the data path one branch per empty batch.
  bool holds_completion_of(const wr_node* node, const wr_node* later) noexcept;

  void close() noexcept;
  /// Rethrows the exception a handler run in place threw during the last drain (then cleared), if any.
  void rethrow_pending();
  void on_context_shutdown() noexcept override { release_channel_fd(); }
  /// Its readiness wait or spin step while work requests are outstanding, and every live queue pair and
  /// shared receive queue whose completions it receives and that holds operations (outstanding_work.hpp).
  void describe_work(std::vector<work_holder>& out) const override;

  const boost::asio::any_io_executor executor_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  int depth_ = 0;
  std::size_t reserved_ = 0;
  std::size_t outstanding_ = 0;
  completion_queue_stats stats_;

private:
  using owner = std::shared_ptr<cq_impl>;
  /// A handler that runs `(q.*Step)(owner, args...)`, handing the reference that keeps the queue alive on to
  /// the step, which hands it to the next one: no reference-count update per step (two atomic operations,
  /// each costly in an emulated guest).
  template <auto Step>
  static auto step_handler(owner self) {
    return [self = std::move(self)](auto&&... args) mutable {
      cq_impl& q = *self;
      (q.*Step)(std::move(self), std::forward<decltype(args)>(args)...);
    };
  }

  void start_waiting();
  void arm_and_wait(owner self);
  void on_readable(owner self, error_code ec);
  void spin_step(owner self);
  /// The rest of a turn that stopped at its bound, as a handler of its own (event-driven mode).
  void continue_turn(owner self);
  /// Posts `continue_turn` (event-driven) or `spin_step` (adaptive, spinning) to the executor.
  /// `self`: the reference the running step holds, handed on to the posted one.
  void yield_turn(owner self);
  /// Drains one turn; false when the queue closed or nothing is outstanding any more (then it stops
  /// waiting), or when the turn stopped at its bound and the rest was posted (`yield_turn`).
  /// `self` is handed to the posted rest when the turn yields (then moved from).
  bool drain_and_continue(owner& self);
  /// The next completion: in the batch, else polled into it; null when the queue is empty or closed. Valid until
  /// the next pop() (a handler may poll in place: whatever reads it does so before running handlers).
  const ibv_wc* pop();
  /// Moves the next completions of `taken_` into the (empty) batch. Off the data path.
  [[gnu::noinline, gnu::cold]] void refill_from_taken() noexcept;
  void handle(const ibv_wc& wc, completion_mode mode);
  void ack_events(bool all) noexcept;
  /// Arms the queue (ibv_req_notify_cq) unless it is still armed: armed and no event taken since, so the
  /// next completion raises an event — or has raised one that waits in the channel, which the readiness
  /// wait then finds at once.
  void arm() noexcept;
  /// Queues `step` on the executor: `post` (from an initiating function) or `defer` (the continuation of
  /// the running turn: on an io_context it goes to the thread's private queue, without the scheduler's
  /// lock and wake-up), through the io_context's own executor type when the executor is one.
  template <class Step>
  void post_step(Step&& step);
  template <class Step>
  void defer_step(Step&& step);
  /// Stops waiting on the channel and destroys the descriptor object (the channel keeps the fd).
  void release_channel_fd() noexcept;

  std::optional<boost::asio::posix::stream_descriptor> channel_fd_;
  completion_queue_options options_;
  bool waiting_ = false;  // a readiness wait or a spin step is pending
  bool closed_ = false;
  bool turn_full_ = false;                // the last drain stopped at its limit: the queue may hold more
  bool armed_ = false;                    // ibv_req_notify_cq succeeded and no channel event was taken since
  std::exception_ptr handler_exception_;  // thrown by a handler run in place, rethrown at the turn's end
  // executor_'s target when it is an io_context's executor (the usual case), else null.
  const boost::asio::io_context::executor_type* typed_executor_ = nullptr;
  unsigned unacked_ = 0;
  std::chrono::steady_clock::time_point spin_deadline_{};
  std::array<ibv_wc, 32> batch_{};
  int batch_pos_ = 0, batch_len_ = 0;
  /// Completions a cancellation took from the queue to look for its operation's (holds_completion_of),
  /// handled after the batch, before the queue is polled again; empty on the data path.
  std::vector<ibv_wc> taken_;
  std::size_t taken_pos_ = 0;
};

template <class Pred>
bool cq_impl::drain_until(Pred done, std::chrono::steady_clock::time_point deadline) {
  while (!done()) {
    if (const ibv_wc* wc = pop()) {
      handle(*wc, completion_mode::post);
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    ::usleep(50);
  }
  return true;
}

}  // namespace coverbs::detail
