#include <coverbs/registration_service.hpp>

#include "core/metrics.hpp"
#include "verbs/region_registry.hpp"
#include "verbs/registration_errors.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace coverbs {
namespace {

class libibverbs_registrar final : public registrar {
public:
  ibv_mr* reg_mr(ibv_pd* pd, std::span<std::byte> buffer, access rights, error_code& ec) noexcept override {
    ibv_mr* mr = ::ibv_reg_mr(pd, buffer.data(), buffer.size(), to_verbs(rights));
    ec = verbs_null_result(mr);
    return mr;
  }
  error_code dereg_mr(ibv_mr* mr) noexcept override { return verbs_status_result(::ibv_dereg_mr(mr)); }
  error_code rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, std::span<std::byte> buffer, access rights,
                      bool& still_valid) noexcept override {
    const int rc = ::ibv_rereg_mr(mr, flags, pd, buffer.data(), buffer.size(), to_verbs(rights));
    return verbs_rereg_result(rc, still_valid);
  }
};

const error_code aborted = boost::asio::error::operation_aborted;

bool transient(const error_code& ec) noexcept {
  return ec == boost::system::errc::not_enough_memory || ec == boost::system::errc::resource_unavailable_try_again;
}

} // namespace

std::shared_ptr<registrar> verbs_registrar() {
  static const auto instance = std::make_shared<libibverbs_registrar>();
  return instance;
}

registration_service::registration_service(executor_type ex, const registration_options& options,
                                           std::shared_ptr<registrar> verbs)
    : ex_(std::move(ex)), core_(std::make_shared<detail::registration_core>(std::move(verbs), options)) {}

registration_service::~registration_service() { core_->shutdown(); }

registration_service& default_registration_service() {
  static registration_service service(boost::asio::system_executor{});
  return service;
}

namespace detail {
ibv_mr* accounting::reg(ibv_pd* pd, std::span<std::byte> buffer, access rights, error_code& ec) noexcept {
  if (metrics_on()) [[unlikely]] {
    const auto start = std::chrono::steady_clock::now();
    ibv_mr* mr = verbs->reg_mr(pd, buffer, rights, ec);
    const auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
    if (mr) note_registration(mr->length, static_cast<std::uint64_t>(took.count()));
    return counted(mr);
  }
  return counted(verbs->reg_mr(pd, buffer, rights, ec));
}

ibv_mr* accounting::counted(ibv_mr* mr) noexcept {
  if (mr) {
    registered.fetch_add(1, std::memory_order_relaxed);
    bytes_held.fetch_add(static_cast<std::int64_t>(mr->length), std::memory_order_relaxed);
  }
  return mr;
}

error_code accounting::dereg(ibv_mr* mr) noexcept {
  // As memory_region::deregister: coverbs refuses first and clearly (the device would say EINVAL or EBUSY).
  if (detail::windows_bound_to(mr) > 0) return errc::region_has_bound_windows;
  const auto length = static_cast<std::int64_t>(mr->length);
  error_code ec = verbs->dereg_mr(mr);
  if (!ec) {
    detail::forget_region(mr);
    deregistered.fetch_add(1, std::memory_order_release);  // after its `registered` or `taken_back`: see stats()
    bytes_held.fetch_sub(length, std::memory_order_relaxed);
  }
  return ec;
}

shared_mr::shared_mr(std::shared_ptr<accounting> acct, ibv_mr* mr, access rights) noexcept
    : acct_(std::move(acct)), mr_(mr), rights_(rights) {
  acct_->shared_live.fetch_add(1, std::memory_order_relaxed);
}

shared_mr::~shared_mr() {
  const error_code ec = acct_->dereg(mr_);
  acct_->shared_live.fetch_sub(1, std::memory_order_relaxed);
  if (ec)
    std::fprintf(stderr, "coverbs: ibv_dereg_mr of a shared registration failed (%s); it stays registered\n",
                 ec.message().c_str());
}

request::~request() {
  if (mr && acct) acct->dereg(mr);
}

memory_region hand_over(request& r) noexcept {
  if (!r.mr) return {};
  r.acct->handed_over.fetch_add(1, std::memory_order_release);  // after its `registered`: see stats()
  r.acct->bytes_held.fetch_sub(static_cast<std::int64_t>(r.mr->length), std::memory_order_relaxed);
  return memory_region::adopt(std::exchange(r.mr, nullptr), r.mr_rights);
}

registration_core::registration_core(std::shared_ptr<registrar> verbs, const registration_options& options)
    : acct_(std::make_shared<accounting>()), attempts_(std::max(1u, options.retry.attempts)),
      first_backoff_(options.retry.first_backoff), max_backoff_(options.retry.max_backoff),
      multiplier_(std::max(1u, options.retry.multiplier)), scheduling_policy_(options.scheduling == worker_scheduling::batch  ? SCHED_BATCH
                         : options.scheduling == worker_scheduling::idle ? SCHED_IDLE
                                                                         : -1), pool_(std::max<std::size_t>(1, options.threads)) {
  acct_->verbs = std::move(verbs);
  metrics_ = enroll_metrics([acct = acct_](metrics::snapshot& out, bool retiring) {
    const auto get = [](const auto& v) { return v.load(std::memory_order_relaxed); };
    auto& r = out.registration;
    r.deregistered += acct->deregistered.load(std::memory_order_acquire);  // first: as stats()
    r.registered += get(acct->registered);
    r.failed += get(acct->failed);
    r.retries += get(acct->retries);
    if (!retiring) r.bytes_held += get(acct->bytes_held);
  });
}

registration_core::~registration_core() { shutdown(); }

bool registration_core::submit(const std::shared_ptr<request>& r) {
  std::unique_lock lock(mutex_);
  r->in_flight_pos = in_flight_.insert(in_flight_.end(), r);
  r->listed = true;
  acct_->in_flight.fetch_add(1, std::memory_order_relaxed);
  if (stopped_) {
    lock.unlock();
    r->ec = aborted;
    r->state.store(request_state::cancelled);
    finish(r);
    return false;
  }
  if (r->kind == request_kind::reg_shared) {
    shared_queue_.push_back(r);
    return !std::exchange(kick_pending_, true);
  }
  r->queue_pos = queue_.insert(queue_.end(), r);
  r->queued = true;
  lock.unlock();
  boost::asio::post(pool_, [this] { run_next(); });
  return false;
}

void registration_core::run_next() noexcept {
  std::shared_ptr<request> r;
  {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) return; // its request was cancelled: another turn took the next one already
    r = std::move(queue_.front());
    queue_.pop_front();
    r->queued = false;
  }
  run(r);
}

