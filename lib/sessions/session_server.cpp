// async_serve: the accept loop (on the listener's executor, or a loop pool's members) and one coroutine per
// session, which ends it, closes it in order and reports why.
#include <coverbs/session_server.hpp>

#include "cm/completion.hpp"
#include "core/io_owner.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {

/// The sessions running (server_options::max_sessions), counted on the listener's executor, and the timer the
/// accept loop waits on at the cap: a session's end cancels it. A session gives its place back from its own
/// executor (`session_place`), possibly while the listener's io_context is being destroyed, or after: enrolled
/// with that context, it learns of its shutdown (`context_gone()`, under `mutex`) and drops the timer then,
/// while the timer's service exists.
struct session_count final : io_owner {
  explicit session_count(const listener::executor_type& ex) : ex(ex), wake(std::in_place, ex) {
    enroll(asio::query(ex, asio::execution::context));
  }
  ~session_count() { withdraw(); }  // first: no shutdown hook may run on a half-destroyed count
  void on_context_shutdown() noexcept override {
    std::lock_guard lock(mutex);
    wake.reset();
  }

  const listener::executor_type ex;
  std::mutex mutex;  // a place given back checks the context and posts under it: the context waits for that
  std::size_t running = 0;
  std::optional<asio::steady_timer> wake;  // listener's executor only; reset when its context shuts down
};

/// One session's place under `max_sessions`, given back once: when the session's coroutine ends, or when its
/// frame is destroyed without ending (its io_context — e.g. a loop-pool member's — destroyed while it was
/// suspended). Giving back posts to the listener's executor unless that context has shut down already (then no
/// accept loop waits, and nothing may touch the context).
class session_place {
public:
  session_place() noexcept = default;
  explicit session_place(std::shared_ptr<session_count> count) noexcept : count_(std::move(count)) {}
  session_place(session_place&& o) noexcept : count_(std::move(o.count_)) {}
  session_place& operator=(session_place&&) = delete;
  ~session_place() { give_back(); }

  void give_back() noexcept {
    const std::shared_ptr<session_count> count = std::move(count_);
    if (!count) return;
    std::lock_guard lock(count->mutex);
    if (count->context_gone()) return;
    try {
      asio::post(count->ex, [count] {
        --count->running;
        if (count->wake) count->wake->cancel();
      });
    } catch (...) {
      // No memory for the handler: the place stays taken (the accept loop waits at the cap for another).
    }
  }

private:
  std::shared_ptr<session_count> count_;
};

/// What the `prepare` of an accept's handshake threw (made on the accept's peer executor, read on the listener's
/// once the accept failed): `current_error()`'s code, which the accept fails with, and the exception's what().
struct prepare_failure {
  std::mutex mutex;
  error_code code;
  std::string what;

  void note(error_code ec, std::string text) {
    std::lock_guard lock(mutex);
    code = ec;
    what = std::move(text);
  }
  /// The text of a failure with code `ec` (empty if the last one noted had another code); forgets it.
  std::string take(error_code ec) {
    std::lock_guard lock(mutex);
    std::string text = code == ec ? std::move(what) : std::string();
    code = {};
    what.clear();
    return text;
  }
};

/// Notes `what` for the failing handshake; out of memory, nothing (the exception being handled goes on as it was).
void note_quietly(prepare_failure& failure, const char* what) noexcept {
  try {
    failure.note(current_error(), what);
  } catch (...) {
  }
}

/// `co` with its `prepare` noting what it throws in `failure` before the exception fails the handshake (which
/// reports only its error code to the accept).
connection_options noting_failures(connection_options co, const std::shared_ptr<prepare_failure>& failure) {
  co.prepare = [inner = std::move(co.prepare), failure](queue_pair& qp, protection_domain& pd) {
    try {
      return inner(qp, pd);
    } catch (const std::exception& e) {
      note_quietly(*failure, e.what());
      throw;
    } catch (...) {
      note_quietly(*failure, "an exception that is not a std::exception");
      throw;
    }
  };
  return co;
}

/// Completes once the session has been quiet — no message or credit update received or sent — over four checks
/// a quarter of `idle` apart (so between 1 and 1.25 times `idle` after the last one).
asio::awaitable<void> idle_watch(session& s, std::chrono::milliseconds idle) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  const auto traffic = [&s] {
    const message_statistics st = s.endpoint().statistics();
    return st.messages_received + st.credit_updates_received + st.messages_sent + st.credit_updates_sent;
  };
  std::uint64_t last = traffic();
  for (int quiet = 0; quiet < 4;) {
    t.expires_after(std::max(idle / 4, std::chrono::milliseconds(1)));
    co_await t.async_wait(asio::use_awaitable);
    const std::uint64_t now = traffic();
    quiet = now == last ? quiet + 1 : 0;
    last = now;
  }
}

