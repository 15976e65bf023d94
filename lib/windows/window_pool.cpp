#include <coverbs/protection_domain.hpp>
#include <coverbs/window_operations.hpp>
#include <coverbs/window_pool.hpp>

#include "dataplane/qp_impl.hpp"
#include "windows/window_counters.hpp"
#include "windows/window_internal.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <list>

namespace coverbs {
namespace detail {

struct pool_impl {
  protection_domain* pd;
  window_pool_options options;
  std::vector<memory_window> free_list;
  std::size_t total = 0;

  memory_window acquire(error_code& ec) {
    ec = {};
    if (!free_list.empty()) {
      memory_window w = std::move(free_list.back());
      free_list.pop_back();
      return w;
    }
    if (total >= options.max_windows) {
      ec = errc::window_pool_exhausted;
      return {};
    }
    memory_window w(*pd, options.type, ec);
    if (!ec) ++total;
    return w;
  }

  void release(memory_window&& w) noexcept {
    if (w && w.state() == window_state::unbound) {
      free_list.push_back(std::move(w));
      return;
    }
    --total;  // empty (a failed replacement) or still bound/busy: dropping it deallocates it, killing its key
    memory_window dropped = std::move(w);
  }
};

struct lease_waiter {
  revoke_handler handler;
  bool hold = false;
  bool cancelled = false;
};

struct lease_state : std::enable_shared_from_this<lease_state> {
  enum class phase { active, revoking, dead };
  lease_state(std::shared_ptr<pool_impl> p, queue_pair& q, memory_window w)
      : pool(std::move(p)), qp(&q), qp_life(impl_access::get(q)->life_), ex(q.get_executor()), window(std::move(w)),
        timer(ex) {}

  std::shared_ptr<pool_impl> pool;
  queue_pair* qp;                   // used only while qp_life holds: the revocation posts on it
  std::weak_ptr<const bool> qp_life;  // expired once the queue pair is destroyed
  queue_pair::executor_type ex;     // where handlers run (the queue pair's), valid after it is gone
  memory_window window;
  remote_key key;
  boost::asio::steady_timer timer;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  phase state = phase::active;
  error_code cause;  // what ended the lease (for async_hold)
  std::list<lease_waiter> waiters;
};

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

/// Runs `handler(args...)` on its associated executor (by way of `io`), never inline.
template <class Handler, class... Args>
void post_completion(Handler handler, const queue_pair::executor_type& io, Args&&... args) {
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  if (slot.is_connected()) slot.clear();
  boost::asio::post(io, boost::asio::append(std::move(handler), std::forward<Args>(args)...));
}

/// The key is dead: the window goes back to the pool and every waiter completes.
void end_lease(const std::shared_ptr<lease_state>& s) {
  s->state = lease_state::phase::dead;
  s->timer.cancel();
  if (window_impl* w = impl_of(s->window)) {
    w->on_remote_invalidation = nullptr;
    w->hook_context = nullptr;
  }
  s->pool->release(std::move(s->window));
  std::list<lease_waiter> waiters = std::move(s->waiters);
  for (lease_waiter& w : waiters) {
    const error_code ec = !w.hold ? error_code{} : w.cancelled ? boost::asio::error::operation_aborted : s->cause;
    post_completion(std::move(w.handler), s->ex, ec);
  }
}

void start_revoke(const std::shared_ptr<lease_state>& s, error_code cause) {
  if (s->state != lease_state::phase::active) return;
  s->state = lease_state::phase::revoking;
  count_lease_ended();
  s->cause = cause;
  s->timer.cancel();
  if (s->qp_life.expired()) {
    // Its queue pair is gone (a type-1 window: a type-2 one's lease ended with it): nothing to post the
    // invalidation on, so the window is deallocated, which kills the key all the same.
    s->window = memory_window();
    return end_lease(s);
  }
  invalidate(*s->qp, s->window, [s](error_code) { end_lease(s); });  // the key is dead even on error
}

/// The key died by another's hand: the peer's send-with-invalidate (`cause` empty), or the reset or destruction
/// of its queue pair (operation_aborted).
void on_peer_invalidation(void* context, error_code cause) {
  auto s = static_cast<lease_state*>(context)->shared_from_this();
  if (s->state != lease_state::phase::active) return;
  s->cause = cause;
  count_lease_ended();
  end_lease(s);
}

struct hold_cancellation {
  std::weak_ptr<lease_state> state;
  lease_waiter* waiter;
  void operator()(boost::asio::cancellation_type) const {
    auto s = state.lock();
    if (!s) return;
    waiter->cancelled = true;
    if (s->state == lease_state::phase::active) count(window_counter::leases_revoked);
    start_revoke(s, boost::asio::error::operation_aborted);
  }
};

void arm_ttl(const std::shared_ptr<lease_state>& s, std::chrono::steady_clock::duration ttl) {
  if (ttl <= std::chrono::steady_clock::duration::zero()) return;
  s->deadline = std::chrono::steady_clock::now() + ttl;
  s->timer.expires_at(*s->deadline);
  s->timer.async_wait([weak = std::weak_ptr<lease_state>(s)](error_code ec) {
    auto s = weak.lock();
    if (ec || !s || s->state != lease_state::phase::active) return;
    count(window_counter::leases_expired);
    start_revoke(s, errc::lease_expired);
  });
}

}  // namespace

void start_lease(const std::shared_ptr<pool_impl>& pool, queue_pair& qp, const memory_region& region,
                 window_range range, access rights, std::chrono::steady_clock::duration ttl, lease_handler handler) {
  error_code ec;
  memory_window w = pool->acquire(ec);
  if (ec) return post_completion(std::move(handler), qp.get_executor(), ec, window_lease(qp.get_executor()));
  auto s = std::make_shared<lease_state>(pool, qp, std::move(w));
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  bind_mw(qp, s->window, region, range, rights,
          boost::asio::bind_cancellation_slot(
              slot, [s, ttl, h = std::move(handler)](error_code ec, remote_key key) mutable {
                // Bound, then its queue pair was reset or destroyed before this ran: the key is dead already.
                if (!ec && s->window.state() != window_state::bound) ec = boost::asio::error::operation_aborted;
                if (ec) {
                  s->state = lease_state::phase::dead;
                  s->pool->release(std::move(s->window));
                  return post_completion(std::move(h), s->ex, ec, window_lease(s->ex));
                }
                s->key = key;
                impl_of(s->window)->on_remote_invalidation = &on_peer_invalidation;
                impl_of(s->window)->hook_context = s.get();
                arm_ttl(s, ttl);
                count(window_counter::leases_granted);
                post_completion(std::move(h), s->ex, error_code{}, window_lease(s));
              }));
}

void add_waiter(const std::shared_ptr<lease_state>& s, const queue_pair::executor_type& ex, revoke_handler handler,
                bool hold) {
  if (!s) return post_completion(std::move(handler), ex, errno_code(EBADF));
  if (s->state == lease_state::phase::dead) {
    const error_code ec = hold ? s->cause : error_code{};
    return post_completion(std::move(handler), s->ex, ec);
  }
  s->waiters.push_back({std::move(handler), hold, false});
  lease_waiter& w = s->waiters.back();
  if (hold) {
    auto slot = boost::asio::get_associated_cancellation_slot(w.handler);
    if (slot.is_connected()) slot.template emplace<hold_cancellation>(hold_cancellation{s, &w});
  } else if (s->state == lease_state::phase::active) {
    count(window_counter::leases_revoked);
    start_revoke(s, boost::asio::error::operation_aborted);
  }
}

}  // namespace detail

