// Compile-time proof that every queue_pair operation works with the completion tokens Asio users
// reach for: use_awaitable (the default), a plain callback, use_future, deferred and as_tuple.
#include <coverbs/buffer_pool.hpp>
#include <coverbs/device_events.hpp>
#include <coverbs/memory_window.hpp>
#include <coverbs/window_operations.hpp>
#include <coverbs/queue_pair.hpp>
#include <coverbs/registration_service.hpp>
#include <coverbs/shared_receive_queue.hpp>
#include <coverbs/window_pool.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <catch2/catch.hpp>

#include <future>
#include <span>
#include <string>
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

// Every operation takes a completion token for its signature (asio::completion_token_for) or anything that looks
// like a handler (a function object with one call operator, a function pointer): something else (an int, a string)
// is refused at the call site (the call is not viable, so overloads stay unambiguous). A handler of the wrong
// signature is viable and meets one static_assert naming the signature it must have: the compile_time_help test
// (test/compile_fail/) checks that for every kind of operation.
template <class H>
concept write_takes = requires(qp& q, H h) { q.async_write(span{}, key{}, h); };
template <class H>
concept recv_takes = requires(qp& q, H h) { q.async_recv(span{}, h); };
template <class H>
concept fetch_add_takes = requires(qp& q, H h) { q.async_fetch_add(span{}, key{}, 1, h); };
template <class H>
concept bind_takes = requires(qp& q, cv::memory_window& w, const cv::memory_region& r, H h) {
  cv::bind_mw(q, w, r, cv::window_range{}, cv::access::remote_read, h);
};
template <class H>
concept invalidate_takes = requires(qp& q, H h) { cv::invalidate(q, std::uint32_t{1}, h); };
template <class H>
concept reg_takes = requires(cv::registration_service& svc, cv::protection_domain& pd, H h) {
  cv::reg_mr(svc, pd, std::span<std::byte>{}, cv::access::local_write, h);
};
template <class H>
concept reg_on_executor_takes = requires(asio::io_context& io, cv::protection_domain& pd, H h) {
  cv::reg_mr(io.get_executor(), pd, std::span<std::byte>{}, cv::access::local_write, h);
};
template <class H>
concept dereg_takes = requires(cv::registration_service& svc, cv::memory_region&& r, H h) {
  cv::dereg(svc, std::move(r), h);
};
template <class H>
concept allocate_takes = requires(cv::buffer_pool& p, H h) { p.async_allocate(64, h); };
template <class H>
concept lease_takes = requires(cv::window_pool& p, qp& q, const cv::memory_region& r, H h) {
  p.async_lease(q, r, cv::window_range{}, cv::access::remote_read, {}, h);
};
template <class H>
concept revoke_takes = requires(cv::window_lease& l, H h) { l.async_revoke(h); };
template <class H>
concept srq_recv_takes = requires(cv::shared_receive_queue& q, H h) { q.async_recv(span{}, h); };
template <class H>
concept wait_event_takes = requires(cv::device_events& e, H h) { e.async_wait_event(h); };

using wrong = std::string;  // not a handler
static_assert(write_takes<void (*)(error_code, std::size_t)> && !write_takes<wrong> && !write_takes<int>);
static_assert(recv_takes<void (*)(error_code, cv::received)> && !recv_takes<int>);
static_assert(fetch_add_takes<void (*)(error_code, std::uint64_t)> && !fetch_add_takes<int>);
static_assert(bind_takes<void (*)(error_code, cv::remote_key)> && !bind_takes<wrong>);
static_assert(invalidate_takes<void (*)(error_code)> && !invalidate_takes<wrong>);
static_assert(reg_takes<void (*)(error_code, cv::memory_region)> && !reg_takes<wrong>);
static_assert(reg_on_executor_takes<void (*)(error_code, cv::memory_region)> && !reg_on_executor_takes<wrong>);
static_assert(dereg_takes<void (*)(error_code, cv::memory_region)> && !dereg_takes<wrong>);
static_assert(allocate_takes<void (*)(error_code, cv::registered_buffer)> && !allocate_takes<wrong>);
static_assert(lease_takes<void (*)(error_code, cv::window_lease)> && !lease_takes<wrong>);
static_assert(revoke_takes<void (*)(error_code)> && !revoke_takes<wrong>);
static_assert(wait_event_takes<void (*)(error_code, cv::device_event)> && !wait_event_takes<wrong>);
static_assert(srq_recv_takes<void (*)(error_code, cv::srq_received)> && !srq_recv_takes<wrong>);

// The docs write these in braces inside co_await (`co_await bind_mw(qp, w, mr, {off, n}, ...)`, `co_await
// rereg(service, std::move(mr), {.rights = rw})`). GCC 12 mishandles a braced aggregate there only when it
// has members with destructors (see cm.hpp, connection_options): these must stay trivially destructible.
static_assert(std::is_trivially_destructible_v<cv::window_range> && std::is_aggregate_v<cv::window_range>);
static_assert(std::is_trivially_destructible_v<cv::rereg_request> && std::is_aggregate_v<cv::rereg_request>);
static_assert(std::is_trivially_destructible_v<cv::remote_key> && std::is_trivially_destructible_v<span>);

// The default token of an operation on a given executor is that executor's (asio::default_completion_token_t,
// what as_default_on sets), else deferred (awaited in place by co_await, without use_awaitable's extra frame).
using tuple_awaitable = asio::as_tuple_t<asio::use_awaitable_t<>>;
using tuple_executor = tuple_awaitable::executor_with_default<asio::any_io_executor>;
static_assert(std::is_same_v<cv::detail::default_token_t<tuple_executor>, tuple_awaitable>);
static_assert(std::is_same_v<cv::detail::default_token_t<asio::any_io_executor>, asio::deferred_t>);
static_assert(std::is_same_v<decltype(cv::reg_mr(std::declval<const tuple_executor&>(), std::declval<cv::protection_domain&>(),
                                                 std::span<std::byte>{}, cv::access::local_write)),
                             asio::awaitable<std::tuple<error_code, cv::memory_region>>>);
// An io_context is accepted where an executor is.
static_assert(std::is_constructible_v<cv::registration_service, asio::io_context&>);
static_assert(std::is_constructible_v<cv::completion_queue, asio::io_context&, cv::device&>);
static_assert(std::is_constructible_v<cv::device_events, asio::io_context&, cv::device&>);
static_assert(requires(asio::io_context& io, cv::protection_domain& pd) {
  cv::reg_mr(io, pd, std::span<std::byte>{}, cv::access::local_write, [](error_code, cv::memory_region) {});
});

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
  // The default token is deferred: `co_await qp.async_write(span, key)` needs nothing more; the operation is
  // one `co_await` takes as it is (an async operation with the write's signature).
  using default_write = decltype(std::declval<qp&>().async_write(span{}, key{}));
  STATIC_REQUIRE(asio::is_async_operation<default_write>::value);
  STATIC_REQUIRE(std::is_same_v<asio::completion_signature_of_t<default_write>, void(error_code, std::size_t)>);
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
