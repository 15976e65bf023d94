#include <coverbs/protection_domain.hpp>
#include <coverbs/queue_pair.hpp>

#include "core/metrics.hpp"
#include "dataplane/cq_impl.hpp"
#include "dataplane/dispatch_turn.hpp"
#include "dataplane/grh_slots.hpp"
#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"
#include "dataplane/srq_impl.hpp"
#include "events/qp_registry.hpp"
#include "verbs/device_internal.hpp"
#include "windows/remote_invalidation.hpp"

#include <boost/asio/error.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

namespace coverbs {
namespace detail {

void cancel_node(wr_node* node, boost::asio::cancellation_type type) noexcept {
  if (node->srq) return srq_cancel(node->srq, node, type);
  node->qp->cancel(node, type);
}

void qp_on_completion(queue_pair_impl* qp, wr_node* node, const ibv_wc& wc, completion_mode mode) {
  qp->on_completion(node, wc, mode);
}

// --- preparing work requests (validation happens here, before anything is posted) ---

namespace {

/// Refuses a size above the device's limit, naming the option, the value and the limit.
void check_limit(const char* option, std::uint64_t value, std::uint64_t limit, const char* attribute,
                 ibv_context* context) {
  if (value <= limit) return;
  throw system_error(make_error_code(errc::device_limit_exceeded),
                     std::string("queue_pair_options::") + option + " = " + std::to_string(value) +
                         " exceeds the limit of device " + ibv_get_device_name(context->device) + ", " +
                         std::to_string(limit) + " (ibv_device_attr::" + attribute + "): lower it to at most " +
                         std::to_string(limit));
}

bool qp_accepted(ibv_pd* pd, ibv_qp_init_attr init) noexcept {
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (qp) ibv_destroy_qp(qp);
  return qp != nullptr;
}

/// ibv_create_qp refused `init` with EINVAL. If max_inline_data is the cause, finds the largest value the
/// device accepts with the other attributes unchanged (verbs has no attribute that reports it) and throws
/// `errc::device_limit_exceeded` naming both; otherwise returns (the caller reports the verb's errno).
void explain_inline_refusal(ibv_pd* pd, ibv_qp_init_attr init) {
  const std::uint32_t asked = init.cap.max_inline_data;
  if (asked == 0) return;
  init.cap.max_inline_data = 0;
  if (!qp_accepted(pd, init)) return;  // something else is wrong
  std::uint32_t accepted = 0, refused = asked;
  while (refused - accepted > 1) {  // at most 32 tries, on this error path only
    const std::uint32_t mid = accepted + (refused - accepted) / 2;
    init.cap.max_inline_data = mid;
    (qp_accepted(pd, init) ? accepted : refused) = mid;
  }
  throw system_error(make_error_code(errc::device_limit_exceeded),
                     "queue_pair_options::max_inline_data = " + std::to_string(asked) +
                         " exceeds the limit of device " + ibv_get_device_name(pd->context->device) + ", " +
                         std::to_string(accepted) +
                         " bytes (ibv_create_qp refused it with EINVAL; the limit was found by trying smaller sizes): "
                         "lower max_inline_data to at most " +
                         std::to_string(accepted) + " (larger sends and writes go from registered memory, not inline)");
}

}  // namespace

// --- queue_pair_impl ---

queue_pair_impl::queue_pair_impl(ibv_pd* pd, cq_impl& send_cq, cq_impl& recv_cq, const queue_pair_options& options,
                                 const qp_create& create)
    : send_cq_(&send_cq), recv_cq_(&recv_cq), options_(options), create_(create) {
  if (send_cq.executor_ != recv_cq.executor_)
    throw system_error(make_error_code(errc::executor_mismatch),
                       "queue_pair: the send and receive completion queues must share an executor");
  if (options.srq) attach_srq(pd, detail::impl_of(*options.srq));
  const bool same = &send_cq == &recv_cq;
  const std::size_t need_send = options_.max_send_wr, need_recv = options_.max_recv_wr;
  if (same ? !send_cq.reserve(need_send + need_recv) : !send_cq.reserve(need_send))
    throw system_error(make_error_code(errc::cq_overcommitted),
                       "queue_pair(max_send_wr=" + std::to_string(need_send) +
                           ", max_recv_wr=" + std::to_string(need_recv) + ") on a completion queue of depth " +
                           std::to_string(send_cq.depth_) + " with " + std::to_string(send_cq.reserved_) +
                           " entries already reserved");
  if (!same && !recv_cq.reserve(need_recv)) {
    send_cq.unreserve(need_send);
    throw system_error(make_error_code(errc::cq_overcommitted),
                       "queue_pair(max_recv_wr=" + std::to_string(need_recv) + ") on the receive completion queue");
  }
  auto unreserve = [&] {
    if (same)
      send_cq.unreserve(need_send + need_recv);
    else {
      send_cq.unreserve(need_send);
      recv_cq.unreserve(need_recv);
    }
  };
  try {
    ibv_context* context = pd->context;
    ibv_device_attr attr{};
    throw_on_error(verbs_status_result(ibv_query_device(context, &attr)), "ibv_query_device");
    check_limit("max_send_wr", options.max_send_wr, static_cast<std::uint64_t>(attr.max_qp_wr), "max_qp_wr", context);
    check_limit("max_recv_wr", options_.max_recv_wr, static_cast<std::uint64_t>(attr.max_qp_wr), "max_qp_wr", context);
    check_limit("max_send_sge", options.max_send_sge, static_cast<std::uint64_t>(attr.max_sge), "max_sge", context);
    check_limit("max_recv_sge", options_.max_recv_sge, static_cast<std::uint64_t>(attr.max_sge), "max_sge", context);
    // Checked here, not at connect(), where ibv_modify_qp would only say EINVAL.
    check_limit("max_rd_atomic", options.max_rd_atomic, static_cast<std::uint64_t>(attr.max_qp_init_rd_atom),
                "max_qp_init_rd_atom", context);
    check_limit("max_dest_rd_atomic", options.max_dest_rd_atomic, static_cast<std::uint64_t>(attr.max_qp_rd_atom),
                "max_qp_rd_atom", context);
    atomics_ = attr.atomic_cap != IBV_ATOMIC_NONE;
    if (!options_.max_rd_atomic)
      options_.max_rd_atomic = static_cast<std::uint8_t>(std::min(attr.max_qp_init_rd_atom, 16));
    if (!options_.max_dest_rd_atomic)
      options_.max_dest_rd_atomic = static_cast<std::uint8_t>(std::min(attr.max_qp_rd_atom, 16));
    port_ = query_port(context, options.port);
    max_message_ = port_.max_msg_sz ? std::min<std::size_t>(port_.max_msg_sz, max_message) : max_message;
    const bool datagram = create.type == IBV_QPT_UD;
    if (datagram) {
      max_message_ = port_.active_mtu_bytes();  // one packet (IBA C10-93.1.1)
      // One slot per receive credit, and one more: a completing receive returns its credit, and the waiting
      // receive that credit posts takes a slot, before the completing one gives its slot back (in its finish).
      grh_ = std::make_unique<grh_slots>(pd, options_.max_recv_wr + 1, static_cast<std::uint32_t>(max_message_));
    }
    if (options.gid_index >= 0) {
      const auto gids = query_gids(context, options.port);
      auto it = std::find_if(gids.begin(), gids.end(),
                             [&](const gid_entry& g) { return g.index == unsigned(options.gid_index); });
      if (it == gids.end())
        throw system_error(make_error_code(errc::no_usable_gid),
                           "queue_pair: gid_index " + std::to_string(options.gid_index));
      gid_ = *it;
    } else {
      gid_ = default_gid(context, options.port);
    }

    ibv_qp_init_attr init{};
    init.send_cq = send_cq.cq_;
    init.recv_cq = recv_cq.cq_;
    init.qp_type = create.type;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = options.max_send_wr;
    init.cap.max_recv_wr = options_.max_recv_wr;
    init.cap.max_send_sge = options.max_send_sge;
    init.cap.max_recv_sge = options_.max_recv_sge + (datagram ? 2 : 0);  // + the GRH slot and the overflow
    if (srq_) init.srq = srq_->srq_;
    init.cap.max_inline_data = options.max_inline_data;
    const ibv_qp_init_attr asked = init;
    qp_ = ibv_create_qp(pd, &init);
    const error_code created = verbs_null_result(qp_);
    if (created == boost::system::errc::invalid_argument) explain_inline_refusal(pd, asked);
    throw_on_error(created, std::string("ibv_create_qp(") + (datagram ? "UD" : "RC") +
                                ", max_send_wr=" + std::to_string(options.max_send_wr) +
                                ", max_recv_wr=" + std::to_string(options.max_recv_wr) +
                                ", max_inline_data=" + std::to_string(options.max_inline_data) + ")");
    // The provider may grant more than asked; credits follow what we asked for (the CQ reservation).
    sq_.credits = std::min(init.cap.max_send_wr, options.max_send_wr);
    rq_.credits = std::min(init.cap.max_recv_wr, options_.max_recv_wr);
    max_inline_ = std::min(init.cap.max_inline_data, options.max_inline_data);  // 0 asked: never inline
    // Half the send queue at most per list, so that credits come back while the other half is in flight.
    batch_cap_ = std::clamp<std::uint32_t>(sq_.credits / 2, 1, 32);
    std::random_device rd;
    psn_ = rd() & 0xffffff;
    auto r = std::make_shared<qp_registration>();
    r->context = context;
    r->qp = qp_;
    r->port = options.port;
    r->send_cq = send_cq.cq_;
    r->recv_cq = recv_cq.cq_;
    r->executor = send_cq.executor_;
    r->impl = this;
    register_qp(r);
    registration_ = std::move(r);
    if (srq_) srq_->attach(qp_->qp_num, create_.qkey);
  } catch (...) {
    if (qp_) ibv_destroy_qp(qp_);
    qp_ = nullptr;
    unreserve();
    throw;
  }
}

namespace {

/// A queue pair going away: a type-2 key bound through it can serve no queue pair any more, so its window is
/// replaced (the key dead for sure) and its lease ended (window_lease: "the queue pair's destruction"); then
/// its number may be reused, and whatever is still linked to it is nobody's.
void forget_windows(ibv_context* context, std::uint32_t qp_num) noexcept {
  forget_windows_bound_through(context, qp_num);
  unlink_windows_from(context, qp_num);
}

}  // namespace

queue_pair_impl::~queue_pair_impl() {
  if (!qp_) return;
  if (turn_) turn_->withdraw(*this);  // destroyed inside a dispatch turn: its list is failed below, not posted
  // Destroyed by a retired operation's handler: the others are complete; their handlers are posted.
  if (destroyed_) *destroyed_ = true;
  while (wr_node* a = retired_.pop())
    finish_node(a, nullptr, completion_mode::post);
  // First: from here on no device event touches this queue pair from another thread.
  unregister_qp(registration_);
  if (sq_.outstanding || rq_.outstanding) {
    // Flush what is outstanding and wait for the device to retire it: a completion naming a freed
    // operation must never reach the queue.
    to_error(boost::asio::error::operation_aborted);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool done = send_cq_->drain_until([&] { return sq_.outstanding == 0; }, deadline) &&
                recv_cq_->drain_until([&] { return rq_.outstanding == 0; }, deadline);
    if (!done) {
      std::fprintf(stderr,
                   "coverbs: queue pair %u: %zu send and %zu receive requests not flushed within 5 s; "
                   "the queue pair and their operations are leaked\n",
                   qp_->qp_num, sq_.outstanding, rq_.outstanding);
      (void)grh_.release();  // the device may still write to it
      forget_windows(qp_->context, qp_->qp_num);
      return;
    }
  }
  // After the drain (a bind completed in it made its window bound through this queue pair).
  forget_windows(qp_->context, qp_->qp_num);
  fail_unposted();
  fail_flushed(sq_);
  fail_flushed(rq_);
  const std::uint32_t qp_num = qp_->qp_num;  // ibv_destroy_qp frees *qp_
  if (const error_code ec = verbs_status_result(ibv_destroy_qp(qp_)))
    std::fprintf(stderr, "coverbs: ibv_destroy_qp failed (%s)\n", ec.message().c_str());
  else if (srq_)
    srq_->detach(qp_num);
  if (send_cq_ == recv_cq_)
    send_cq_->unreserve(options_.max_send_wr + options_.max_recv_wr);
  else {
    send_cq_->unreserve(options_.max_send_wr);
    recv_cq_->unreserve(options_.max_recv_wr);
  }
}

void queue_pair_impl::attach_srq(ibv_pd* pd, shared_receive_queue_impl* srq) {
  if (!srq || !srq->srq_) throw system_error(errno_code(EBADF), "queue_pair_options::srq: the SRQ is moved-from");
  if (srq->pd_ != pd)
    throw system_error(make_error_code(errc::pd_mismatch),
                       "queue_pair_options::srq: the shared receive queue is in another protection domain");
  if (srq->cq_ != recv_cq_)
    throw system_error(make_error_code(errc::srq_cq_mismatch),
                       "queue_pair_options::srq: the queue pair's receive completion queue is not the one the "
                       "shared receive queue was created on");
  const bool datagram = create_.type == IBV_QPT_UD;
  if ((srq->grh_ != nullptr) != datagram)
    throw system_error(make_error_code(errc::srq_transport_mismatch),
                       datagram ? "datagram_options::srq: a datagram queue pair needs a shared receive queue made "
                                  "with srq_options::datagram = true"
                                : "queue_pair_options::srq: the shared receive queue was made for datagram queue "
                                  "pairs (srq_options::datagram); an RC queue pair needs one made without it");
  srq_ = srq->shared_from_this();
  options_.max_recv_wr = 0;  // the queue pair's own receive queue is not used
  options_.max_recv_sge = 0;
}

void queue_pair_impl::fail(wr_node* n, error_code ec) {
  if (n->on_complete) n->on_complete(n, ec);
  if (metrics_on()) [[unlikely]]
    note_finished(n, ec, nullptr, false, n->qp ? &n->qp->counts_ : nullptr);
  n->complete(n, ec, nullptr, completion_mode::post);
}

void queue_pair_impl::refuse(wr_node* n, error_code ec) { fail(n, ec); }
void queue_pair_impl::refuse(wr_node* n, errc e) { fail(n, e); }

void queue_pair_impl::start_gated(wr_node* n) {
  if (gates_ & gate_in_error) return flush_after_posted(n);
  if (!n->is_recv) return fail(n, errc::queue_pair_not_ready);
  start_open(n);
}

void queue_pair_impl::wait_for_credit(wr_node* n, work_queue& q) {
  n->state = node_state::waiting_credit;
  q.waiting.push(n);
  if (metrics_on()) [[unlikely]]
    note_credit_wait(n->is_recv, &counts_);
}

void queue_pair_impl::pump(work_queue& q) {
  while (!q.waiting.empty() && q.credits >= q.waiting.head->credits)
    submit(q.waiting.pop());
}

void queue_pair_impl::fail_unposted() {
  while (wr_node* n = batch_.pop()) {
    sq_.credits += n->credits;
    flush_after_posted(n);
  }
  while (wr_node* n = sq_.waiting.pop())
    flush_after_posted(n);
  while (wr_node* n = rq_.waiting.pop())
    flush_after_posted(n);
}

void queue_pair_impl::flush_after_posted(wr_node* n) {
  // Operations complete in initiation order: one never posted waits for the flush of those posted before it.
  work_queue& q = queue_of(n);
  if (q.outstanding > 0) return q.flushed.push(n);
  fail(n, make_error_code(wc_errc::wr_flush_err));
}

void queue_pair_impl::fail_flushed(work_queue& q) {
  while (wr_node* n = q.flushed.pop())
    fail(n, make_error_code(wc_errc::wr_flush_err));
}

void queue_pair_impl::on_completion_slow(wr_node* n, const ibv_wc& wc, completion_mode mode) {
  work_queue& q = queue_of(n);
  // Requests posted before a send completion's, unsignaled, have completed: retired first, in order.
  if (!n->is_recv && sent_.head != n) retire_before(n, retired_);
  ++q.credits;
  --q.outstanding;
  const error_code status = make_error_code(wc.status);
  if (status && !in_error()) {
    gates_ |= gate_in_error;
    error_ = status;
    // Flushed because a device event (e.g. the port went down) moved us to the error state: that is the cause.
    if (status == wc_errc::wr_flush_err)
      if (const error_code cause = registration_->pending_cause()) error_ = cause;
    // Into the error state again (ERR to ERR is allowed): a failed UD send stops only the send queue (SQE),
    // and coverbs' error model, which flushes the receives too, needs the error state; and a request posted
    // after the device moved the queue pair there by itself, before this completion was read, is flushed
    // only by a transition on some devices (rxe: a receive posted from user space rings no doorbell).
    modify_to_error();
    fail_unposted();
  }
  if (status && !n->first_error) n->first_error = status;
  // A peer's send-with-invalidate killed one of our windows' keys: record it before any handler runs. A key
  // of a window not bound through this queue pair fails the receive (errc::foreign_remote_invalidation).
  if (n->is_recv && !status && received_invalidation(wc) && create_.type == IBV_QPT_RC)
    if (const error_code foreign = note_remote_invalidation(qp_->context, wc.invalidated_rkey, qp_->qp_num))
      if (!n->first_error) n->first_error = foreign;
  if (!q.waiting.empty()) pump(q);
  const bool last = --n->pending == 0;  // else more of the chain to come
  bool alone = false;  // a send completing with no handler before it left to run: its handler runs directly
  if (last) {
    if (!n->is_recv) {
      sent_.pop();  // `n` headed the list: its handler runs after those before it
      if (retired_.empty())
        alone = true;
      else
        retired_.push(n);
    }
    // Complete from here on: a retired operation's handler that cancels `n` (the first of `a || b`, both in
    // one list) finds it done, and `n` gets its real result.
    n->state = node_state::done;
  }
  // The last posted request is retired: what was never posted fails now, its handlers posted, so they run after
  // those of this turn (initiation order).
  if (q.outstanding == 0 && !q.flushed.empty()) [[unlikely]]
    fail_flushed(q);
  // Handlers run last: one of them may destroy this queue pair.
  if (alone) return finish_node(n, nullptr, mode);  // as run_retired() would, with nothing after it
  if (!n->is_recv) return run_retired(mode);
  if (last) finish_node(n, &wc, mode);
}

void queue_pair_impl::run_retired(completion_mode mode) {
  // `retired_` is the queue pair's, not this call's: a handler that polls the completion queue in place (a
  // nested turn) runs the rest of it first, in order, before the handlers of what completed later. If a
  // handler destroys the queue pair, its destructor posts the rest and sets `destroyed` (for every nested
  // call). If one throws (run in place), the rest are posted, and the exception leaves through the turn.
  bool destroyed = false;
  bool* const outer = std::exchange(destroyed_, &destroyed);
  try {
    while (wr_node* a = retired_.pop()) {
      finish_node(a, nullptr, mode);  // a send's result needs no work completion (ops/results.hpp)
      if (destroyed) {
        if (outer) *outer = true;
        return;
      }
    }
  } catch (...) {
    if (destroyed) {
      if (outer) *outer = true;
      throw;
    }
    destroyed_ = outer;
    while (wr_node* a = retired_.pop())
      finish_node(a, nullptr, completion_mode::post);
    throw;
  }
  destroyed_ = outer;
}

void queue_pair_impl::cancel(wr_node* n, boost::asio::cancellation_type type) {
  using ct = boost::asio::cancellation_type;
  if (n->state == node_state::waiting_credit) {
    if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none) return;
    if (queue_of(n).waiting.remove(n)) fail(n, boost::asio::error::operation_aborted);
    return;
  }
  if (n->state == node_state::batched) {  // not posted: taken out of the turn's list, nothing else touched
    if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none) return;
    if (batch_.remove(n)) {
      sq_.credits += n->credits;
      fail(n, boost::asio::error::operation_aborted);
    }
    return;
  }
  if (n->state == node_state::posted && (type & ct::terminal) != ct::none) {
    // A datagram queue pair serves every peer: erroring it to recall one request would take them all down.
    if (create_.type != IBV_QPT_RC) return;
    // Already complete: every completion it waits for — or one of a send request posted after it, which
    // retires it — has been taken from the completion queue (it is in the batch being dispatched), or is in
    // the queue now. Its handler gets its real result; nothing to do.
    if ((n->is_recv ? recv_cq_ : send_cq_)->holds_completion_of(n, n->is_recv ? nullptr : n->next)) return;
    n->cancelled = true;
    to_error(boost::asio::error::operation_aborted);
  }
}

