#pragma once
/// @file
/// `cancel_after(timeout, token)`: a completion token adapter that gives one asynchronous operation a deadline.
/// When `timeout` passes before the operation completes, the operation's cancellation slot is emitted (by
/// default `cancellation_type::terminal`); the operation then completes as its own documentation says for that
/// type (a message endpoint's call: `operation_aborted`, the call abandoned and the endpoint unharmed). What Asio
/// 1.86 calls `asio::cancel_after`, for the Boost 1.81 that coverbs builds with; any Asio operation takes it too.
///
/// @code
///   auto [ec, reply] = co_await endpoint.async_call(request, cancel_after(100ms, as_tuple(use_awaitable)));
///   if (ec == boost::asio::error::operation_aborted) { /* no reply within 100 ms */ }
/// @endcode
///
/// The deadline's timer runs on the operation's I/O executor when the operation names one (a queue pair's, a
/// completion queue's, a message endpoint's operations; Asio's I/O objects'), so the cancellation is emitted
/// where the operation runs, whatever executor the handler is bound to; the handler completes on its own
/// associated executor, as without a deadline. An operation that names none (coverbs' listener, connect,
/// disconnect, window pool and registration operations) runs it on the handler's associated executor: keep
/// that the operation's loop (a coroutine running there, or `bind_executor`); a callback with no executor of
/// its own is then refused at compile time. Put `cancel_after` outermost (`cancel_after(d, as_tuple(...))`):
/// an adapter around it (`as_tuple(cancel_after(...))`) hides the operation's executor from it. A
/// cancellation the handler's own slot receives (e.g. from `co_await (a || b)`) is passed on to the operation
/// as before. When the operation completes first, the timer is stopped (on its own executor) before the
/// handler runs: nothing of it keeps `run()` busy afterwards.

#include <coverbs/config.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/system_executor.hpp>

#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>

namespace coverbs {

/// The token `cancel_after` makes: `token`, with a deadline of `timeout` after the operation starts.
template <class Token>
struct cancel_after_t {
  std::chrono::steady_clock::duration timeout;
  boost::asio::cancellation_type type;
  Token token;
};

/// `token` with a deadline: `timeout` after the operation starts, its cancellation slot is emitted with
/// `cancellation_type::terminal` (unless it completed first).
template <class Token>
cancel_after_t<std::decay_t<Token>> cancel_after(std::chrono::steady_clock::duration timeout, Token&& token) {
  return {timeout, boost::asio::cancellation_type::terminal, std::forward<Token>(token)};
}
/// The same with the cancellation type to emit (`total`, `partial`: see what the operation supports).
template <class Token>
cancel_after_t<std::decay_t<Token>> cancel_after(std::chrono::steady_clock::duration timeout,
                                                 boost::asio::cancellation_type type, Token&& token) {
  return {timeout, type, std::forward<Token>(token)};
}

namespace detail {

/// The operation's side: the signal its slot is bound to (kept as long as the operation's handler), and the
/// timer's state while the timer runs.
struct deadline_signal;
/// The timer's side, kept only by its pending wait: an io_context destroyed first destroys it with that wait.
struct deadline_timer {
  template <class Executor>
  explicit deadline_timer(const Executor& ex) : timer(ex) {}
  boost::asio::steady_timer timer;
};
struct deadline_signal {
  boost::asio::cancellation_signal signal;
  std::weak_ptr<deadline_timer> timer;
  /// The operation completed (or its handler is destroyed unrun): stops the timer, on the timer's executor (at
  /// once when that is this thread's). The posted stop holds the timer weakly: a context destroyed meanwhile
  /// destroys it with the timer's wait, never after.
  void stop() noexcept {
    if (auto t = timer.lock()) {
      try {
        boost::asio::dispatch(t->timer.get_executor(), [weak = std::weak_ptr<deadline_timer>(t)] {
          if (auto t = weak.lock()) t->timer.cancel();
        });
      } catch (...) {
        // no memory to post the stop: the timer fires later and finds the signal gone
      }
    }
    timer.reset();
  }
  ~deadline_signal() { stop(); }
};

/// The operation's handler, wrapped: stops the deadline before the handler runs. Its executor, allocator and
/// the rest are the wrapped handler's (the associator below); its cancellation slot is the deadline's signal
/// (the cancellation_slot_binder around it).
template <class Handler>
struct deadline_handler {
  Handler handler;
  std::shared_ptr<deadline_signal> deadline;
  template <class... Args>
  void operator()(Args&&... args) {
    deadline->stop();
    std::move(handler)(std::forward<Args>(args)...);
  }
};

/// An initiation's I/O executor type, when it names one (`executor_type`, as Asio's and coverbs' do).
template <class Initiation, class = void>
struct initiation_executor {};
template <class Initiation>
struct initiation_executor<Initiation, std::void_t<typename Initiation::executor_type>> {
  using executor_type = typename Initiation::executor_type;
};

template <class Initiation>
struct deadline_initiation : initiation_executor<Initiation> {
  Initiation initiation;
  std::chrono::steady_clock::duration timeout;
  boost::asio::cancellation_type type;

