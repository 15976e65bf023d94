// Compile-time proof that every queue_pair operation works with the completion tokens Asio users
// reach for: use_awaitable (the default), a plain callback, use_future, deferred and as_tuple.
#include <coverbs/queue_pair.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <catch2/catch.hpp>

#include <future>
#include <tuple>
#include <type_traits>

namespace asio = boost::asio;
namespace cv = coverbs;
using cv::error_code;

namespace {

// Never called: instantiating these calls is the test (a token that does not work fails to compile).
[[maybe_unused]] void every_operation_with_every_token(cv::queue_pair& qp, cv::registered_span s, cv::remote_key k) {
  auto each = [&](auto token) {
    (void)qp.async_send(s, token);
    (void)qp.async_send_with_imm(s, 1, token);
    (void)qp.async_send_with_invalidate(s, 2, token);
    (void)qp.async_recv(s, token);
    (void)qp.async_write(s, k, token);
    (void)qp.async_write_with_imm(s, k, 3, token);
    (void)qp.async_read(s, k, token);
    (void)qp.async_fetch_add(s, k, 4, token);
    (void)qp.async_compare_swap(s, k, 5, 6, token);
  };
  each([](error_code, auto) {});
  each(asio::use_future);
  each(asio::use_awaitable);
  each(asio::as_tuple(asio::use_awaitable));
  each(asio::deferred);
  auto deferred_send = qp.async_send(s, asio::deferred);
  std::move(deferred_send)([](error_code, std::size_t) {});
}

using qp = cv::queue_pair;
using span = cv::registered_span;
using key = cv::remote_key;

template <class Token>
using write_result = decltype(std::declval<qp&>().async_write(span{}, key{}, std::declval<Token>()));
template <class Token>
using recv_result = decltype(std::declval<qp&>().async_recv(span{}, std::declval<Token>()));
template <class Token>
using atomic_result = decltype(std::declval<qp&>().async_fetch_add(span{}, key{}, 1, std::declval<Token>()));

}  // namespace

TEST_CASE("operations return what each completion token promises", "[qp][tokens]") {
  STATIC_REQUIRE(std::is_same_v<write_result<asio::use_awaitable_t<>>, asio::awaitable<std::size_t>>);
  STATIC_REQUIRE(std::is_same_v<recv_result<asio::use_awaitable_t<>>, asio::awaitable<cv::received>>);
  STATIC_REQUIRE(std::is_same_v<atomic_result<asio::use_awaitable_t<>>, asio::awaitable<std::uint64_t>>);
  STATIC_REQUIRE(std::is_same_v<write_result<const asio::use_future_t<>&>, std::future<std::size_t>>);
  STATIC_REQUIRE(std::is_same_v<recv_result<const asio::use_future_t<>&>, std::future<cv::received>>);
  STATIC_REQUIRE(std::is_same_v<write_result<asio::as_tuple_t<asio::use_awaitable_t<>>>,
                                asio::awaitable<std::tuple<error_code, std::size_t>>>);
  STATIC_REQUIRE(std::is_void_v<write_result<void (*)(error_code, std::size_t)>>);
  // The default token is use_awaitable: `co_await qp.async_write(span, key)` needs nothing more.
  STATIC_REQUIRE(
      std::is_same_v<decltype(std::declval<qp&>().async_write(span{}, key{})), asio::awaitable<std::size_t>>);
}

TEST_CASE("registered spans and remote keys slice without leaving their bounds", "[buffer]") {
  std::byte bytes[64];
  cv::registered_span s{bytes, 7};
  CHECK(s.subspan(10, 20).size() == 20);
  CHECK(s.subspan(10, 20).lkey == 7);
  CHECK(s.subspan(60, 20).size() == 4);
  CHECK(s.subspan(100).size() == 0);
  cv::remote_key k{0x1000, 64, 9};
  CHECK(k.slice(8, 8) == cv::remote_key{0x1008, 8, 9});
  CHECK(k.slice(60, 8).length == 4);
  CHECK(k.slice(100, 8).length == 0);
  const ibv_sge sge = s.subspan(4, 8).to_sge();
  CHECK(sge.addr == reinterpret_cast<std::uint64_t>(bytes + 4));
  CHECK(sge.length == 8);
  CHECK(sge.lkey == 7);
}