void queue_pair_impl::to_error(const error_code& why) {
  if (!in_error()) {
    gates_ |= gate_in_error;
    error_ = why;
  }
  modify_to_error();
  fail_unposted();
}

void queue_pair_impl::modify_to_error() noexcept {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (const error_code ec = verbs_status_result(ibv_modify_qp(qp_, &attr, IBV_QP_STATE)))
    std::fprintf(stderr, "coverbs: moving queue pair %u to the error state failed (%s)\n", qp_->qp_num,
                 ec.message().c_str());
}

void queue_pair_impl::on_async_error(const error_code& cause) {
  if (!cause) return;  // the queue pair was reset after the event: the notification is stale
  // The event is the cause of a flush, and of rxe's loc_qp_op_err for a packet that found no route (a link
  // that went down before the port event was read).
  if (!in_error() || error_ == wc_errc::wr_flush_err || error_ == wc_errc::loc_qp_op_err) {
    gates_ |= gate_in_error;
    error_ = cause;
  }
  // The event's reader moved the queue pair to the error state from its own thread; a receive this executor
  // posted since then would wait forever on rxe (see on_completion): now that nothing more is posted, again.
  modify_to_error();
  fail_unposted();
}

void qp_on_async_error(queue_pair_impl* qp, const error_code& cause) { qp->on_async_error(cause); }

