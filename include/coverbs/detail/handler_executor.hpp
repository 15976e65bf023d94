#pragma once
// Whether a completion handler brings an executor of its own (a coroutine's use_awaitable, bind_executor,
// a strand, use_future's), as opposed to a plain callback, whose associated executor is only the default.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <type_traits>
#include <typeinfo>

namespace coverbs::detail {

/// Stands for "no executor" as the default of associated_executor; never used as an executor.
struct no_associated_executor {};

template <class Handler>
inline constexpr bool has_associated_executor_v =
    !std::is_same_v<boost::asio::associated_executor_t<std::decay_t<Handler>, no_associated_executor>,
                    no_associated_executor>;

/// The `io_context` executor `ex` holds, or null (it holds another type, or none): the held type is proved by
/// its `type_info` being the very object `typeid` names here, as in same_executor below.
inline const boost::asio::io_context::executor_type* held_io_executor(const boost::asio::any_io_executor& ex) noexcept {
  using io_executor = boost::asio::io_context::executor_type;
  if (&ex.target_type() != &typeid(io_executor)) return nullptr;
  return static_cast<const io_executor*>(ex.target<void>());
}

/// `a == b`, for a handler's associated executor against its I/O object's. For two `any_io_executor`s that
/// both hold an `io_context`'s executor (the common case: a coroutine's executor and its queue pair's), the
/// held executors are compared directly: `any_io_executor`'s own `==` checks the held type twice through
/// `typeid` comparisons, which compare the types' names (natively ~50 instructions per operation). The fast
/// path is taken only when both `type_info`s are the very object `typeid` names here, which proves the type;
/// anything else falls back to `==`.
///
/// Where Asio leaves the members it stores a held executor in public (`target_`, and `target_fns_`, the held
/// type's function table: Boost 1.81), two executors that share one table hold the same type, and one call of
/// that table's `target_type` proves it: half the calls, ~20 instructions less per operation.
template <class Executor>
bool same_executor(const Executor& a, const Executor& b) noexcept {
  if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    using io_executor = boost::asio::io_context::executor_type;
    const std::type_info& held = typeid(io_executor);
    if constexpr (requires {
                    a.target_fns_->target_type();
                    a.target_;
                  }) {
      if (a.target_fns_ == b.target_fns_ && a.target_ && b.target_ && &a.target_fns_->target_type() == &held)
        return *static_cast<const io_executor*>(a.target_) == *static_cast<const io_executor*>(b.target_);
    }
    if (&a.target_type() == &held && &b.target_type() == &held)
      return *static_cast<const io_executor*>(a.template target<void>()) ==
             *static_cast<const io_executor*>(b.template target<void>());
  }
  return a == b;
}

/// An Asio executor of either model (standard executors, and the Networking TS ones).
template <class T>
inline constexpr bool is_any_executor_v =
    boost::asio::execution::is_executor<T>::value || boost::asio::is_executor<T>::value;

/// An executor, or an execution context (e.g. an `io_context`) standing for its executor: what Asio's I/O
/// objects and operations accept.
template <class T>
concept executor_or_context =
    is_any_executor_v<std::remove_cvref_t<T>> || std::is_convertible_v < std::remove_cvref_t<T>
&, boost::asio::execution_context& > ;

/// The executor of an executor-or-context argument.
template <class T>
decltype(auto) executor_of(T& x) noexcept {
  if constexpr (is_any_executor_v<std::remove_cvref_t<T>>)
    return x;
  else
    return x.get_executor();
}
template <class T>
using executor_of_t = std::remove_cvref_t<decltype(executor_of(std::declval<T&>()))>;

/// The completion token an operation uses when the caller gives none: the executor's own
/// (`asio::default_completion_token_t`, what `asio::as_default_on` / `as_default_on_t` set), else
/// `asio::deferred` (the default of later Asio releases, Boost 1.86 on). `co_await op(...)` in an
/// `asio::awaitable` coroutine then awaits the operation itself, without the coroutine frame `use_awaitable`
/// adds for its initiation (natively 16 ns less per operation, bench_overhead). Nothing starts until it is
/// awaited or given a handler, as with an `awaitable`. Where an `awaitable` object is needed — `co_spawn`, the
/// `||` / `&&` operators of `asio::experimental::awaitable_operators` — pass `asio::use_awaitable`.
template <class Executor>
using default_token_t = std::conditional_t<std::is_void_v<boost::asio::default_completion_token_t<Executor>>,
                                           boost::asio::deferred_t, boost::asio::default_completion_token_t<Executor>>;

}  // namespace coverbs::detail
