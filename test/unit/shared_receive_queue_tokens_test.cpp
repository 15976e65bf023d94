// Without a device: shared_receive_queue's operations work with the usual completion tokens and report
// what they promise, and its errors explain themselves.
#include <coverbs/error.hpp>
#include <coverbs/queue_pair.hpp>
#include <coverbs/shared_receive_queue.hpp>

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
using cv::errc;
using cv::error_code;

namespace {

// Never called: instantiating these calls is the test (a token that does not work fails to compile).
[[maybe_unused]] void every_operation_with_every_token(cv::shared_receive_queue& srq, cv::registered_span s) {
  auto each = [&](auto token) {
    (void)srq.async_recv(s, token);
    (void)srq.async_wait_limit(token);
  };
  each([](error_code, auto&&...) {});
  each(asio::use_future);
  each(asio::use_awaitable);
  each(asio::as_tuple(asio::use_awaitable));
  each(asio::deferred);
}

using srq = cv::shared_receive_queue;
using span = cv::registered_span;
template <class Token>
using recv_result = decltype(std::declval<srq&>().async_recv(span{}, std::declval<Token>()));
template <class Token>
using limit_result = decltype(std::declval<srq&>().async_wait_limit(std::declval<Token>()));

}  // namespace

TEST_CASE("shared receive queue operations return what each completion token promises", "[srq][tokens]") {
  STATIC_REQUIRE(std::is_same_v<recv_result<asio::use_awaitable_t<>>, asio::awaitable<cv::srq_received>>);
  STATIC_REQUIRE(std::is_same_v<limit_result<asio::use_awaitable_t<>>, asio::awaitable<void>>);
  STATIC_REQUIRE(std::is_same_v<recv_result<const asio::use_future_t<>&>, std::future<cv::srq_received>>);
  STATIC_REQUIRE(std::is_same_v<recv_result<asio::as_tuple_t<asio::use_awaitable_t<>>>,
                                asio::awaitable<std::tuple<error_code, cv::srq_received>>>);
  // The default token is deferred, as for queue_pair: an operation `co_await` takes as it is.
  using default_recv = decltype(std::declval<srq&>().async_recv(span{}));
  STATIC_REQUIRE(asio::is_async_operation<default_recv>::value);
  STATIC_REQUIRE(std::is_same_v<asio::completion_signature_of_t<default_recv>, void(error_code, cv::srq_received)>);
  // An srq_received is a received (bytes, imm, invalidated rkey) plus the queue pair it arrived on.
  STATIC_REQUIRE(std::is_base_of_v<cv::received, cv::srq_received>);
  cv::srq_received r;
  CHECK(r.qp_num == 0);
  CHECK(r.bytes == 0);
  CHECK_FALSE(r.imm);
}

TEST_CASE("the shared receive queue's errors say what to do instead", "[srq][error]") {
  const error_code shared = errc::receive_queue_is_shared;
  CHECK(shared.category() == cv::coverbs_category());
  CHECK(shared.message().find("shared_receive_queue::async_recv") != std::string::npos);
  const error_code mismatch = errc::srq_cq_mismatch;
  CHECK(mismatch.message().find("completion queue") != std::string::npos);
  CHECK(mismatch != errc::executor_mismatch);
  // queue_pair_options names no SRQ unless asked.
  CHECK(cv::queue_pair_options{}.srq == nullptr);
  CHECK(cv::srq_options{}.limit == 0);
}