error_code queue_pair_impl::reset(std::string* why) noexcept {
  if (sq_.outstanding || rq_.outstanding || !batch_.empty()) {
    if (why) try {
        *why = "queue_pair::reset (qp " + std::to_string(qp_->qp_num) +
               "): " + std::to_string(sq_.outstanding + batch_.size) + " send and " + std::to_string(rq_.outstanding) +
               " receive requests are still outstanding, and RESET would discard them with their handlers never "
               "run: reset once every handler has run (after an error, the flushed requests complete with "
               "wr_flush_err in the next dispatch turns)";
      } catch (...) {
      }
    return make_error_code(boost::system::errc::device_or_resource_busy);
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RESET;
  if (const error_code ec = verbs_status_result(ibv_modify_qp(qp_, &attr, IBV_QP_STATE))) return ec;
  // What the runtime remembers of the old connection goes with it. A device event's notification still on
  // its way finds no cause and is dropped (on_async_error).
  registration_->cause.store(0);
  gates_ = gate_not_ready;  // the error is forgotten; a send needs RTS again
  error_ = {};
  std::random_device rd;
  psn_ = rd() & 0xffffff;  // a fresh PSN: late packets of the old connection are not taken for new ones
  forget_windows_bound_through(qp_->context, qp_->qp_num);  // a new connection must not own the old's windows
  return {};
}

}  // namespace detail

