#pragma once
// Operations started with callbacks, awaited one by one in the order they complete, with a deadline: how an
// example keeps receives or atomics posted ahead of time and takes their results in a coroutine.
#include "common/prelude.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <system_error>
#include <utility>

namespace example {

/// One completion taken from `completions`: the error, the caller's tag, and the operation's value.
template <class Value>
struct completion {
  error_code ec;
  std::size_t tag = 0;
  Value value{};
};

/// Operations started with callbacks (`handler(tag)` as their token), awaited one by one in the order they
/// complete. Lets a coroutine keep receives or atomics posted ahead of time: on one queue pair, receives
/// complete in the order they were posted (RC), so their tags come back in that order.
///
/// Lifetime: handlers share the state, so a completion arriving after this object is gone is harmless; the
/// buffers the operations use must still outlive them (`drain()` first, once the queue pair is in the error
/// state or every operation is known to complete).
/// @par Thread Safety Use from the executor the operations complete on (the queue pair's).
template <class Value>
class completions {
public:
  static constexpr std::size_t timed_out_tag = SIZE_MAX;  ///< the tag of a `next(deadline)` that timed out

  explicit completions(const asio::any_io_executor& ex) : state_(std::make_shared<state>(ex)) {}

  /// A completion token for one operation with signature `void(error_code, Value)`.
  auto handler(std::size_t tag) {
    ++state_->pending;
    return [s = state_, tag](error_code ec, Value value) {
      s->ready.push_back({ec, tag, std::move(value)});
      s->wake.cancel();
    };
  }

  /// Operations started and not yet taken.
  std::size_t pending() const noexcept { return state_->pending; }

  /// The next completion, waiting for it if none is there yet. Needs `pending() > 0`.
  asio::awaitable<completion<Value>> next() { return next(clock::time_point::max()); }

  /// As `next()`, giving up at `deadline`: the completion then has `ec` = `std::errc::timed_out` and tag
  /// `timed_out_tag`, and the operations stay pending (move the queue pair to the error state, e.g. with
  /// `disconnect_within`, then `drain()`).
  asio::awaitable<completion<Value>> next(clock::time_point deadline) {
    const std::shared_ptr<state> s = state_;
    while (s->ready.empty()) {
      s->wake.expires_at(deadline);
      auto [ec] = co_await s->wake.async_wait(tuple);
      if (!ec && s->ready.empty())
        co_return completion<Value>{error_code(std::make_error_code(std::errc::timed_out)), timed_out_tag};
    }
    completion<Value> c = std::move(s->ready.front());
    s->ready.pop_front();
    --s->pending;
    co_return c;
  }

  /// Takes every pending completion; returns how many of them failed.
  asio::awaitable<std::size_t> drain() {
    std::size_t failed = 0;
    while (pending() > 0) {
      const completion<Value> c = co_await next();
      failed += c.ec ? 1 : 0;
    }
    co_return failed;
  }

private:
  struct state {
    explicit state(const asio::any_io_executor& ex) : wake(ex, clock::time_point::max()) {}
    asio::steady_timer wake;  // expires at the waiter's deadline (never, for next()); cancelled to wake it
    std::deque<completion<Value>> ready;
    std::size_t pending = 0;
  };
  std::shared_ptr<state> state_;
};

}  // namespace example
