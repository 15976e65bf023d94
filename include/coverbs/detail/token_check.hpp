#pragma once
// Internal: what every coverbs operation's completion-token parameter accepts, and the one static_assert a
// handler of the wrong completion signature meets (instead of a failed constraint listing every overload).
// Not part of the public API.
#include <boost/asio/async_result.hpp>

#include <type_traits>
#include <utility>

namespace coverbs {
namespace detail {

/// A function object with one non-template call operator (a lambda, a struct with operator()), or a function
/// (pointer): what a user writes as a completion handler. coverbs' own argument types have no call operator, so
/// taking such a thing in the token's place never makes an overload set ambiguous.
template <class T>
concept handler_like = requires { &std::remove_cvref_t<T>::operator(); } ||
                       std::is_function_v<std::remove_pointer_t<std::decay_t<T>>>;

/// Whether `Token` is a completion token for `Signature`; when not, the one static_assert a wrong handler meets
/// (once per operation call: the compiler's note names this function with its `Signature`). An operation that
/// does not start through `initiate_checked` below tests it with `if constexpr`.
template <class Token, class Signature>
constexpr bool token_fits() {
  constexpr bool fits = boost::asio::completion_token_for<Token, Signature>;
  static_assert(fits,
                "coverbs: the completion handler cannot be called with this operation's completion signature. It "
                "must be callable as the `Signature` of coverbs::detail::token_fits<Token, Signature> in the note "
                "above (e.g. void(boost::system::error_code, std::size_t) for sends and writes; each operation's "
                "@par Completion Signature says its own).");
  return fits;
}

/// boost::asio::async_initiate (under another name: Asio finds an `async_initiate` of the handler's namespace by
/// argument-dependent lookup), after checking that `Token` is a completion token for `Signature` (when it is
/// not, the static_assert is the only error: nothing is initiated).
template <class Token, class Signature, class Initiation, class... Args>
auto initiate_checked(Initiation&& initiation, std::type_identity_t<Token>& token, Args&&... args) {
  if constexpr (token_fits<Token, Signature>())
    return boost::asio::async_initiate<Token, Signature>(std::forward<Initiation>(initiation), token,
                                                         std::forward<Args>(args)...);
}

}  // namespace detail

/// What a coverbs operation's token parameter accepts: a completion token for `Signature`
/// (boost::asio::completion_token_for), or anything that looks like a handler, which the operation then checks
/// with one static_assert naming `Signature`.
template <class Token, class Signature>
concept completion_token_or_handler =
    boost::asio::completion_token_for<Token, Signature> || detail::handler_like<Token>;

}  // namespace coverbs