// --- queue_pair ---

queue_pair::queue_pair(protection_domain& pd, completion_queue& cq, const queue_pair_options& options)
    : queue_pair(pd, cq, cq, options) {}

queue_pair::queue_pair(protection_domain& pd, completion_queue& send_cq, completion_queue& recv_cq,
                       const queue_pair_options& options) {
  if (!pd) throw system_error(errno_code(EBADF), "queue_pair: the protection domain is not open");
  impl_ = std::make_unique<detail::queue_pair_impl>(pd.native_handle(), *detail::impl_of(send_cq),
                                                    *detail::impl_of(recv_cq), options);
  io_executor_ = &impl_->send_cq_->executor_;
}

queue_pair::queue_pair(queue_pair&&) noexcept = default;
queue_pair& queue_pair::operator=(queue_pair&&) noexcept = default;
queue_pair::~queue_pair() = default;

queue_pair::executor_type queue_pair::get_executor() const noexcept { return impl_->send_cq_->executor_; }
ibv_qp* queue_pair::native_handle() const noexcept { return impl_ ? impl_->qp_ : nullptr; }
std::uint32_t queue_pair::qp_num() const noexcept { return impl_ ? impl_->qp_->qp_num : 0; }
metrics::queue_counters queue_pair::counters() const noexcept {
  return impl_ ? impl_->counts_.read() : metrics::queue_counters{};
}
error_code queue_pair::error() const noexcept { return impl_ ? impl_->error_ : error_code{}; }
std::size_t queue_pair::sends_outstanding() const noexcept {
  return impl_ ? impl_->sq_.outstanding + impl_->batch_.size : 0;
}
std::size_t queue_pair::sends_waiting() const noexcept { return impl_ ? impl_->sq_.waiting.size : 0; }
std::uint32_t queue_pair::max_inline_data() const noexcept { return impl_ ? impl_->max_inline_ : 0; }
std::size_t queue_pair::max_message_size() const noexcept { return impl_ ? impl_->max_message_ : 0; }

