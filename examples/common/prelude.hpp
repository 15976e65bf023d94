#pragma once
// The names every example helper and example uses: `asio`, `error_code`, the steady clock, and `tuple`, the
// completion token of an operation awaited with its error code instead of throwing it.
#include <coverbs/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>

namespace example {

namespace asio = boost::asio;
using coverbs::error_code;
using clock = std::chrono::steady_clock;

/// Awaitable operations that complete with their error code instead of throwing it.
inline constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

}  // namespace example
