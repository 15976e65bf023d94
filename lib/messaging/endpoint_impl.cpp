#include "messaging/endpoint_impl.hpp"
#include "messaging/header_codec.hpp"

#include "core/metrics.hpp"
#include "core/work_phrase.hpp"
#include "dataplane/dispatch_turn.hpp"
#include "dataplane/qp_impl.hpp"

#include <coverbs/protection_domain.hpp>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>

#include <cstdio>
#include <cstring>

namespace coverbs::detail {

namespace {

constexpr std::uint32_t no_call = std::numeric_limits<std::uint32_t>::max();

std::byte* allocate_slots(std::size_t bytes) {
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

[[noreturn]] void refuse(error_code ec, const std::string& what) { throw system_error(ec, what); }

}  // namespace

void op_list::push_back(message_op* op) noexcept {
  op->next = nullptr;
  op->prev = tail_;
  (tail_ ? tail_->next : head_) = op;
  tail_ = op;
}

void op_list::erase(message_op* op) noexcept {
  (op->prev ? op->prev->next : head_) = op->next;
  (op->next ? op->next->prev : tail_) = op->prev;
  op->prev = op->next = nullptr;
}

std::size_t op_list::size() const noexcept {
  std::size_t n = 0;
  for (const message_op* op = head_; op; op = op->next)
    ++n;
  return n;
}

void endpoint_impl::describe_work(std::vector<work_holder>& out) const {
  work_phrase p;
  p.add(calls_.size() - free_calls_.size(), "call awaiting its reply", "calls awaiting their replies");
  p.add(outbox_.size(), "send waiting for a credit or a send slot", "sends waiting for a credit or a send slot");
  p.add(request_waiters_.size(), "async_receive_request waiting for a request",
        "async_receive_request calls waiting for requests");
  p.add(message_waiters_.size(), "async_receive_message waiting for a message",
        "async_receive_message calls waiting for messages");
  p.add(unanswered_.size(), "request received and not answered", "requests received and not answered");
  if (p.empty()) return;
  char name[64];
  const ibv_qp* q = qp_ ? qp_->native_handle() : nullptr;
  std::snprintf(name, sizeof name, "endpoint on qp 0x%x", q ? q->qp_num : 0u);
  out.push_back({"message_endpoint", name, p.count(), p.text() + (error_ ? " (failed: " + diagnostic_ + ")" : "")});
}

endpoint_impl::endpoint_impl(protection_domain& pd, queue_pair& qp, const message_options& options, bool hold)
    : qp_(&qp), ex_(qp.get_executor()), options_(options), stride_(message_header::size + options.slot_size),
      recv_count_(options.recv_slots + credit_ledger::control_slots), ledger_(options.recv_slots), holding_(hold) {
  const auto invalid = make_error_code(boost::system::errc::invalid_argument);
  if (options.slot_size == 0 || options.slot_size + message_header::size > qp.max_message_size())
    refuse(invalid, "message_options::slot_size = " + std::to_string(options.slot_size) +
                        ": must be 1 .. the queue pair's max_message_size() less the " +
                        std::to_string(message_header::size) + "-byte header (" +
                        std::to_string(qp.max_message_size() - message_header::size) + ")");
  if (options.recv_slots == 0 || options.recv_slots > 0xFFFF)
    refuse(invalid, "message_options::recv_slots = " + std::to_string(options.recv_slots) + ": must be 1 .. 65535");
  if (options.send_slots == 0) refuse(invalid, "message_options::send_slots = 0: must be at least 1");
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (const error_code ec = verbs_status_result(::ibv_query_qp(qp.native_handle(), &attr, IBV_QP_CAP, &init)))
    refuse(ec, "ibv_query_qp(IBV_QP_CAP) of the message endpoint's queue pair");
  if (init.srq)
    refuse(make_error_code(errc::receive_queue_is_shared),
           "a message endpoint posts its own receives: its queue pair must not use a shared receive queue");
  // The depth asked for, not the device's (rxe grants 255 for 128): coverbs posts at most that many receives at
  // once, and a credit for a receive that waits inside coverbs would meet receiver-not-ready at the peer.
  const std::uint32_t max_recv_wr = impl_of(qp)->options_.max_recv_wr;
  if (recv_count_ > max_recv_wr)
    refuse(make_error_code(errc::device_limit_exceeded),
           "message_options::recv_slots = " + std::to_string(options.recv_slots) + " plus " +
               std::to_string(credit_ledger::control_slots) +
               " control receives exceeds the queue pair's max_recv_wr " + std::to_string(max_recv_wr) +
               " (queue_pair_options::max_recv_wr): raise it, or lower recv_slots");
  recv_mem_.reset(allocate_slots(recv_count_ * stride_));
  send_mem_.reset(allocate_slots(options.send_slots * stride_));
  recv_mr_ = memory_region(pd, {recv_mem_.get(), recv_count_ * stride_}, access::local_write);
  send_mr_ = memory_region(pd, {send_mem_.get(), options.send_slots * stride_}, access::local_write);
  recv_lkey_ = recv_mr_.lkey();
  send_lkey_ = send_mr_.lkey();
  free_send_.reserve(options.send_slots);
  for (std::uint32_t s = options.send_slots; s-- > 0;)
    free_send_.push_back(s);
  in_flight_.assign(options.send_slots, nullptr);
  queue_pair_impl* const q = impl_of(qp);
  const auto node_of = [&](slot_node& n, std::uint32_t slot, std::byte* at, std::uint32_t lkey) {
    n.complete = &complete_node;
    n.qp = q;
    n.endpoint = this;
    n.slot = slot;
    n.sge = {reinterpret_cast<std::uintptr_t>(at), static_cast<std::uint32_t>(stride_), lkey};
  };
  recv_nodes_.reset(new slot_node[recv_count_]);
  for (std::uint32_t s = 0; s < recv_count_; ++s) {
    slot_node& n = recv_nodes_[s];
    node_of(n, s, recv_slot(s), recv_lkey_);
    n.is_recv = true;
    n.wr.recv.wr_id = reinterpret_cast<std::uintptr_t>(&n);
    n.wr.recv.sg_list = &n.sge;
    n.wr.recv.num_sge = 1;
  }
  send_nodes_.reset(new slot_node[options.send_slots]);
  for (std::uint32_t s = 0; s < options.send_slots; ++s) {
    slot_node& n = send_nodes_[s];
    node_of(n, s, send_slot(s), send_lkey_);
    n.wr.send.wr_id = reinterpret_cast<std::uintptr_t>(&n);
    n.wr.send.sg_list = &n.sge;
    n.wr.send.num_sge = 1;
    n.wr.send.opcode = IBV_WR_SEND;
  }
}

endpoint_impl::~endpoint_impl() { on_context_shutdown(); }

void endpoint_impl::start() {
  enroll(boost::asio::query(ex_, boost::asio::execution::context));
  for (std::uint32_t s = 0; s < recv_count_; ++s)
    post_receive(s);
  schedule_credit_check();  // the first credit message grants the peer recv_slots
}

void endpoint_impl::start_node(slot_node& n) noexcept {
  n.state = node_state::waiting_credit;
  n.cancelled = false;
  n.pending = 0;
  n.first_error = {};
  n.next = nullptr;
  // A send's link to the list it was last posted in (post_list): a request posted alone carries none.
  if (!n.is_recv) n.wr.send.next = nullptr;
  if (posted_++ == 0) posted_self_ = shared_from_this();
  n.qp->start(&n);
}

void endpoint_impl::post_receive(std::uint32_t slot) noexcept {
  slot_node& n = recv_nodes_[slot];
  n.sge.lkey = recv_lkey_;
  start_node(n);
}

struct endpoint_impl::node_completion {
  std::shared_ptr<endpoint_impl> self;  // null once run or moved from
  slot_node* node;
  error_code ec;
  std::size_t bytes;