  deadline_initiation(Initiation i, std::chrono::steady_clock::duration t, boost::asio::cancellation_type c)
      : initiation(std::move(i)), timeout(t), type(c) {}

  /// The wrapped initiation's I/O executor (what `use_promise` and the like ask of an initiation).
  auto get_executor() const noexcept
    requires requires(const Initiation& i) { i.get_executor(); }
  {
    return initiation.get_executor();
  }

  /// Where the deadline's timer runs: the operation's I/O executor, else the handler's.
  template <class Handler>
  auto timer_executor(const Handler& handler) const {
    namespace asio = boost::asio;
    if constexpr (requires(const Initiation& i) { i.get_executor(); }) {
      return initiation.get_executor();
    } else {
      static_assert(!std::is_same_v<asio::associated_executor_t<Handler>, asio::system_executor>,
                    "coverbs::cancel_after: neither the operation nor the handler names an executor for the "
                    "deadline's timer to run on. Bind one to the handler (boost::asio::bind_executor(io, handler)) "
                    "or await the operation (use_awaitable, deferred in a coroutine).");
      return asio::get_associated_executor(handler);
    }
  }

  template <class Handler, class... Args>
  void operator()(Handler&& handler, Args&&... args) {
    namespace asio = boost::asio;
    auto deadline = std::make_shared<deadline_signal>();
    // A cancellation of the handler's own slot (e.g. co_await (a || b)) goes on to the operation.
    auto outer = asio::get_associated_cancellation_slot(handler);
    if (outer.is_connected())
      outer.assign([weak = std::weak_ptr<deadline_signal>(deadline)](asio::cancellation_type t) {
        if (auto d = weak.lock()) d->signal.emit(t);
      });
    auto timer = std::make_shared<deadline_timer>(timer_executor(handler));
    deadline->timer = timer;
    timer->timer.expires_after(timeout);
    timer->timer.async_wait([t = timer, weak = std::weak_ptr<deadline_signal>(deadline),
                             type = type](const boost::system::error_code& ec) {
      if (ec) return;  // stopped: the operation completed first
      if (auto d = weak.lock()) d->signal.emit(type);
    });
    auto slot = deadline->signal.slot();
    std::move(initiation)(
        asio::bind_cancellation_slot(slot, deadline_handler<std::decay_t<Handler>>{std::forward<Handler>(handler),
                                                                                    std::move(deadline)}),
        std::forward<Args>(args)...);
  }
};

}  // namespace detail
}  // namespace coverbs

namespace boost::asio {

template <class Token, class... Signatures>
struct async_result<coverbs::cancel_after_t<Token>, Signatures...> {
  // The return type spelled out: a token that does not fit the signatures (a callback of the wrong signature)
  // makes this fail in substitution, so completion_token_for stays false and coverbs' one static_assert names
  // the signature (coverbs/detail/token_check.hpp).
  // A const cancel_after_t's token is a const Token (as Asio 1.86's cancel_after treats it).
  template <class RawToken>
  using inner_token = std::conditional_t<std::is_const_v<std::remove_reference_t<RawToken>>, const Token, Token>;

  template <class Initiation, class RawToken, class... Args>
  static auto initiate(Initiation&& initiation, RawToken&& token, Args&&... args)
      -> decltype(async_initiate<inner_token<RawToken>, Signatures...>(
          std::declval<coverbs::detail::deadline_initiation<std::decay_t<Initiation>>>(), token.token,
          std::forward<Args>(args)...)) {
    return async_initiate<inner_token<RawToken>, Signatures...>(
        coverbs::detail::deadline_initiation<std::decay_t<Initiation>>(std::forward<Initiation>(initiation),
                                                                       token.timeout, token.type),
        token.token, std::forward<Args>(args)...);
  }
};

template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct associator<Associator, coverbs::detail::deadline_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const coverbs::detail::deadline_handler<Handler>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler);
  }
  static auto get(const coverbs::detail::deadline_handler<Handler>& h, const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.handler, c);
  }
};

}  // namespace boost::asio