queue_pair_address queue_pair::local_address() const {
  queue_pair_address a;
  a.qp_num = impl_->qp_->qp_num;
  a.psn = impl_->psn_;
  a.gid_value = impl_->gid_.value;
  a.lid = impl_->port_.lid;
  return a;
}

ibv_qp_state queue_pair::state() const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  throw_on_error(verbs_status_result(ibv_query_qp(impl_->qp_, &attr, IBV_QP_STATE, &init)), "ibv_query_qp");
  return attr.qp_state;
}

namespace {
const char* state_name(ibv_qp_state s) noexcept {
  switch (s) {
  case IBV_QPS_RESET: return "RESET";
  case IBV_QPS_INIT: return "INIT";
  case IBV_QPS_RTR: return "RTR";
  case IBV_QPS_RTS: return "RTS";
  case IBV_QPS_SQD: return "SQD";
  case IBV_QPS_SQE: return "SQE";
  case IBV_QPS_ERR: return "ERR";
  default: return "?";
  }
}
}  // namespace

namespace {
std::string transition_of(const ibv_qp_attr& attr, int mask) {
  return (mask & IBV_QP_STATE) ? std::string("->") + state_name(attr.qp_state) : std::string("attributes");
}
std::string modify_what(ibv_qp* qp, const std::string& transition) {
  return "ibv_modify_qp(" + transition + ", qp " + std::to_string(qp->qp_num) + ")";
}
}  // namespace

