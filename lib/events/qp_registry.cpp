#include "events/qp_registry.hpp"

#include <boost/asio/post.hpp>

#include <mutex>
#include <unordered_map>
#include <utility>

namespace coverbs::detail {

namespace {

struct context_entry {
  std::unordered_map<ibv_qp*, std::shared_ptr<qp_registration>> qps;
  std::unordered_map<ibv_srq*, std::shared_ptr<srq_registration>> srqs;
  bool events_claimed = false;
};

struct registry {
  std::mutex mutex;
  std::unordered_map<ibv_context*, context_entry> contexts;
};

registry& the_registry() {
  static registry* r = new registry;  // never destroyed: queue pairs may outlive static destruction
  return *r;
}

void forget_if_empty(registry& r, std::unordered_map<ibv_context*, context_entry>::iterator it) {
  if (it->second.qps.empty() && it->second.srqs.empty() && !it->second.events_claimed) r.contexts.erase(it);
}

}  // namespace

void visit_registered(const std::function<void(const queue_pair_impl&)>& on_qp,
                      const std::function<void(const shared_receive_queue_impl&)>& on_srq) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  for (const auto& [context, entry] : r.contexts) {
    for (const auto& [qp, e] : entry.qps)
      if (e->impl) on_qp(*e->impl);
    for (const auto& [srq, e] : entry.srqs)
      if (e->impl) on_srq(*e->impl);
  }
}

void register_qp(const std::shared_ptr<qp_registration>& e) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.contexts[e->context].qps.emplace(e->qp, e);
}

namespace {
/// Clears `e->impl` and removes `e` (keyed by its `key` member) from its context's `map`.
template <class Entry, class Key>
void unregister_entry(const std::shared_ptr<Entry>& e, Key Entry::*key,
                      std::unordered_map<Key, std::shared_ptr<Entry>> context_entry::*map) noexcept {
  if (!e) return;
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  e->impl = nullptr;
  auto it = r.contexts.find(e->context);
  if (it == r.contexts.end()) return;
  (it->second.*map).erase((*e).*key);
  forget_if_empty(r, it);
}
}  // namespace

void unregister_qp(const std::shared_ptr<qp_registration>& e) noexcept {
  unregister_entry(e, &qp_registration::qp, &context_entry::qps);
}

std::size_t fail_queue_pairs(ibv_context* context, const std::function<bool(const qp_registration&)>& match,
                             errc cause) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  auto it = r.contexts.find(context);
  if (it == r.contexts.end()) return 0;
  std::size_t n = 0;
  for (auto& [qp, e] : it->second.qps) {
    if (!e->impl || !match(*e)) continue;
    int none = 0;
    e->cause.compare_exchange_strong(none, static_cast<int>(cause));  // the first event is the cause
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    if (const error_code ec = verbs_status_result(ibv_modify_qp(qp, &attr, IBV_QP_STATE)))
      std::fprintf(stderr, "coverbs: moving queue pair %u to the error state after a device event failed (%s)\n",
                   qp->qp_num, ec.message().c_str());
    ++n;
    try {
      boost::asio::post(e->executor, [e = e] {
        queue_pair_impl* q;
        {
          std::lock_guard inner(the_registry().mutex);
          q = e->impl;
        }
        // The queue pair is destroyed on this executor, so it cannot go away between the read and the call.
        if (q) qp_on_async_error(q, e->pending_cause());
      });
    } catch (...) {
      // Out of memory: the device still flushes the queue pair; only its error() keeps wr_flush_err.
    }
  }
  return n;
}

boost::asio::any_io_executor executor_of_qp(ibv_context* context, std::uint32_t qp_num) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  auto it = r.contexts.find(context);
  if (it == r.contexts.end()) return {};
  for (const auto& [qp, e] : it->second.qps)  // linear: only an attack (a foreign remote invalidation) asks
    if (qp->qp_num == qp_num && e->impl) return e->executor;
  return {};
}

void register_srq(const std::shared_ptr<srq_registration>& e) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.contexts[e->context].srqs.emplace(e->srq, e);
}

void unregister_srq(const std::shared_ptr<srq_registration>& e) noexcept {
  unregister_entry(e, &srq_registration::srq, &context_entry::srqs);
}

bool notify_srq_limit(ibv_context* context, ibv_srq* srq) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  auto it = r.contexts.find(context);
  if (it == r.contexts.end()) return false;
  auto found = it->second.srqs.find(srq);
  if (found == it->second.srqs.end() || !found->second->impl) return false;
  try {
    boost::asio::post(found->second->executor, [e = found->second] {
      shared_receive_queue_impl* s;
      {
        std::lock_guard inner(the_registry().mutex);
        s = e->impl;
      }
      // The SRQ is destroyed on this executor, so it cannot go away between the read and the call.
      if (s) srq_on_limit_reached(s);
    });
  } catch (...) {
    return false;  // out of memory: the event is still reported through async_wait_event
  }
  return true;
}

bool claim_async_events(ibv_context* context) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  try {
    context_entry& c = r.contexts[context];
    if (c.events_claimed) return false;
    c.events_claimed = true;
    return true;
  } catch (...) {
    return false;
  }
}

void release_async_events(ibv_context* context) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  auto it = r.contexts.find(context);
  if (it == r.contexts.end()) return;
  it->second.events_claimed = false;
  forget_if_empty(r, it);
}

}  // namespace coverbs::detail
