// What the data path holds outstanding, for outstanding_work.hpp: a completion queue's own wait, and every
// queue pair and shared receive queue whose completions it receives.
#include "core/work_phrase.hpp"
#include "dataplane/cq_impl.hpp"
#include "dataplane/qp_impl.hpp"
#include "dataplane/srq_impl.hpp"
#include "events/qp_registry.hpp"

#include <cstdio>

namespace coverbs::detail {

namespace {

std::string device_of(const ibv_context* context) {
  return context ? ibv_get_device_name(context->device) : "?";
}

void describe_qp(const queue_pair_impl& q, std::vector<work_holder>& out) {
  work_phrase p;
  p.add(q.sent_.size, "send operation posted", "send operations posted");
  p.add(q.batch_.size, "send operation in this turn's list", "send operations in this turn's list");
  p.add(q.retired_.size, "completed send operation whose handler has yet to run",
        "completed send operations whose handlers have yet to run");
  p.add(q.sq_.waiting.size, "send operation waiting for a send-queue credit",
        "send operations waiting for a send-queue credit");
  p.add(q.srq_ ? 0 : q.rq_.outstanding, "receive posted", "receives posted");
  p.add(q.rq_.waiting.size, "receive waiting for a receive-queue credit", "receives waiting for a receive-queue credit");
  p.add(q.sq_.flushed.size + q.rq_.flushed.size, "operation waiting for the error state's flush",
        "operations waiting for the error state's flush");
  if (p.empty()) return;
  char name[64];
  std::snprintf(name, sizeof name, "qp 0x%x on ", q.qp_ ? q.qp_->qp_num : 0u);
  out.push_back({q.create_.type == IBV_QPT_UD ? "datagram_queue_pair" : "queue_pair",
                 name + device_of(q.qp_ ? q.qp_->context : nullptr), p.count(),
                 p.text() + (q.in_error() ? " (in the error state: " + q.error_.message() + ")" : "")});
}

void describe_srq(const shared_receive_queue_impl& s, std::vector<work_holder>& out) {
  work_phrase p;
  p.add(s.posted_, "receive posted", "receives posted");
  p.add(s.waiting_.size, "receive waiting for a credit", "receives waiting for a credit");
  p.add(s.limit_waiters_.size, "async_wait_limit pending", "async_wait_limit calls pending");
  if (p.empty()) return;
  char name[64];
  std::snprintf(name, sizeof name, "srq %p on ", static_cast<const void*>(s.srq_));
  out.push_back({"shared_receive_queue", name + device_of(s.srq_ ? s.srq_->context : nullptr), p.count(), p.text()});
}

}  // namespace

void cq_impl::describe_work(std::vector<work_holder>& out) const {
  if (cq_ && waiting_) {
    char name[64];
    std::snprintf(name, sizeof name, "cq %p on ", static_cast<const void*>(cq_));
    const char* how = options_.spin.count() > 0 ? "its polling step" : "its readiness wait on the completion channel";
    out.push_back({"completion_queue", name + device_of(cq_->context), 0,
                   std::string(how) + ", for " + std::to_string(outstanding_) +
                       (outstanding_ == 1 ? " work request outstanding" : " work requests outstanding")});
  }
  visit_registered(
      [&](const queue_pair_impl& q) {
        if (q.send_cq_ == this) describe_qp(q, out);
      },
      [&](const shared_receive_queue_impl& s) {
        if (s.cq_ == this) describe_srq(s, out);
      });
}

}  // namespace coverbs::detail
