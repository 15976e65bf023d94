// coverbs/coverbs.hpp alone brings what the guides' snippets use beside coverbs' own names: asio::as_tuple,
// use_awaitable, deferred, co_spawn, detached and this_coro (nothing else is included here on purpose).
#include <coverbs/coverbs.hpp>

#include <catch2/catch.hpp>

namespace asio = boost::asio;

TEST_CASE("coverbs.hpp alone is enough for the guides' tokens and spawning", "[include]") {
  asio::io_context io;
  int steps = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        auto nothing = co_await asio::post(ex, asio::as_tuple(asio::use_awaitable));  // void() -> tuple<>
        static_assert(std::tuple_size_v<decltype(nothing)> == 0);
        ++steps;
        co_await asio::post(ex, asio::deferred);
        ++steps;
      },
      asio::detached);
  io.run();
  CHECK(steps == 2);
}