void registration_core::kick() {
  std::unique_lock lock(mutex_);
  kick_pending_ = false;
  if (shared_queue_.empty() || stopped_) return;
  lock.unlock();
  boost::asio::post(pool_, [this] { run_shared_batch(); });
}

void registration_core::cancel(const std::shared_ptr<request>& r) noexcept {
  auto expected = request_state::posted;
  if (r->state.compare_exchange_strong(expected, request_state::cancelled)) {
    acct_->cancels_queued.fetch_add(1, std::memory_order_relaxed);
    r->ec = aborted;
    finish(r);
    return;
  }
  // Only a registration can be thrown away once it runs: deregistering undoes it.
  if (expected == request_state::running && (r->kind == request_kind::reg || r->kind == request_kind::reg_shared) &&
      r->state.compare_exchange_strong(expected, request_state::cancel_requested)) {
    acct_->cancels_running.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  acct_->cancels_late.fetch_add(1, std::memory_order_relaxed);
}

void registration_core::shutdown() noexcept {
  std::vector<std::shared_ptr<request>> abort_now;
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    shared_queue_.clear();
    for (const auto& r : in_flight_) {
      auto expected = request_state::posted;
      if (r->state.compare_exchange_strong(expected, request_state::cancelled))
        abort_now.push_back(r);
      else if (expected == request_state::running &&
               (r->kind == request_kind::reg || r->kind == request_kind::reg_shared))
        r->state.compare_exchange_strong(expected, request_state::cancel_requested);
    }
  }
  for (const auto& r : abort_now) {
    r->ec = aborted;
    finish(r);
  }
  pool_.join();
}

void registration_core::finish(const std::shared_ptr<request>& r) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (r->listed) in_flight_.erase(r->in_flight_pos);
    r->listed = false;
    // A request cancelled while queued leaves the queues now, not when a worker gets to it.
    if (r->queued) queue_.erase(r->queue_pos);
    r->queued = false;
    if (r->kind == request_kind::reg_shared) std::erase(shared_queue_, r);
  }
  acct_->in_flight.fetch_sub(1, std::memory_order_relaxed);
  switch (r->state.load()) {
  case request_state::completed: acct_->completed.fetch_add(1, std::memory_order_relaxed); break;
  case request_state::failed: acct_->failed.fetch_add(1, std::memory_order_relaxed); break;
  default: acct_->cancelled.fetch_add(1, std::memory_order_relaxed); break;
  }
  r->complete(r);
}

