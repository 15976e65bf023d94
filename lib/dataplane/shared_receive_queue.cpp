#include <coverbs/protection_domain.hpp>
#include <coverbs/shared_receive_queue.hpp>

#include "core/metrics.hpp"
#include "dataplane/cq_impl.hpp"
#include "dataplane/grh_slots.hpp"
#include "dataplane/ops/work_request.hpp"
#include "dataplane/srq_impl.hpp"
#include "events/qp_registry.hpp"
#include "verbs/device_internal.hpp"
#include "windows/remote_invalidation.hpp"

#include <boost/asio/error.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace coverbs {
namespace detail {

namespace {
[[noreturn]] void throw_limit(const char* option, std::uint64_t value, std::uint64_t limit, const char* attribute,
                              ibv_context* context) {
  throw system_error(make_error_code(errc::device_limit_exceeded),
                     std::string("srq_options::") + option + " = " + std::to_string(value) +
                         " exceeds the limit of device " + ibv_get_device_name(context->device) + ", " +
                         std::to_string(limit) + " (ibv_device_attr::" + attribute + "): lower it to at most " +
                         std::to_string(limit));
}
}  // namespace

srq_received srq_received_of(const wr_node& n, const ibv_wc* wc, error_code& ec) noexcept {
  srq_received r;
  if (!wc || !n.srq->grh_) {
    static_cast<received&>(r) = received_of(wc);
    if (wc) r.qp_num = wc->qp_num;
    return r;
  }
  // A datagram: the payload behind the GRH, and its sender.
  r.qp_num = wc->qp_num;
  r.bytes = wc->byte_len > grh_bytes ? wc->byte_len - grh_bytes : 0;
  if (wc->wc_flags & IBV_WC_WITH_IMM) r.imm = ntohl(wc->imm_data);
  r.sender = sender_of(n, *wc, n.srq->qkey_of(wc->qp_num));
  if (r.bytes > n.sge.length) {  // the rest went to the overflow scratch area
    r.bytes = n.sge.length;
    if (!ec) ec = errc::datagram_truncated;
  }
  return r;
}

error_code srq_recv_op::prepare(shared_receive_queue_impl* srq, wr_node& n) const {
  if (!srq->grh_) return fill_recv(n, buf);
  if (buf.size() > max_message) return errc::message_too_long;
  if (buf.size()) n.sg[1] = buf.to_sge();
  srq->fill_datagram_recv(n, buf.size() ? 1 : 0, buf.size());
  return {};
}

void shared_receive_queue_impl::fill_datagram_recv(wr_node& n, std::size_t entries, std::size_t total) const noexcept {
  // As datagram_recv_op: the GRH slot (taken when posted), the spans, and the overflow area.
  n.sg[0] = ibv_sge{0, grh_bytes, 0};
  std::size_t sges = entries + 1;
  if (total < max_datagram_) n.sg[sges++] = grh_->overflow(static_cast<std::uint32_t>(max_datagram_ - total));
  fill_recv_list(n, sges, total);
  n.context = grh_.get();  // where release_grh_slot gives the slot back
}

void srq_start(shared_receive_queue_impl* srq, wr_node* node, error_code ec) { srq->start(node, ec); }
const boost::asio::any_io_executor& srq_executor(const shared_receive_queue_impl* srq) noexcept {
  return srq->cq_->executor_;
}
void srq_start_wait_limit(shared_receive_queue_impl* srq, wr_node* node) { srq->start_wait_limit(node); }
void srq_on_completion(shared_receive_queue_impl* srq, wr_node* node, const ibv_wc& wc, completion_mode mode) {
  srq->on_completion(node, wc, mode);
}
void srq_cancel(shared_receive_queue_impl* srq, wr_node* node, boost::asio::cancellation_type type) {
  srq->cancel(node, type);
}
void srq_on_limit_reached(shared_receive_queue_impl* srq) { srq->on_limit_reached(); }

shared_receive_queue_impl::shared_receive_queue_impl(ibv_pd* pd, cq_impl& cq, const srq_options& options)
    : pd_(pd), cq_(&cq), options_(options) {
  ibv_context* context = pd->context;
  ibv_device_attr attr{};
  throw_on_error(verbs_status_result(ibv_query_device(context, &attr)), "ibv_query_device");
  if (attr.max_srq == 0)
    throw system_error(make_error_code(errc::device_limit_exceeded),
                       std::string("shared_receive_queue: device ") + ibv_get_device_name(context->device) +
                           " has no shared receive queues (ibv_device_attr::max_srq = 0)");
  if (options.max_wr == 0) throw system_error(errno_code(EINVAL), "srq_options::max_wr must be at least 1 (got 0)");
  if (options.max_wr > static_cast<std::uint32_t>(attr.max_srq_wr))
    throw_limit("max_wr", options.max_wr, static_cast<std::uint64_t>(attr.max_srq_wr), "max_srq_wr", context);
  if (options.max_sge > static_cast<std::uint32_t>(attr.max_srq_sge))
    throw_limit("max_sge", options.max_sge, static_cast<std::uint64_t>(attr.max_srq_sge), "max_srq_sge", context);
  if (options.limit > options.max_wr)
    throw system_error(make_error_code(errc::device_limit_exceeded),
                       "srq_options::limit = " + std::to_string(options.limit) + " exceeds srq_options::max_wr = " +
                           std::to_string(options.max_wr) + ": the low watermark counts posted receives");
  if (!cq.reserve(options.max_wr))
    throw system_error(make_error_code(errc::cq_overcommitted),
                       "shared_receive_queue(max_wr=" + std::to_string(options.max_wr) +
                           ") on a completion queue of depth " + std::to_string(cq.depth_) + " with " +
                           std::to_string(cq.reserved_) + " entries already reserved");
  if (options.datagram) {
    // One slot per receive credit, and one more (as a datagram queue pair's, qp_impl.hpp).
    max_datagram_ = query_port(context, options.port).active_mtu_bytes();
    grh_ = std::make_unique<grh_slots>(pd, options.max_wr + 1, static_cast<std::uint32_t>(max_datagram_));
  }
  ibv_srq_init_attr init{};
  init.srq_context = this;
  init.attr.max_wr = options.max_wr;
  init.attr.max_sge = options.max_sge + (options.datagram ? 2 : 0);  // the GRH slot and the overflow area
  srq_ = ibv_create_srq(pd, &init);
  if (const error_code ec = verbs_null_result(srq_)) {
    cq.unreserve(options.max_wr);
    throw system_error(ec, "ibv_create_srq(max_wr=" + std::to_string(options.max_wr) +
                               ", max_sge=" + std::to_string(options.max_sge) + ")");
  }
  credits_ = options.max_wr;  // the provider may grant more; the CQ reservation is what we asked for
  try {
    if (options.limit) set_limit(options.limit);
    auto r = std::make_shared<srq_registration>();
    r->context = context;
    r->srq = srq_;
    r->executor = cq.executor_;
    r->impl = this;
    register_srq(r);
    registration_ = std::move(r);
  } catch (...) {
    ibv_destroy_srq(srq_);
    srq_ = nullptr;
    cq.unreserve(options.max_wr);
    throw;
  }
}

shared_receive_queue_impl::~shared_receive_queue_impl() {
  if (!srq_) return;
  // First: from here on no device event touches this SRQ from another thread.
  unregister_srq(registration_);
  if (attached_) {
    std::fprintf(stderr,
                 "coverbs: shared receive queue destroyed with %zu queue pairs still attached; destroy them first "
                 "— the SRQ and its %zu posted receives are leaked\n",
                 attached_, posted_);
    (void)grh_.release();  // the device may still write to it
    return;
  }
  closing_ = true;
  if (const error_code ec = verbs_status_result(ibv_destroy_srq(srq_))) {
    std::fprintf(stderr, "coverbs: ibv_destroy_srq failed (%s); the SRQ and its %zu posted receives are leaked\n",
                 ec.message().c_str(), posted_);
    (void)grh_.release();
    return;
  }
  // No queue pair uses the SRQ any more: completions of its receives are in the queue already. Deliver
  // them (posted, never run here), then abort what no message consumed.
  cq_->drain(completion_mode::post, std::numeric_limits<std::size_t>::max());
  while (wr_node* n = posted_head_) {
    unlink_posted(n);
    --posted_;
    cq_->work_abandoned();
    if (grh_) grh_->release(n->sg[0].addr);
    fail(n, boost::asio::error::operation_aborted, true);
  }
  while (wr_node* n = waiting_.pop())
    fail(n, boost::asio::error::operation_aborted);
  while (wr_node* n = limit_waiters_.pop())
    fail(n, boost::asio::error::operation_aborted);
  cq_->unreserve(options_.max_wr);
}

void shared_receive_queue_impl::fail(wr_node* n, error_code ec, bool posted) {
  if (metrics_on() && n->is_recv) [[unlikely]]
    note_finished(n, ec, nullptr, posted, n->srq ? &n->srq->counts_ : nullptr);
  n->state = node_state::done;
  n->complete(n, ec, nullptr, completion_mode::post);
}

void shared_receive_queue_impl::link_posted(wr_node* n) noexcept {
  n->prev = nullptr;
  n->next = posted_head_;
  if (posted_head_) posted_head_->prev = n;
  posted_head_ = n;
}

void shared_receive_queue_impl::unlink_posted(wr_node* n) noexcept {
  (n->prev ? n->prev->next : posted_head_) = n->next;
  if (n->next) n->next->prev = n->prev;
  n->next = n->prev = nullptr;
}

void shared_receive_queue_impl::start(wr_node* n, error_code ec) {
  if (ec) return fail(n, ec);
  if (!waiting_.empty() || credits_ == 0) {
    n->state = node_state::waiting_credit;
    waiting_.push(n);
    if (metrics_on()) [[unlikely]]
      note_credit_wait(true, &counts_);
    return;
  }
  post_now(n);
}

void shared_receive_queue_impl::post_now(wr_node* n) {
  if (grh_) {
    n->sg[0] = grh_->take();  // never empty: one slot per credit, and a spare
    if (!n->sg[0].addr) return fail(n, errno_code(ENOBUFS));
  }
  --credits_;
  n->pending = 1;
  ibv_recv_wr* bad = nullptr;
  if (const int rc = ibv_post_srq_recv(srq_, &n->wr.recv, &bad); rc != 0) {
    ++credits_;
    if (grh_) grh_->release(n->sg[0].addr);
    return fail(n, verbs_status_result(rc));
  }
  n->state = node_state::posted;
  link_posted(n);
  ++posted_;
  cq_->work_started();
}

void shared_receive_queue_impl::on_completion(wr_node* n, const ibv_wc& wc, completion_mode mode) {
  unlink_posted(n);
  --posted_;
  ++credits_;
  error_code ec = make_error_code(wc.status);
  if (grh_) release_grh_slot(n, ec);  // its header copied into the node: the slot serves the next receive
  // A peer's send-with-invalidate killed one of our windows' keys: record it before any handler runs. A key
  // of a window not bound through the queue pair the message came to (wc.qp_num) fails the receive
  // (errc::foreign_remote_invalidation).
  if (!ec && !grh_)
    if (const auto rkey = received_of(&wc).invalidated_rkey)
      ec = note_remote_invalidation(pd_->context, *rkey, wc.qp_num);
  if (!closing_)
    while (!waiting_.empty() && credits_ > 0)
      post_now(waiting_.pop());
  if (metrics_on()) [[unlikely]]
    note_finished(n, ec, &wc, true, &counts_);
  n->state = node_state::done;
  n->complete(n, ec, &wc, mode);
}

void shared_receive_queue_impl::cancel(wr_node* n, boost::asio::cancellation_type type) {
  using ct = boost::asio::cancellation_type;
  // A posted receive cannot be recalled (see the header): only waiting operations are cancelled.
  if (n->state != node_state::waiting_credit || (type & (ct::terminal | ct::partial | ct::total)) == ct::none) return;
  if (limit_waiters_.remove(n) || waiting_.remove(n)) fail(n, boost::asio::error::operation_aborted);
}

void shared_receive_queue_impl::set_limit(std::uint32_t n) {
  if (n > options_.max_wr)
    throw system_error(make_error_code(errc::device_limit_exceeded),
                       "shared_receive_queue::set_limit(" + std::to_string(n) + ") exceeds srq_options::max_wr = " +
                           std::to_string(options_.max_wr) + ": the low watermark counts posted receives");
  ibv_srq_attr attr{};
  attr.srq_limit = n;
  throw_on_error(verbs_status_result(ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT)),
                 "ibv_modify_srq(IBV_SRQ_LIMIT=" + std::to_string(n) + ")");
  limit_reached_ = false;
}