/// The session's coroutine, its exception returned as a value: awaitable operators' `||` waits for the first
/// branch that *succeeds*, so a handler that ended by throwing would not stop the idle watch.
asio::awaitable<std::exception_ptr> guarded(const session_handler& handler, session& s) {
  try {
    co_await handler(s);
  } catch (...) {
    co_return std::current_exception();
  }
  co_return nullptr;
}

asio::awaitable<void> run_session(connection c, session_handler handler, server_options options, session_place place) {
  using namespace asio::experimental::awaitable_operators;
  session_report r;
  r.peer = c.remote_endpoint();
  session s;
  error_code thrown;
  bool idle = false;
  try {
    s = session(std::move(c));
    if (options.idle_timeout.count() > 0) {
      // Named first, then awaited: GCC 12 mishandles temporaries that live across a co_await.
      auto race = guarded(handler, s) || idle_watch(s, options.idle_timeout);
      auto winner = co_await std::move(race);
      idle = winner.index() == 1;  // the handler's pending operation was cancelled
      if (!idle)
        if (std::exception_ptr e = std::get<0>(winner)) std::rethrow_exception(e);
    } else {
      co_await handler(s);
    }
  } catch (const std::exception& e) {
    thrown = code_of(std::current_exception());
    r.diagnostic = e.what();
  } catch (...) {
    thrown = make_error_code(errc::session_handler_threw);
  }
  if (s) {
    // What failed the session comes before what the coroutine made of it (e.g. its operation's error).
    if (const error_code ec = s.error()) {
      r.reason = ec;
      if (s.endpoint().error() == ec) r.diagnostic = s.diagnostic();
    }
    r.statistics = s.endpoint().statistics();
  }
  if (!r.reason && idle) r.reason = make_error_code(errc::session_idle);
  if (!r.reason) r.reason = thrown;
  if (s) {
    auto [ec] = co_await s.async_close(asio::as_tuple(asio::use_awaitable));
    r.close_error = ec;
  }
  place.give_back();
  if (options.on_end) options.on_end(r);
}

}  // namespace

asio::awaitable<error_code> serve_loop(listener& l, session_handler handler, server_options options) {
  if (!handler) co_return make_error_code(std::errc::invalid_argument);  // every session would throw
  // Accepts that keep failing (e.g. the completion queue overcommitted) are retried after a pause that doubles
  // up to a second, so the loop never spins; a session accepted resets it.
  std::chrono::milliseconds pause{0};
  asio::steady_timer backoff(l.get_executor());
  const auto count = options.max_sessions ? std::make_shared<session_count>(l.get_executor()) : nullptr;
  // The timer goes with the loop, on the listener's executor: a place given back later drops the last
  // reference to the count on its session's thread, where the timer must not be destroyed.
  const std::unique_ptr<session_count, void (*)(session_count*)> quiet_when_done(
      count.get(), [](session_count* c) { c->wake.reset(); });
  for (;;) {
    if (pause.count() > 0) {
      backoff.expires_after(pause);
      auto [waited] = co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
      if (waited == asio::error::operation_aborted) co_return waited;
    }
    // At the cap: no accept (requests wait in the listener's backlog) until a session ends.
    while (count && count->running >= options.max_sessions) {
      count->wake->expires_at(asio::steady_timer::time_point::max());
      co_await count->wake->async_wait(asio::as_tuple(asio::use_awaitable));
      const asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
      if (state.cancelled() != asio::cancellation_type::none) co_return make_error_code(asio::error::operation_aborted);
    }
    loop_pool::member* m = options.pool ? &options.pool->least_loaded() : nullptr;
    // One record per accept: a handshake carried over from an earlier accept notes into that one's, never this.
    const auto failure = std::make_shared<prepare_failure>();
    connection_options co =
        noting_failures(session_connection_options(options.session.connection, options.session.messages), failure);
    if (m) co = m->connection_options(std::move(co));
    const listener::executor_type ex = m ? m->get_executor() : l.get_executor();
    auto [ec, c] = co_await l.async_accept(ex, co, asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) co_return ec;
    if (ec) {
      // A throwing prepare (e.g. the endpoint's constructor) fails the accept with its code only: its text here.
      const std::string why = failure->take(ec);
      if (options.on_end)
        options.on_end(
            session_report{ec, "accept: " + (why.empty() ? ec.message() : "prepare threw: " + why), {}, {}, {}});
      pause = std::clamp(2 * pause, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
      continue;
    }
    pause = std::chrono::milliseconds(0);
    const connection::executor_type where = c.get_executor();  // before c moves into the coroutine
    if (count) ++count->running;
    asio::co_spawn(where, run_session(std::move(c), handler, options, session_place(count)), asio::detached);
  }
}

}  // namespace coverbs::detail
