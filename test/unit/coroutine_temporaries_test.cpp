// The GCC 12 coroutine rule (docs/programming-model.md, "GCC 12 and coroutines"): a temporary with a
// destructor built in the same expression as a co_await — a braced struct, a capturing lambda, a string — can
// be destroyed wrongly by GCC 12; awaiting into named variables first is the safe form. This test runs the
// safe forms many times on a loop, with the values checked after each suspension (the asan leg watches for
// double frees and use after free).
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <functional>
#include <string>
#include <vector>

namespace asio = boost::asio;

namespace {

struct request {  // an aggregate whose members have destructors, as a user's own struct would
  std::string name;
  std::vector<int> values;
};

/// Suspends once (a trip through the loop) and gives back what it was handed.
asio::awaitable<std::string> echo(std::string s) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  co_return s;
}

asio::awaitable<int> sum(request r) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  int total = 0;
  for (int v : r.values) total += v;
  co_return total + static_cast<int>(r.name.size());
}

asio::awaitable<int> apply(std::function<int()> f) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  co_return f();
}

}  // namespace

TEST_CASE("GCC 12: co_await with the temporaries named first keeps every value intact", "[coroutine]") {
  asio::io_context io;
  int rounds = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 500; ++i) {
          std::string text = "a string longer than the small-string buffer, number " + std::to_string(i);
          std::string back = co_await echo(text);  // named string, awaited into a named variable
          REQUIRE(back == text);

          request r{"twelve chars", {1, 2, 3, i}};  // named braced struct
          const int s = co_await sum(r);
          REQUIRE(s == 6 + i + 12);

          std::vector<int> captured(16, i);
          auto f = [captured] { return captured.back() * 2; };  // named capturing lambda
          const int twice = co_await apply(f);
          REQUIRE(twice == 2 * i);
          ++rounds;
        }
      },
      asio::detached);
  io.run();
  CHECK(rounds == 500);
}