  node_completion(std::shared_ptr<endpoint_impl> s, slot_node* n, const error_code& e, std::size_t b) noexcept
      : self(std::move(s)), node(n), ec(e), bytes(b) {}
  node_completion(node_completion&&) noexcept = default;
  node_completion& operator=(node_completion&&) = delete;
  ~node_completion() {
    if (self) self->drop_hold();
  }
  void operator()() {
    const std::shared_ptr<endpoint_impl> e = std::move(self);
    e->on_node(*node, ec, bytes);
  }
};

void endpoint_impl::complete_node(wr_node* node, const error_code& ec, const ibv_wc* wc, completion_mode mode) {
  auto& n = static_cast<slot_node&>(*node);
  endpoint_impl& e = *n.endpoint;
  const std::size_t bytes = wc ? wc->byte_len : 0;
  if (mode == completion_mode::invoke) return e.on_node(n, ec, bytes);
  // Not in the endpoint's loop (a queue pair's destructor, a failure before posting, another thread's turn):
  // there, with a reference (the node's hold lasts until on_node, so the state lives to take one).
  node_completion run(e.shared_from_this(), &n, ec, bytes);
  if (mode == completion_mode::post)
    boost::asio::post(e.ex_, std::move(run));
  else
    boost::asio::dispatch(e.ex_, std::move(run));
}

void endpoint_impl::drop_hold() noexcept {
  const std::shared_ptr<endpoint_impl> last = --posted_ == 0 ? std::move(posted_self_) : nullptr;
}

void endpoint_impl::on_node(slot_node& n, error_code ec, std::size_t bytes) noexcept {
  if (n.is_recv)
    on_receive(n.slot, ec, bytes);
  else
    on_send(n.slot, ec);
  // The node's hold ends after its completion ran: a handler called in place may drop the endpoint and poll in
  // place, where the other nodes' flushed completions end their holds; this one keeps the state alive to here.
  drop_hold();
}

message_op* endpoint_impl::take_waiter(message_op_kind kind) noexcept {
  message_op* op = (kind == message_op_kind::receive_request ? request_waiters_ : message_waiters_).pop_front();
  if (op) op->owner = nullptr;
  return op;
}

error_code endpoint_impl::cause_of(error_code status) const noexcept {
  // Only while the endpoint is open: once it closed, its queue pair may be gone (a connection that closed with a
  // send unacknowledged destroys it; the flushed send's handler runs after that).
  if (status != wc_errc::wr_flush_err || !healthy()) return status;
  const error_code cause = qp_->error();
  if (!cause || cause == wc_errc::wr_flush_err || cause == boost::asio::error::operation_aborted) return status;
  return cause;
}

void endpoint_impl::on_receive(std::uint32_t slot, error_code ec, std::size_t bytes) noexcept {
  if (ec) {
    if (!healthy()) return;
    const error_code cause = cause_of(ec);
    fail(cause, "a receive of the message endpoint failed: " + ec.message() +
                    (cause != ec ? " (the queue pair's error: " + cause.message() + ")" : std::string()));
    return;
  }
  if (!healthy()) return;  // closed or failed: the message is dropped and its slot not posted again
  message_header h;
  if (!decode_header_inline(recv_slot(slot), bytes, options_.slot_size, h)) {
    std::string why = decode_header({recv_slot(slot), bytes}, options_.slot_size, h);
    if (why.empty()) why = "a malformed header";  // decode_header checks what decode_header_inline does
    return fail(make_error_code(errc::protocol_violation), "protocol violation: " + why);
  }
  if (peer_slot_size_ != 0 && h.slot_size != peer_slot_size_)
    return fail(make_error_code(errc::protocol_violation), "protocol violation: the peer's slot size changed from " +
                                                               std::to_string(peer_slot_size_) + " to " +
                                                               std::to_string(h.slot_size));
  peer_slot_size_ = h.slot_size;
  const bool control = h.type == message_type::credit;
  if (!ledger_.try_arrive(control))
    return fail(make_error_code(errc::credit_overrun), "credit overrun: " + ledger_.arrived(control));
  if (!ledger_.try_return(h.data_credits, h.control_credits))
    return fail(make_error_code(errc::protocol_violation),
                "protocol violation: " + ledger_.returned(h.data_credits, h.control_credits));
  if (control) {
    ++stats_.credit_updates_received;
    post_receive(slot);
    ledger_.reposted(true);
    tally(metric::receives_reposted);
    pump();
    schedule_credit_check();
    return;
  }
  ++stats_.messages_received;
  const parked p{slot, h.length, h.correlation_id};
  message_op* op = nullptr;
  if (h.type == message_type::reply) {
    const auto index = static_cast<std::uint32_t>(h.correlation_id);
    const auto generation = static_cast<std::uint32_t>(h.correlation_id >> 32);
    call_entry* e = index < calls_.size() ? &calls_[index] : nullptr;
    if (e && e->st == call_entry::state::awaiting && e->generation == generation) {
      op = e->op;
      e->op = nullptr;
      e->st = call_entry::state::free;
      free_calls_.push_back(index);
      op->owner = nullptr;
      op->call_index = no_call;
    } else if (e && e->late > 0 && generation != 0 && e->generation - generation < 0x8000'0000u) {
      --e->late;  // a reply to a cancelled call (this generation of the entry or an earlier one)
      ++stats_.replies_dropped;
      release(slot);
    } else {
      return fail(make_error_code(errc::protocol_violation), "protocol violation: a reply for correlation id " +
                                                                 std::to_string(h.correlation_id) +
                                                                 ", which no call awaits");
    }
  } else if (h.type == message_type::request) {
    if (h.correlation_id == 0)
      return fail(make_error_code(errc::protocol_violation),
                  "protocol violation: a request with correlation id 0 (every call's id is non-zero)");
    if (unanswered_.size() >= max_unanswered)
      return fail(make_error_code(errc::protocol_violation),
                  "protocol violation: " + std::to_string(max_unanswered) +
                      " requests received and not answered (a peer that keeps calling without replies, or a server "
                      "that drops requests without async_reply): answer or drop each request with async_reply");
    if (!unanswered_.insert(h.correlation_id))
      return fail(make_error_code(errc::protocol_violation),
                  "protocol violation: a second request with correlation id " + std::to_string(h.correlation_id) +
                      " while the first is not answered");
    if (!(op = take_waiter(message_op_kind::receive_request))) requests_.push_back(p);
  } else if (!(op = take_waiter(message_op_kind::receive_message))) {
    messages_.push_back(p);
  }
  pump();
  schedule_credit_check();
  // This receive's node holds the state (posted_self_) until on_node returns: it (and `ex_`) lives while the
  // handler runs, even when the message the handler got was the last other reference.
  if (op) op->complete({}, view(p), p.id, ex_, true);
}

void endpoint_impl::on_send(std::uint32_t slot, error_code ec) noexcept {
  message_op* op = in_flight_[slot];
  in_flight_[slot] = nullptr;
  free_send_.push_back(slot);
  const error_code cause = ec ? cause_of(ec) : ec;
  if (ec && healthy())
    fail(cause, "a send of the message endpoint failed: " + ec.message() +
                    (cause != ec ? " (the queue pair's error: " + cause.message() + ")" : std::string()));
  if (op) {
    op->owner = nullptr;
    op->complete(cause, {}, 0, ex_, true);
  }
  pump();
  schedule_credit_check();
}

void endpoint_impl::post_message(std::uint32_t slot, message_type type, std::uint64_t id, message_op* op) noexcept {
  std::byte* p = send_slot(slot);
  message_header h;
  h.type = type;
  h.length = op ? static_cast<std::uint32_t>(op->length) : 0;
  h.correlation_id = id;
  h.slot_size = static_cast<std::uint32_t>(options_.slot_size);
  const credit_ledger::report r = ledger_.take_report();
  h.data_credits = r.data;
  h.control_credits = r.control;
  encode_header_inline(h, p);
  if (h.length) op->copy_payload(p + message_header::size);
  in_flight_[slot] = op && op->kind == message_op_kind::send ? op : nullptr;
  slot_node& n = send_nodes_[slot];
  const auto bytes = static_cast<std::uint32_t>(message_header::size + h.length);
  n.sge.length = bytes;
  n.sge.lkey = send_lkey_;
  n.wr.send.send_flags = IBV_SEND_SIGNALED | (bytes <= n.qp->max_inline_ ? IBV_SEND_INLINE : 0);
  start_node(n);
}

std::uint32_t endpoint_impl::add_call(message_op* op) {
  std::uint32_t index;
  if (!free_calls_.empty()) {
    index = free_calls_.back();
    free_calls_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(calls_.size());
    calls_.emplace_back();
  }
  call_entry& e = calls_[index];
  if (++e.generation == 0) e.generation = 1;  // id 0 is no call's: a generation of 0 is skipped when it wraps
  e.op = op;
  e.st = call_entry::state::awaiting;
  return index;
}

void endpoint_impl::pump_outbox() noexcept {
  while (healthy() && !holding_ && !outbox_.empty()) {
    message_op* op = outbox_.front();
    // The peer's slot size comes with its first header, as do the first credits: nothing is posted before.
    if (peer_slot_size_ != 0 && op->length > peer_slot_size_) {
      outbox_.erase(op);
      refuse_for_peer(op);
      continue;
    }
    if (free_send_.empty() || !ledger_.take_data()) return;
    outbox_.erase(op);
    const std::uint32_t slot = free_send_.back();
    free_send_.pop_back();
    ++stats_.messages_sent;
    if (op->kind == message_op_kind::call) {
      op->call_index = add_call(op);
      const std::uint64_t id = (std::uint64_t{calls_[op->call_index].generation} << 32) | op->call_index;
      post_message(slot, message_type::request, id, op);
    } else {
      post_message(slot, op->type, op->correlation_id, op);
    }
  }
}

void endpoint_impl::post_credit_check() noexcept {
  if (check_scheduled_ || holding_ || !healthy()) return;
  check_scheduled_ = true;
  // Later, not now: a reply or message the application sends in this turn carries the credits for free.
  boost::asio::post(ex_, [self = shared_from_this()] {
    self->check_scheduled_ = false;
    self->credit_check();
  });
}

void endpoint_impl::credit_check() noexcept {
  if (!healthy() || !ledger_.update_due(!outbox_.empty()) || free_send_.empty()) return;
  if (!ledger_.take_control()) return;  // checked again when the peer returns control credits
  const std::uint32_t slot = free_send_.back();
  free_send_.pop_back();
  ++stats_.credit_updates_sent;
  post_message(slot, message_type::credit, 0, nullptr);
}

void endpoint_impl::start_sending() noexcept {
  if (!holding_) return;
  holding_ = false;
  pump();
  schedule_credit_check();
}

void endpoint_impl::start_op(message_op* op) noexcept {
  if (!healthy()) return op->complete(error_ ? error_ : make_error_code(errc::endpoint_closed), {}, 0, ex_, false);
  switch (op->kind) {
  case message_op_kind::call:
  case message_op_kind::send:
    if (op->type == message_type::reply && op->correlation_id == 0)
      // Every call's id has a generation of at least 1: id 0 is a request never received (default-constructed)
      // or one whose call moved to another inbound_request.
      return refuse_op(op, make_error_code(boost::system::errc::invalid_argument),
                       "async_reply: the inbound_request holds no call (default-constructed or moved from): answer "
                       "the one async_receive_request completed with, or the request it was moved to");
    if (op->length > options_.slot_size)
      return refuse_op(op, make_error_code(errc::message_too_large),
                       "a message of " + std::to_string(op->length) + " bytes does not fit the slot size " +
                           std::to_string(options_.slot_size) + " (message_options::slot_size)");
    // A second reply to one request would reach the peer as a reply no call awaits and fail its endpoint.
    if (op->type == message_type::reply && !unanswered_.erase(op->correlation_id))
      return refuse_op(op, make_error_code(boost::system::errc::invalid_argument),
                       "async_reply: the request with correlation id " + std::to_string(op->correlation_id) +
                           " was answered already (each request takes one reply), or this endpoint never received it");
    if (peer_slot_size_ != 0 && op->length > peer_slot_size_) return refuse_for_peer(op);
    op->owner = this;
    if (!outbox_.empty() || free_send_.empty() || ledger_.data_credits() == 0) ++stats_.credit_waits;
    outbox_.push_back(op);
    pump();
    schedule_credit_check();
    return;
  case message_op_kind::receive_request:
  case message_op_kind::receive_message: {
    const bool request = op->kind == message_op_kind::receive_request;
    auto& parked_queue = request ? requests_ : messages_;
    if (!parked_queue.empty()) {
      const parked p = parked_queue.front();
      parked_queue.pop_front();
      return op->complete({}, view(p), p.id, ex_, false);
    }
    op->owner = this;
    (request ? request_waiters_ : message_waiters_).push_back(op);
    return;
  }
  }
}

void endpoint_impl::refuse_op(message_op* op, error_code ec, std::string why) noexcept {
  diagnostic_ = std::move(why);
  op->owner = nullptr;
  op->complete(ec, {}, 0, ex_, false);
}

void endpoint_impl::refuse_for_peer(message_op* op) noexcept {
  if (op->type == message_type::reply) unanswered_.insert(op->correlation_id);  // not sent: answer it again
  refuse_op(op, make_error_code(errc::message_too_large),
            "a message of " + std::to_string(op->length) + " bytes does not fit the peer's slot size " +
                std::to_string(peer_slot_size_) + " (its message_options::slot_size; this side's is " +
                std::to_string(options_.slot_size) + ")");
}

void endpoint_impl::cancel(message_op* op) noexcept {
  switch (op->kind) {
  case message_op_kind::call:
    if (op->call_index != no_call) {
      call_entry& e = calls_[op->call_index];
      e.op = nullptr;
      e.st = call_entry::state::free;  // free now: its reply, if it comes, is told by its generation
      ++e.late;
      free_calls_.push_back(op->call_index);
      op->call_index = no_call;
      ++stats_.calls_abandoned;
    } else {
      outbox_.erase(op);
    }
    break;
  case message_op_kind::send:
    for (message_op* sent : in_flight_)
      if (sent == op) return;  // posted: it completes when the device is done with it
    outbox_.erase(op);
    if (op->type == message_type::reply) unanswered_.insert(op->correlation_id);  // not sent: answer it again
    break;
  case message_op_kind::receive_request: request_waiters_.erase(op); break;
  case message_op_kind::receive_message: message_waiters_.erase(op); break;
  }
  op->owner = nullptr;
  op->complete(make_error_code(boost::asio::error::operation_aborted), {}, 0, ex_, false);
}

void endpoint_impl::release(std::uint32_t slot) noexcept {
  if (!healthy()) return;
  post_receive(slot);
  ledger_.reposted(false);
  tally(metric::receives_reposted);
  schedule_credit_check();
}

void endpoint_impl::fail(error_code ec, std::string why) noexcept {
  if (error_) return;
  const bool closing = ec == boost::asio::error::operation_aborted;
  error_ = closing ? make_error_code(errc::endpoint_closed) : ec;
  if (!why.empty()) diagnostic_ = std::move(why);
  std::vector<message_op*> pending;
  for (op_list* list : {&outbox_, &request_waiters_, &message_waiters_})
    while (message_op* op = list->pop_front())
      pending.push_back(op);
  for (std::uint32_t i = 0; i < calls_.size(); ++i) {
    call_entry& e = calls_[i];
    if (e.st == call_entry::state::awaiting) free_calls_.push_back(i);
    if (e.op) pending.push_back(e.op);
    e = call_entry{nullptr, e.generation, 0, call_entry::state::free};
  }
  for (message_op*& op : in_flight_)
    if (op) pending.push_back(std::exchange(op, nullptr));
  requests_.clear();
  messages_.clear();
  unanswered_.clear();
  for (message_op* op : pending) {
    op->owner = nullptr;
    op->call_index = no_call;
    op->complete(ec, {}, 0, ex_, false);
  }
}

void endpoint_impl::close(bool deregister) noexcept {
  if (!context_gone())
    fail(make_error_code(boost::asio::error::operation_aborted), {});
  else if (!error_)
    error_ = make_error_code(errc::endpoint_closed);
  if (!deregister) return;
  // Deregister now, while the protection domain surely lives: the receives still posted keep this object
  // (and the slots' memory) alive until the queue pair flushes them, which may be after the domain is gone.
  // A message that reaches them now fails the queue pair (local protection error), which no longer serves
  // an endpoint.
  recv_mr_ = memory_region();
  send_mr_ = memory_region();
  recv_lkey_ = send_lkey_ = 0;
}

void endpoint_impl::on_context_shutdown() noexcept {
  for (op_list* list : {&outbox_, &request_waiters_, &message_waiters_})
    while (message_op* op = list->pop_front())
      op->destroy();
  for (call_entry& e : calls_)
    if (auto* op = std::exchange(e.op, nullptr)) op->destroy();
  for (message_op*& op : in_flight_)
    if (op) std::exchange(op, nullptr)->destroy();
}

void start_message_op(endpoint_impl* impl, message_op* op, const boost::asio::any_io_executor& io_ex) noexcept {
  if (!impl) return op->complete(make_error_code(errc::endpoint_closed), {}, 0, io_ex, false);
  impl->start_op(op);
}

void cancel_message_op(message_op* op) noexcept {
  if (op->owner) op->owner->cancel(op);
}

void release_slot(std::shared_ptr<endpoint_impl> impl, std::uint32_t slot) noexcept {
  // The context's shutdown is the one write of this flag: a message released after it has nowhere to go.
  if (impl->context_gone()) return;
  // Called directly when this thread runs the endpoint's io_context (the common case: no type-erased dispatch,
  // no allocation), else dispatched there; the handler's reference keeps the state alive until it has run.
  const message_endpoint::executor_type& ex = impl->executor();
  if (const auto* io = held_io_executor(ex);
      io && (dispatch_turn::in_place_on(&io->context()) || io->running_in_this_thread())) {
    endpoint_impl& e = *impl;
    return e.release(slot, std::move(impl));
  }
  boost::asio::dispatch(ex, [impl = std::move(impl), slot]() mutable {
    endpoint_impl& e = *impl;
    e.release(slot, std::move(impl));
  });
}

}  // namespace coverbs::detail