void queue_pair::modify(ibv_qp_attr& attr, int mask) {
  if ((mask & IBV_QP_STATE) && attr.qp_state == IBV_QPS_RESET) return reset();
  error_code ec;
  modify(attr, mask, ec);
  if (ec) throw_on_error(ec, modify_what(impl_->qp_, transition_of(attr, mask)));
}

void queue_pair::modify(ibv_qp_attr& attr, int mask, error_code& ec) noexcept {
  if ((mask & IBV_QP_STATE) && attr.qp_state == IBV_QPS_RESET) {
    // Other attributes mean nothing in RESET: reset() does the transition and forgets the old error.
    ec = impl_->reset(nullptr);
    return;
  }
  ec = verbs_status_result(ibv_modify_qp(impl_->qp_, &attr, mask));
  if (!ec && (mask & IBV_QP_STATE)) impl_->note_state(attr.qp_state);
}

void queue_pair::reset() {
  std::string why;
  const error_code ec = impl_->reset(&why);
  if (ec) throw system_error(ec, why.empty() ? modify_what(impl_->qp_, "->RESET") : why);
}

void queue_pair::reset(error_code& ec) noexcept { ec = impl_->reset(nullptr); }

void queue_pair::connect(const queue_pair_address& remote) {
  error_code ec;
  const char* failed = connect_steps(remote, ec);
  if (ec) throw_on_error(ec, modify_what(impl_->qp_, failed));
}

