// async_serve: the accept loop (on the listener's executor, or a loop pool's members) and one coroutine per
// session, which ends it, closes it in order and reports why.
#include <coverbs/session_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {

asio::awaitable<void> run_session(connection c, session_handler handler,
                                  std::function<void(const session_report&)> on_end) {
  session_report r;
  r.peer = c.remote_endpoint();
  session s;
  error_code thrown;
  try {
    s = session(std::move(c));
    co_await handler(s);
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
  if (!r.reason) r.reason = thrown;
  if (s) {
    auto [ec] = co_await s.async_close(asio::as_tuple(asio::use_awaitable));
    r.close_error = ec;
  }
  if (on_end) on_end(r);
}

}  // namespace

asio::awaitable<error_code> serve_loop(listener& l, session_handler handler, server_options options) {
  if (!handler) co_return make_error_code(std::errc::invalid_argument);  // every session would throw
  // Accepts that keep failing (e.g. the completion queue overcommitted) are retried after a pause that doubles
  // up to a second, so the loop never spins; a session accepted resets it.
  std::chrono::milliseconds pause{0};
  asio::steady_timer backoff(l.get_executor());
  for (;;) {
    if (pause.count() > 0) {
      backoff.expires_after(pause);
      auto [waited] = co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
      if (waited == asio::error::operation_aborted) co_return waited;
    }
    loop_pool::member* m = options.pool ? &options.pool->least_loaded() : nullptr;
    connection_options co = session_connection_options(options.session.connection, options.session.messages);
    if (m) co = m->connection_options(std::move(co));
    const listener::executor_type ex = m ? m->get_executor() : l.get_executor();
    auto [ec, c] = co_await l.async_accept(ex, co, asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) co_return ec;
    if (ec) {
      if (options.on_end) options.on_end(session_report{ec, "accept: " + ec.message(), {}, {}, {}});
      pause = std::clamp(2 * pause, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
      continue;
    }
    pause = std::chrono::milliseconds(0);
    const connection::executor_type where = c.get_executor();  // before c moves into the coroutine
    asio::co_spawn(where, run_session(std::move(c), handler, options.on_end), asio::detached);
  }
}

}  // namespace coverbs::detail
