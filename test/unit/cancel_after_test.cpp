// coverbs/cancel_after.hpp: a deadline for one operation. Asio's own timers as the operations (the adapter's
// mechanics), then a coverbs receive on the software verbs device (test/fixtures/soft_pair.hpp), including an
// io_context destroyed while the operation and its deadline are pending. A call with a deadline on rxe:
// test/device/messaging_test.cpp.
#include <coverbs/cancel_after.hpp>

#include "fixtures/soft_pair.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>

namespace cv = coverbs;
namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

TEST_CASE("an operation still pending at its deadline completes with operation_aborted", "[cancel_after]") {
  asio::io_context io;
  asio::steady_timer op(io, 60s);
  std::optional<cv::error_code> result;
  op.async_wait(cv::cancel_after(20ms, asio::bind_executor(io, [&](cv::error_code ec) { result = ec; })));
  io.run_for(30s);  // returns as soon as nothing is left: the cancelled wait, and the deadline's timer
  REQUIRE(result);
  CHECK(*result == asio::error::operation_aborted);
  CHECK(io.stopped());
}

TEST_CASE("an operation that completes first keeps its result, and its deadline leaves nothing to keep run() busy",
          "[cancel_after]") {
  asio::io_context io;
  asio::steady_timer op(io, 1ms);
  std::optional<cv::error_code> result;
  op.async_wait(cv::cancel_after(60s, asio::bind_executor(io, [&](cv::error_code ec) { result = ec; })));
  io.run_for(30s);  // a deadline left armed would hold run_for for the whole 30 s and leave it not stopped
  REQUIRE(result);
  CHECK_FALSE(*result);
  CHECK(io.stopped());
}

namespace {

/// The initiation of async_until_cancelled: completes only when cancelled, recording whether the cancellation
/// arrived inside `io`'s run(), then completes with operation_aborted on the handler's associated executor.
struct until_cancelled {
  asio::io_context* io;
  bool* where;
  using executor_type = asio::io_context::executor_type;
  executor_type get_executor() const noexcept { return io->get_executor(); }
  template <class Handler>
  void operator()(Handler&& handler) const {
    auto slot = asio::get_associated_cancellation_slot(handler);
    REQUIRE(slot.is_connected());
    struct state {
      std::decay_t<Handler> handler;
      asio::executor_work_guard<executor_type> work;
    };
    auto s = std::make_shared<state>(state{std::forward<Handler>(handler), asio::make_work_guard(io->get_executor())});
    slot.assign([s, io = io, where = where](asio::cancellation_type) {
      *where = io->get_executor().running_in_this_thread();
      auto ex = asio::get_associated_executor(s->handler, io->get_executor());
      asio::post(ex, [h = std::move(s->handler)]() mutable { h(cv::error_code(asio::error::operation_aborted)); });
      s->work.reset();
    });
  }
};

/// An operation of `op_io` that completes only when cancelled (until_cancelled).
template <class Token>
auto async_until_cancelled(asio::io_context& op_io, bool& cancelled_on_op_loop, Token&& token) {
  return asio::async_initiate<Token, void(cv::error_code)>(until_cancelled{&op_io, &cancelled_on_op_loop}, token);
}

}  // namespace

TEST_CASE("the deadline fires on the operation's own executor, the handler runs on its own (another loop)",
          "[cancel_after]") {
  asio::io_context op_io, handler_io;
  bool cancelled_on_op_loop = false, handler_on_its_loop = false;
  std::optional<cv::error_code> result;
  async_until_cancelled(op_io, cancelled_on_op_loop,
                        cv::cancel_after(10ms, asio::bind_executor(handler_io, [&](cv::error_code ec) {
                          result = ec;
                          handler_on_its_loop = handler_io.get_executor().running_in_this_thread();
                        })));
  for (int turns = 0; !result && turns < 6000; ++turns) {  // 30 s at most
    op_io.restart();
    op_io.run_for(5ms);
    handler_io.restart();  // a poll() that found nothing to do left it stopped
    handler_io.poll();
  }
  REQUIRE(result);
  CHECK(*result == asio::error::operation_aborted);
  CHECK(cancelled_on_op_loop);  // a timer on the handler's loop would have cancelled from handler_io.poll()
  CHECK(handler_on_its_loop);
}

TEST_CASE("a plain callback with no executor of its own: the deadline runs on the operation's", "[cancel_after]") {
  asio::io_context io;
  asio::steady_timer op(io, 60s);
  std::optional<cv::error_code> result;
  op.async_wait(cv::cancel_after(10ms, [&](cv::error_code ec) { result = ec; }));
  io.run_for(30s);
  REQUIRE(result);
  CHECK(*result == asio::error::operation_aborted);
  CHECK(io.stopped());
}

TEST_CASE("a cancellation of the awaiting coroutine's own slot still reaches the operation (a || b)", "[cancel_after]") {
  asio::io_context io;
  std::optional<std::size_t> winner;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer slow(io, 60s), fast(io, 10ms);
    auto r = co_await (slow.async_wait(cv::cancel_after(60s, asio::use_awaitable)) || fast.async_wait(asio::use_awaitable));
    winner = r.index();
  }, asio::detached);
  io.run_for(30s);  // `slow` was cancelled by ||, its deadline stopped with it: nothing left
  REQUIRE(winner);
  CHECK(*winner == 1);
  CHECK(io.stopped());
}

TEST_CASE("awaited: as_tuple(use_awaitable) gives the operation's error at the deadline", "[cancel_after]") {
  asio::io_context io;
  std::optional<cv::error_code> result;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer op(io, 60s);
    auto [ec] = co_await op.async_wait(cv::cancel_after(10ms, asio::as_tuple(asio::use_awaitable)));
    result = ec;
  }, asio::detached);
  io.run_for(30s);
  REQUIRE(result);
  CHECK(*result == asio::error::operation_aborted);
}

TEST_CASE("a coverbs receive with nothing arriving completes with operation_aborted at its deadline",
          "[cancel_after]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);
  std::optional<cv::error_code> recv;
  rig.b.async_recv(rig.remote_span(64), cv::cancel_after(20ms, asio::bind_executor(io, [&](cv::error_code ec, cv::received) {
    recv = ec;
  })));
  io.run_for(30s);
  REQUIRE(recv);
  CHECK(*recv == asio::error::operation_aborted);
}

TEST_CASE("queue pairs destroyed with an operation and its deadline pending, then the io_context: nothing runs, "
          "nothing leaks",
          "[cancel_after]") {
  auto io = std::make_unique<asio::io_context>();
  auto rig = std::make_unique<soft_verbs::soft_pair>(*io, 8, 64);
  bool ran = false;
  rig->b.async_recv(rig->remote_span(64),
                    cv::cancel_after(60s, asio::bind_executor(*io, [&](cv::error_code, cv::received) { ran = true; })));
  io->poll();
  rig.reset();  // the receive is flushed: its handler, holding the deadline's signal, queued in the loop
  io.reset();   // destroyed with the deadline's pending timer, in either order
  CHECK_FALSE(ran);
}

TEST_CASE("a const cancel_after token is usable", "[cancel_after]") {
  asio::io_context io;
  std::optional<cv::error_code> result;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer op(io, 60s);
    const auto token = cv::cancel_after(10ms, asio::as_tuple(asio::use_awaitable));
    auto [ec] = co_await op.async_wait(token);
    result = ec;
  }, asio::detached);
  io.run_for(30s);
  REQUIRE(result);
  CHECK(*result == asio::error::operation_aborted);
}