void queue_pair::connect(const queue_pair_address& remote, error_code& ec) noexcept {
  ec = {};
  (void)connect_steps(remote, ec);
}

const char* queue_pair::connect_steps(const queue_pair_address& remote, error_code& ec) noexcept {
  detail::queue_pair_impl& q = *impl_;
  const queue_pair_options& o = q.options_;
  auto modify = [&](ibv_qp_attr& attr, int mask) {
    ec = verbs_status_result(ibv_modify_qp(q.qp_, &attr, mask));
    return !ec;
  };
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.pkey_index = 0;
  init.port_num = o.port;
  init.qp_access_flags = static_cast<unsigned>(to_verbs(o.remote_access));
  if (!modify(init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return "RESET->INIT";
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = std::min(o.path_mtu, q.port_.active_mtu);
  rtr.dest_qp_num = remote.qp_num;
  rtr.rq_psn = remote.psn;
  rtr.max_dest_rd_atomic = o.max_dest_rd_atomic;
  rtr.min_rnr_timer = o.min_rnr_timer;
  rtr.ah_attr.port_num = o.port;
  rtr.ah_attr.dlid = remote.lid;
  if (q.port_.is_ethernet() || !remote.gid_value.is_zero()) {
    rtr.ah_attr.is_global = 1;
    rtr.ah_attr.grh.dgid = remote.gid_value.to_verbs();
    rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(q.gid_.index);
    rtr.ah_attr.grh.hop_limit = 64;
  }
  if (!modify(rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return "INIT->RTR";

  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = o.timeout;
  rts.retry_cnt = o.retry_cnt;
  rts.rnr_retry = o.rnr_retry;
  rts.sq_psn = q.psn_;
  rts.max_rd_atomic = o.max_rd_atomic;
  if (!modify(rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC))
    return "RTR->RTS";
  q.note_state(IBV_QPS_RTS);
  return nullptr;
}

void connect_pair(queue_pair& a, queue_pair& b) {
  a.connect(b.local_address());
  b.connect(a.local_address());
}

void connect_pair(queue_pair& a, queue_pair& b, error_code& ec) noexcept {
  a.connect(b.local_address(), ec);
  if (!ec) b.connect(a.local_address(), ec);
}

}  // namespace coverbs