void registration_core::settle(const std::shared_ptr<request>& r) noexcept {
  auto expected = request_state::running;
  const auto outcome = r->ec ? request_state::failed : request_state::completed;
  if (!r->state.compare_exchange_strong(expected, outcome)) {
    // Cancelled while the verb ran: throw the result away.
    if (r->kind == request_kind::reg && r->mr && !acct_->dereg(r->mr)) r->mr = nullptr;
    r->shared.reset();
    r->ec = aborted;
    r->state.store(request_state::cancelled);
  }
  finish(r);
}

ibv_mr* registration_core::register_with_retry(request& r, ibv_pd* pd, std::span<std::byte> buffer, access rights,
                                               error_code& ec) noexcept {
  auto backoff = first_backoff_;
  for (unsigned attempt = 1;; ++attempt) {
    if (ibv_mr* mr = acct_->reg(pd, buffer, rights, ec)) return mr;
    if (!transient(ec) || attempt >= attempts_ || r.state.load() == request_state::cancel_requested) break;
    acct_->retries.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * multiplier_, max_backoff_);
  }
  ec = classify_registration_error(ec, buffer, rights);
  return nullptr;
}

void registration_core::do_rereg(request& r) noexcept {
  // The device refuses to change a region with bound windows (rxe: EINVAL): say so before any verb runs.
  if (detail::windows_bound_to(r.mr) > 0) {
    r.ec = errc::region_has_bound_windows;
    return;
  }
  bool still_valid = true;
  r.ec = acct_->verbs->rereg_mr(r.mr, r.rereg_flags, r.pd, r.buffer, r.rights, still_valid);
  if (!r.ec) {
    r.mr_rights = r.rights;
    r.method = rereg_method::in_place;
    acct_->rereg_in_place.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (r.ec != boost::system::errc::operation_not_supported) {
    if (!still_valid && !acct_->dereg(r.mr)) r.mr = nullptr; // the verb says the region must not be used
    return;
  }
  // The provider cannot rereg: register the new region first, so a failure leaves the old one intact.
  error_code ec;
  ibv_mr* fresh = register_with_retry(r, r.pd, r.buffer, r.rights, ec);
  if (!fresh) {
    r.ec = ec;
    return;
  }
  if (const error_code old = acct_->dereg(r.mr)) { // the verb refused: keep the old region, drop the new
    acct_->dereg(fresh);
    r.ec = old;
    return;
  }
  r.mr = fresh;
  r.mr_rights = r.rights;
  r.method = rereg_method::reregistered;
  r.ec = {};
  acct_->rereg_fallbacks.fetch_add(1, std::memory_order_relaxed);
}

void registration_core::enter_worker() const noexcept {
  thread_local bool done = false;
  if (done || scheduling_policy_ < 0) return;
  done = true;
  sched_param param{};
  ::sched_setscheduler(0, scheduling_policy_, &param); // best effort: the calling thread only
}

void registration_core::run(const std::shared_ptr<request>& r) noexcept {
  enter_worker();
  auto expected = request_state::posted;
  if (!r->state.compare_exchange_strong(expected, request_state::running)) return; // cancelled before it ran
  switch (r->kind) {
  case request_kind::reg:
    r->mr = register_with_retry(*r, r->pd, r->buffer, r->rights, r->ec);
    r->mr_rights = r->rights;
    break;
  case request_kind::dereg:
    r->ec = acct_->dereg(r->mr);
    if (!r->ec) r->mr = nullptr;
    break;
  case request_kind::rereg: do_rereg(*r); break;
  case request_kind::reg_shared: break; // run_shared_batch's
  }
  settle(r);
}

namespace {
bool mergeable(const request& a, const request& b) noexcept { return a.pd == b.pd && a.rights == b.rights; }
} // namespace

void registration_core::run_shared_batch() noexcept {
  enter_worker();
  std::vector<std::shared_ptr<request>> group;
  std::byte* begin = nullptr;
  std::byte* end = nullptr;
  bool more = false;
  {
    std::lock_guard lock(mutex_);
    std::erase_if(shared_queue_, [](const auto& r) { return r->state.load() != request_state::posted; });
    if (shared_queue_.empty()) return;
    // The first queued request and, transitively, every queued one overlapping or touching the union.
    std::vector<bool> taken(shared_queue_.size(), false);
    taken[0] = true;
    group.push_back(shared_queue_[0]);
    begin = shared_queue_[0]->buffer.data();
    end = begin + shared_queue_[0]->buffer.size();
    for (bool grew = true; grew;) {
      grew = false;
      for (std::size_t i = 1; i < shared_queue_.size(); ++i) {
        const auto& r = shared_queue_[i];
        std::byte* b = r->buffer.data();
        std::byte* e = b + r->buffer.size();
        if (taken[i] || !mergeable(*group[0], *r) || b > end || e < begin) continue;
        taken[i] = grew = true;
        group.push_back(r);
        begin = std::min(begin, b);
        end = std::max(end, e);
      }
    }
    std::size_t i = 0;
    std::erase_if(shared_queue_, [&](const auto&) { return taken[i++]; });
    more = !shared_queue_.empty();
  }
  if (more) boost::asio::post(pool_, [this] { run_shared_batch(); });
  std::erase_if(group, [](const auto& r) {
    auto expected = request_state::posted;
    return !r->state.compare_exchange_strong(expected, request_state::running);
  });
  if (group.empty()) return;
  const auto pd = group[0]->pd;
  const auto rights = group[0]->rights;
  error_code ec;
  ibv_mr* mr = register_with_retry(*group[0], pd, {begin, static_cast<std::size_t>(end - begin)}, rights, ec);
  if (!mr && group.size() > 1) {
    // One bad range (pages not mapped, or read-only while the rights ask for write access: EFAULT) fails the
    // whole union. Register each request on its own instead, so only the bad ones fail, and each good one
    // gets a registration of exactly what it asked for (so a cache entry covers no more than that).
    acct_->merges_split.fetch_add(1, std::memory_order_relaxed);
    for (const auto& r : group) {
      if (r->state.load() != request_state::cancel_requested) {
        ibv_mr* own = register_with_retry(*r, pd, r->buffer, rights, r->ec);
        if (own) r->shared = std::make_shared<shared_mr>(acct_, own, rights);
      }
      settle(r); // at once: a good request does not wait for the others' verbs
    }
    return;
  }
  auto shared = mr ? std::make_shared<shared_mr>(acct_, mr, rights) : nullptr;
  acct_->merged.fetch_add(group.size() - 1, std::memory_order_relaxed);
  for (const auto& r : group) {
    r->ec = ec;
    r->shared = shared;
  }
  shared.reset(); // the requests hold it now: the last one to let go deregisters, not this worker later
  for (const auto& r : group)
    settle(r);
}

registration_stats registration_core::stats() const noexcept {
  const auto& a = *acct_;
  const auto get = [](const auto& v) { return v.load(std::memory_order_relaxed); };
  registration_stats s;
  // The regions that went (deregistered, handed over: counted with release stores) before those that came
  // (registered, taken back), each with acquire: every region gone that this read sees has its coming in
  // what it reads next, so held() is never negative (read the other way round, a registration and its
  // deregistration between the two loads read as -1).
  s.deregistered = a.deregistered.load(std::memory_order_acquire);
  s.handed_over = a.handed_over.load(std::memory_order_acquire);
  if (pause_in_stats) [[unlikely]] pause_in_stats();
  s.registered = get(a.registered);
  s.taken_back = get(a.taken_back);
  s.bytes_held = get(a.bytes_held);
  s.shared_live = get(a.shared_live);
  s.completed = get(a.completed);
  s.failed = get(a.failed);
  s.cancelled = get(a.cancelled);
  s.retries = get(a.retries);
  s.merged = get(a.merged);
  s.merges_split = get(a.merges_split);
  s.rereg_in_place = get(a.rereg_in_place);
  s.rereg_fallbacks = get(a.rereg_fallbacks);
  s.in_flight = get(a.in_flight);
  s.cancels_queued = get(a.cancels_queued);
  s.cancels_running = get(a.cancels_running);
  s.cancels_late = get(a.cancels_late);
  return s;
}

} // namespace detail
} // namespace coverbs
