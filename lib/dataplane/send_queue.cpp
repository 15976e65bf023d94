// The send queue's posting rule (queue_pair.hpp, "When a request is posted"): outside a dispatch turn a send
// operation is posted at once, signaled; inside one it joins its queue pair's list, posted when the turn ends
// (or when the list is full) by one ibv_post_send with only its last request signaled. An RC send queue
// completes in order, so the completion of a signaled request retires every request posted before it.
#include "dataplane/cq_impl.hpp"
#include "dataplane/dispatch_turn.hpp"
#include "dataplane/qp_impl.hpp"

namespace coverbs::detail {

// Here, beside submit and post_batch, so that start, submit and the lone request's post are one function with
// one frame (the gates, the credit wait, the list and the refusals are calls of their own).
void queue_pair_impl::start(wr_node* n) {
  if (gates_) [[unlikely]]
    return start_gated(n);
  start_open(n);
}

void queue_pair_impl::submit(wr_node* n) {
  work_queue& q = queue_of(n);
  q.credits -= n->credits;
  if (n->is_recv) return post_recv_now(n);
  if (n->credits == 1 && !n->post) [[likely]] {
    if (dispatch_turn* turn = dispatch_turn::current()) {
      n->state = node_state::batched;
      batch_.push(n);
      if (!turn_) turn->enroll(*this);
      if (batch_.size >= batch_cap_) post_batch();
      return;
    }
  }
  // A chain or a verb of its own (ibv_bind_mw) is posted alone; what the turn holds goes first, so the send
  // queue keeps initiation order.
  post_batch();
  post_send_now(n);
}

void queue_pair_impl::post_recv_now(wr_node* n) {
  n->pending = n->credits;
  ibv_recv_wr* bad = nullptr;
  const int rc = n->post ? n->post(qp_, n) : ibv_post_recv(qp_, &n->wr.recv, &bad);
  if (rc != 0) {
    rq_.credits += n->credits;
    return fail(n, verbs_status_result(rc));
  }
  n->state = node_state::posted;
  rq_.outstanding += n->credits;
  recv_cq_->work_started(n->credits);
}

void queue_pair_impl::post_send_now(wr_node* n) {
  n->pending = n->credits;
  int rc;
  ibv_send_wr* bad = nullptr;
  if (n->post)
    rc = n->post(qp_, n);
  else
    rc = ibv_post_send(qp_, &n->wr.send, &bad);
  if (rc != 0) {
    // A chain whose first request was posted (`bad` names the second) must wait for that one's completion:
    // the node is its wr_id. It completes then, with the verb's error.
    std::uint32_t posted = 0;
    if (bad && bad != &n->wr.send)
      for (const ibv_send_wr* w = &n->wr.send; w && w != bad; w = w->next)
        ++posted;
    sq_.credits += n->credits - posted;
    if (posted == 0) return fail(n, verbs_status_result(rc));
    n->first_error = verbs_status_result(rc);
    n->pending = posted;
  }
  ++send_cq_->stats_.send_doorbells;
  send_cq_->stats_.send_requests += n->pending;
  n->state = node_state::posted;
  sent_.push(n);
  sq_.outstanding += n->pending;
  send_cq_->work_started(n->pending);
}

void queue_pair_impl::post_batch() noexcept {
  wr_node* n = batch_.head;
  if (!n) return;
  if (n != batch_.tail) return post_list();
  // One request (a lone operation per turn): no list to link. This path saves no registers of its own (the
  // list and the failure are calls of their own): a lone operation is the latency path.
  batch_ = node_fifo{};
  n->pending = 1;
  n->state = node_state::posted;
  n->wr.send.next = nullptr;
  n->wr.send.send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad;
  const int rc = ibv_post_send(qp_, &n->wr.send, &bad);
  ++send_cq_->stats_.send_doorbells;
  if (rc != 0) [[unlikely]]
    return refused_alone(n, rc);
  ++send_cq_->stats_.send_requests;
  ++sq_.outstanding;
  send_cq_->work_started(1);
  sent_.push(n);
}

void queue_pair_impl::refused_alone(wr_node* n, int rc) noexcept {
  ++sq_.credits;
  fail(n, verbs_status_result(rc));
}

void queue_pair_impl::post_list() noexcept {
  // Link the list: every request unsignaled but the last.
  for (wr_node* p = batch_.head; p; p = p->next) {
    ibv_send_wr& wr = p->wr.send;
    p->pending = 1;
    p->state = node_state::posted;
    if (p->next) {
      wr.next = &p->next->wr.send;
      wr.send_flags &= ~static_cast<unsigned>(IBV_SEND_SIGNALED);
    } else {
      wr.next = nullptr;
      wr.send_flags |= IBV_SEND_SIGNALED;
    }
  }
  node_fifo list;
  list.splice(batch_);
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_, &list.head->wr.send, &bad);
  ++send_cq_->stats_.send_doorbells;
  if (rc == 0) [[likely]] {
    send_cq_->stats_.send_requests += list.size;
    sq_.outstanding += list.size;
    send_cq_->work_started(list.size);
    sent_.splice(list);
    return;
  }
  // The requests from `bad` on were not posted; they fail with the verb's error. Validation happens before a
  // request joins a list, and credits keep the queue from overflowing, so a provider refuses only on its own
  // failure, at the first request (nothing posted) in every case known. Were a list cut in the middle, the
  // requests posted before `bad`, the last of them unsignaled, would complete with the next signaled request
  // of the queue pair; with none, they hold the queue pair's destructor for its 5 s and are leaked (it says
  // so on stderr).
  std::size_t posted = 0;
  for (wr_node* p = list.head; p && &p->wr.send != bad; p = p->next)
    ++posted;
  send_cq_->stats_.send_requests += posted;
  for (std::size_t i = 0; i < posted; ++i)
    sent_.push(list.pop());
  sq_.outstanding += posted;
  send_cq_->work_started(posted);
  const error_code ec = verbs_status_result(rc);
  while (wr_node* n = list.pop()) {
    n->wr.send.next = nullptr;
    ++sq_.credits;
    fail(n, ec);
  }
}

void queue_pair_impl::retire_before(const wr_node* n, node_fifo& retired) noexcept {
  while (sent_.head && sent_.head != n) {
    wr_node* a = sent_.pop();
    sq_.credits += a->pending;
    sq_.outstanding -= a->pending;
    send_cq_->work_retired(a->pending);
    a->pending = 0;
    a->state = node_state::done;
    retired.push(a);
  }
}

}  // namespace coverbs::detail
