#include <coverbs/loop_pool.hpp>
#include <coverbs/outstanding_work.hpp>

#include "runtime/pool_lease.hpp"

#include <pthread.h>

#include <algorithm>
#include <future>
#include <limits>

namespace coverbs {

loop_pool::member::member(std::size_t index, device* dev, protection_domain* shared_pd,
                          const loop_pool_options& options)
    : index_(index), io_(std::make_unique<loop_context>()) {
  work_.emplace(io_->get_executor());
  if (!dev) return;
  if (shared_pd) {
    pd_ = shared_pd;
  } else {
    own_pd_.emplace(*dev);
    pd_ = &*own_pd_;
  }
  cq_.emplace(io_->get_executor(), *dev, options.cq);
}

loop_pool::member::~member() = default;

std::shared_ptr<void> loop_pool::member::lease() {
  return detail::make_pool_lease(load_, pool_, pd_, cq_ ? &*cq_ : nullptr);
}

namespace {
unsigned loop_count(const loop_pool_options& options) {
  if (options.loops) return options.loops;
  return std::max(1u, std::thread::hardware_concurrency());
}
}  // namespace

loop_pool::loop_pool(const loop_pool_options& options) {
  const unsigned n = loop_count(options);
  members_.reserve(n);
  for (unsigned i = 0; i < n; ++i) members_.emplace_back(new member(i, nullptr, nullptr, options));
  for (auto& m : members_) m->pool_ = this;
}

loop_pool::loop_pool(device& dev, const loop_pool_options& options) {
  const unsigned n = loop_count(options);
  if (!options.pd_per_loop) shared_pd_.emplace(dev);
  members_.reserve(n);
  for (unsigned i = 0; i < n; ++i)
    members_.emplace_back(new member(i, &dev, shared_pd_ ? &*shared_pd_ : nullptr, options));
  for (auto& m : members_) m->pool_ = this;
}

loop_pool::~loop_pool() {
  stop();
  join();
  // Handlers still queued (coroutines waiting on a queue pair, connections held in them) go first, while
  // every completion queue and domain they may use still exists; then the queues, the domains, and the
  // io_contexts last (a completion queue's descriptor belongs to its io_context).
  for (auto& m : members_) {
    m->work_.reset();
    m->io_->destroy_handlers();
  }
  for (auto& m : members_) m->states_.clear();  // they may hold queue pairs on the member's queue
  for (auto& m : members_) m->cq_.reset();
  for (auto& m : members_) m->own_pd_.reset();
  shared_pd_.reset();
  members_.clear();
}

loop_pool::member& loop_pool::next() noexcept {
  return *members_[next_.fetch_add(1, std::memory_order_relaxed) % members_.size()];
}

loop_pool::member& loop_pool::least_loaded() noexcept {
  const std::size_t n = members_.size();
  const std::size_t start = next_.fetch_add(1, std::memory_order_relaxed) % n;
  member* best = members_[start].get();
  std::size_t best_load = best->load();
  for (std::size_t k = 1; k < n && best_load > 0; ++k) {
    member* m = members_[(start + k) % n].get();
    if (const std::size_t l = m->load(); l < best_load) {
      best = m;
      best_load = l;
    }
  }
  return *best;
}

protection_domain& loop_pool::pd() {
  if (shared_pd_) return *shared_pd_;
  if (!members_.empty() && members_.front()->has_device())
    throw std::logic_error("loop_pool::pd(): this pool has one protection domain per member (pd_per_loop); use "
                           "member::pd(), or make the pool without pd_per_loop to share one");
  throw std::logic_error("loop_pool::pd(): this pool has no device, hence no protection domain; make it with "
                         "loop_pool(device&, options)");
}

loop_pool::member* loop_pool::current() noexcept {
  const auto self = std::this_thread::get_id();
  for (auto& m : members_)
    if (m->thread_id() == self) return m.get();
  return nullptr;
}

void loop_pool::run() {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto& m = members_[i];
    if (m->thread_.joinable()) continue;
    m->io_->restart();
    m->running_.store(true, std::memory_order_release);
    m->thread_ = std::thread([mp = m.get(), i] {
      // "coverbs-loop-N" (N: the member's index) in top -H, gdb and metrics::snapshot::threads; "cvb-loop-N"
      // from member 100 on (a thread's name holds 15 characters).
      const std::string name = (i < 100 ? "coverbs-loop-" : "cvb-loop-") + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      mp->thread_id_.store(std::this_thread::get_id(), std::memory_order_release);
      mp->io_->run();
      mp->running_.store(false, std::memory_order_release);
    });
    // Known to the caller as soon as run() returns, not only once the thread got going.
    m->thread_id_.store(m->thread_.get_id(), std::memory_order_release);
  }
}

void loop_pool::stop() noexcept {
  for (auto& m : members_) m->io_->stop();
}

void loop_pool::join() noexcept {
  for (auto& m : members_) {
    if (!m->thread_.joinable()) continue;
    m->thread_.join();
    m->thread_id_.store(std::thread::id{}, std::memory_order_release);
  }
}

std::string loop_pool::describe_outstanding_work(std::chrono::milliseconds patience) {
  for (auto& m : members_)
    if (m->thread_id() == std::this_thread::get_id())
      throw std::logic_error("loop_pool::describe_outstanding_work called on member " + std::to_string(m->index_) +
                             "'s own thread: it would wait for itself; call coverbs::describe_outstanding_work("
                             "member.context()) there");
  std::string out;
  for (auto& m : members_) {
    out += "member " + std::to_string(m->index_) + ":\n";
    std::string text;
    if (!m->running_.load(std::memory_order_acquire)) {
      text = coverbs::describe_outstanding_work(*m->io_);  // its io_context::run() returned: nothing else reads it
    } else {
      // Shared with the posted function: it may answer after this call gave up waiting.
      auto answer = std::make_shared<std::promise<std::string>>();
      std::future<std::string> f = answer->get_future();
      boost::asio::post(*m->io_, [answer, io = m->io_.get()] { answer->set_value(coverbs::describe_outstanding_work(*io)); });
      if (f.wait_for(patience) == std::future_status::ready)
        text = f.get() + "the pool's work guard keeps its io_context::run() from returning until loop_pool::stop()\n";
      else
        text = "did not answer within " + std::to_string(patience.count()) +
               " ms: its thread is busy in a handler (or the loop stopped); a handler that never returns keeps "
               "everything queued on this member waiting\n";
    }
    for (std::size_t at = 0; at < text.size();) {  // indented under the heading
      const std::size_t end = std::min(text.find('\n', at), text.size());
      out += "  " + text.substr(at, end - at) + "\n";
      at = end + 1;
    }
  }
  return out;
}

}  // namespace coverbs