// --- window_lease ---

window_lease::window_lease(std::shared_ptr<detail::lease_state> state) noexcept
    : ex_(state ? state->ex : executor_type()), state_(std::move(state)) {}

window_lease& window_lease::operator=(window_lease&& other) noexcept {
  if (this != &other) {
    revoke();
    ex_ = other.ex_;
    state_ = std::move(other.state_);
  }
  return *this;
}

void window_lease::throw_no_executor() {
  throw system_error(errno_code(EBADF),
                     "window_lease: a default-constructed lease has no executor to complete on, and the handler "
                     "has none of its own: bind it to one (asio::bind_executor(io, handler))");
}

window_lease::~window_lease() { revoke(); }

remote_key window_lease::key() const noexcept { return state_ ? state_->key : remote_key{}; }

bool window_lease::active() const noexcept { return state_ && state_->state == detail::lease_state::phase::active; }

std::optional<std::chrono::steady_clock::time_point> window_lease::expires_at() const noexcept {
  return state_ ? state_->deadline : std::nullopt;
}

void window_lease::revoke() noexcept {
  if (!active()) return;
  detail::count(detail::window_counter::leases_revoked);
  try {
    detail::start_revoke(state_, boost::asio::error::operation_aborted);
  } catch (...) {
    // Allocating the invalidation failed: deallocating the window kills the key all the same.
    state_->window = memory_window();
    detail::end_lease(state_);
  }
}

// --- window_pool ---

window_pool::window_pool(protection_domain& pd, const window_pool_options& options)
    : impl_(std::make_shared<detail::pool_impl>()) {
  impl_->pd = &pd;
  impl_->options = options;
  for (std::size_t i = 0; i < options.initial_windows && i < options.max_windows; ++i) {
    impl_->free_list.emplace_back(pd, options.type);
    ++impl_->total;
  }
}

window_pool::~window_pool() = default;

std::size_t window_pool::size() const noexcept { return impl_ ? impl_->total : 0; }
std::size_t window_pool::free() const noexcept { return impl_ ? impl_->free_list.size() : 0; }

memory_window window_pool::acquire(error_code& ec) { return impl_->acquire(ec); }
void window_pool::release(memory_window&& window) noexcept { impl_->release(std::move(window)); }

}  // namespace coverbs