void shared_receive_queue_impl::start_wait_limit(wr_node* n) {
  if (limit_reached_) {
    limit_reached_ = false;
    return fail(n, {});
  }
  n->state = node_state::waiting_credit;
  limit_waiters_.push(n);
}

void shared_receive_queue_impl::attach(std::uint32_t qp_num, std::uint32_t qkey) {
  ++attached_;
  if (grh_) qkeys_.emplace_back(qp_num, qkey);
}

void shared_receive_queue_impl::detach(std::uint32_t qp_num) noexcept {
  --attached_;
  std::erase_if(qkeys_, [&](const auto& e) { return e.first == qp_num; });
}

std::uint32_t shared_receive_queue_impl::qkey_of(std::uint32_t qp_num) const noexcept {
  const auto it = std::find_if(qkeys_.begin(), qkeys_.end(), [&](const auto& e) { return e.first == qp_num; });
  return it == qkeys_.end() ? 0 : it->second;
}

void shared_receive_queue_impl::on_limit_reached() {
  if (limit_waiters_.empty()) {
    limit_reached_ = true;
    return;
  }
  while (wr_node* n = limit_waiters_.pop())
    fail(n, {});
}

}  // namespace detail

shared_receive_queue::shared_receive_queue(protection_domain& pd, completion_queue& recv_cq,
                                           const srq_options& options) {
  if (!pd) throw system_error(errno_code(EBADF), "shared_receive_queue: the protection domain is not open");
  impl_ = std::make_shared<detail::shared_receive_queue_impl>(pd.native_handle(), *detail::impl_of(recv_cq), options);
}

shared_receive_queue::shared_receive_queue(shared_receive_queue&&) noexcept = default;
shared_receive_queue& shared_receive_queue::operator=(shared_receive_queue&&) noexcept = default;
shared_receive_queue::~shared_receive_queue() = default;

shared_receive_queue::executor_type shared_receive_queue::get_executor() const noexcept {
  return impl_->cq_->executor_;
}
ibv_srq* shared_receive_queue::native_handle() const noexcept { return impl_ ? impl_->srq_ : nullptr; }
std::uint32_t shared_receive_queue::max_wr() const noexcept { return impl_ ? impl_->options_.max_wr : 0; }
std::size_t shared_receive_queue::posted() const noexcept { return impl_ ? impl_->posted_ : 0; }
std::size_t shared_receive_queue::waiting() const noexcept { return impl_ ? impl_->waiting_.size : 0; }
std::size_t shared_receive_queue::attached() const noexcept { return impl_ ? impl_->attached_ : 0; }
metrics::queue_counters shared_receive_queue::counters() const noexcept { return impl_ ? impl_->counts_.read() : metrics::queue_counters{}; }
void shared_receive_queue::set_limit(std::uint32_t n) { impl_->set_limit(n); }

}  // namespace coverbs
