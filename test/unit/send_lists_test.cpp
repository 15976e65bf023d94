// The send queue's posting rule (queue_pair.hpp, "When a request is posted") natively on the software verbs
// device (test/fixtures/soft_verbs.hpp), which completes a request at once and, as a device does, writes a
// completion only for a signaled request or a failed one: requests a completion handler initiates go out as one
// list with one doorbell and one completion, their handlers run in posting order, a failure inside a list is
// reported where it happened, and a cancellation touches only its own operation. The rxe side is the device
// suite's `batching`.
#include "fixtures/run_all.hpp"
#include "fixtures/soft_pair.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <memory>
#include <utility>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;
using test::run_all;

namespace {

/// Starts `n` writes of 8 bytes on `rig.a`, each recording its index and result in `order` / `results`.
void start_writes(soft_verbs::soft_pair& rig, int first, int n, std::vector<int>& order,
                  std::vector<cv::error_code>& results) {
  for (int i = first; i < first + n; ++i)
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&, i](cv::error_code ec, std::size_t) {
      order.push_back(i);
      results[static_cast<std::size_t>(i)] = ec;
    });
}

}  // namespace

TEST_CASE("writes a completion handler starts share one doorbell and one completion", "[soft][lists]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  std::vector<int> order;
  std::vector<cv::error_code> results(17, cv::wc_errc::general_err);
  cv::completion_queue_stats before{};
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code ec, std::size_t) {
    CHECK_FALSE(ec);
    before = rig.cq.stats();
    start_writes(rig, 1, 16, order, results);
    CHECK(rig.a.sends_outstanding() == 16);  // holding credits in the turn's list, not posted yet
    CHECK(rig.soft.sends_posted() == 1);
  });
  run_all(io);
  const auto after = rig.cq.stats();
  CHECK(after.send_doorbells - before.send_doorbells == 1);
  CHECK(after.send_requests - before.send_requests == 16);
  CHECK(after.completions - before.completions == 1);
  REQUIRE(order.size() == 16);
  for (int i = 0; i < 16; ++i) {
    CHECK(order[static_cast<std::size_t>(i)] == i + 1);  // posting order
    CHECK_FALSE(results[static_cast<std::size_t>(i + 1)]);
  }
  CHECK(rig.a.sends_outstanding() == 0);
  CHECK_FALSE(rig.a.error());
}

TEST_CASE("a lone write started outside a turn is posted at once, signaled", "[soft][lists]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  cv::error_code ec = cv::wc_errc::general_err;
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code e, std::size_t) { ec = e; });
  CHECK(rig.soft.sends_posted() == 1);  // posted inside the call; its handler waits for the loop
  run_all(io);
  CHECK_FALSE(ec);
  CHECK(rig.cq.stats().send_doorbells == 1);
  CHECK(rig.cq.stats().completions == 1);
}

TEST_CASE("a list is capped at half the send queue, so credits come back while the rest is in flight",
          "[soft][lists]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);  // lists of at most 4
  std::vector<int> order;
  std::vector<cv::error_code> results(41, cv::wc_errc::general_err);
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code, std::size_t) {
    start_writes(rig, 1, 40, order, results);  // 8 credits: the rest waits, and goes out as credits return
  });
  run_all(io);
  REQUIRE(order.size() == 40);
  for (int i = 0; i < 40; ++i)
    CHECK(order[static_cast<std::size_t>(i)] == i + 1);
  CHECK(rig.soft.max_send_outstanding() <= 8);
  const auto stats = rig.cq.stats();
  CHECK(stats.send_requests == 41);
  CHECK(stats.send_requests <= 4 * (stats.send_doorbells - 1) + 1);  // never more than 4 in one list
}

TEST_CASE("a request that fails inside a list gets its error, those before it success, those after it a flush",
          "[soft][lists]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  std::vector<int> order;
  std::vector<cv::error_code> results(9, cv::wc_errc::general_err);
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code, std::size_t) {
    rig.soft.fail_next(IBV_WC_REM_ACCESS_ERR, 1, 3);  // the 4th of the list
    start_writes(rig, 1, 8, order, results);
  });
  run_all(io);
  REQUIRE(order.size() == 8);
  for (int i = 0; i < 8; ++i)
    CHECK(order[static_cast<std::size_t>(i)] == i + 1);  // each exactly once, in posting order
  for (int i = 1; i <= 3; ++i)
    CHECK_FALSE(results[static_cast<std::size_t>(i)]);
  CHECK(results[4] == cv::wc_errc::rem_access_err);
  for (int i = 5; i <= 8; ++i)
    CHECK(results[static_cast<std::size_t>(i)] == cv::wc_errc::wr_flush_err);
  CHECK(rig.a.error() == cv::wc_errc::rem_access_err);
  CHECK(rig.a.sends_outstanding() == 0);
}

TEST_CASE("an operation cancelled while in the turn's list completes at once, and nothing else is touched",
          "[soft][lists][cancel]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  std::vector<int> order;
  std::vector<cv::error_code> results(4, cv::wc_errc::general_err);
  asio::cancellation_signal signal;
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code, std::size_t) {
    start_writes(rig, 1, 1, order, results);
    rig.a.async_write(rig.local_span(8), rig.remote_key(8),
                      asio::bind_cancellation_slot(signal.slot(), [&](cv::error_code ec, std::size_t) {
                        order.push_back(2);
                        results[2] = ec;
                      }));
    start_writes(rig, 3, 1, order, results);
    signal.emit(asio::cancellation_type::terminal);
    CHECK(rig.a.sends_outstanding() == 2);
  });
  run_all(io);
  CHECK(results[2] == asio::error::operation_aborted);
  CHECK_FALSE(results[1]);
  CHECK_FALSE(results[3]);
  CHECK(order.size() == 3);
  CHECK_FALSE(rig.a.error());
  CHECK(rig.soft.sends_posted() == 3);  // the first, then the list of two: the cancelled one never posted
}

TEST_CASE("write || write in one list: the loser's cancellation after the list completed leaves the queue pair healthy",
          "[soft][lists][cancel]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  bool raced = false;
  cv::error_code after = cv::wc_errc::general_err;
  cv::completion_queue_stats before{};
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code, std::size_t) {
    // Started from a completion handler: both writes join the turn's list. The list's one completion
    // retires the first, whose completion cancels the second (terminal, as `||` does) while the second's
    // completion is the one being handled: it must find the second complete and leave the queue pair alone.
    before = rig.cq.stats();
    asio::experimental::make_parallel_group(rig.a.async_write(rig.local_span(8), rig.remote_key(8), asio::deferred),
                                            rig.a.async_write(rig.local_span(8), rig.remote_key(8), asio::deferred))
        .async_wait(asio::experimental::wait_for_one(),
                    [&](std::array<std::size_t, 2> order, cv::error_code e1, std::size_t, cv::error_code e2, std::size_t) {
                      raced = true;
                      CHECK(order[0] == 0);
                      CHECK_FALSE(e1);
                      CHECK_FALSE(e2);  // complete before the cancellation: its real result
                      rig.a.async_write(rig.local_span(8), rig.remote_key(8),
                                        [&](cv::error_code ec, std::size_t) { after = ec; });
                    });
  });
  run_all(io);
  CHECK(raced);
  CHECK(rig.cq.stats().send_doorbells - before.send_doorbells == 2);  // the list of two, then the last write
  CHECK_FALSE(after);
  CHECK_FALSE(rig.a.error());
}

TEST_CASE("after a failure, operations never posted complete after the flushed ones, in initiation order",
          "[soft][lists]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);  // lists of at most 4: 8 posted (two lists), 12 waiting for credits
  std::vector<int> order;
  std::vector<cv::error_code> results(21, cv::wc_errc::general_err);
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code, std::size_t) {
    rig.soft.fail_next(IBV_WC_REM_ACCESS_ERR, 1, 1);  // the 2nd of the first list
    start_writes(rig, 1, 20, order, results);
  });
  run_all(io);
  REQUIRE(order.size() == 20);
  for (int i = 0; i < 20; ++i)
    CHECK(order[static_cast<std::size_t>(i)] == i + 1);
  CHECK_FALSE(results[1]);
  CHECK(results[2] == cv::wc_errc::rem_access_err);
  for (int i = 3; i <= 20; ++i)
    CHECK(results[static_cast<std::size_t>(i)] == cv::wc_errc::wr_flush_err);
  CHECK(rig.a.sends_outstanding() == 0);
  CHECK(rig.a.sends_waiting() == 0);
}

TEST_CASE("a handler that polls the completion queue in place sees its own write complete", "[soft][lists][nested]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  bool done = false, waited = false;
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code, std::size_t) {
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code ec, std::size_t) {
      CHECK_FALSE(ec);
      done = true;
    });
    for (int i = 0; i < 100 && !done; ++i)
      rig.cq.poll();  // a nested turn: the write this handler initiated is posted before it polls
    waited = done;
  });
  run_all(io);
  CHECK(waited);
}

TEST_CASE("a retired operation's handler that polls in place does not overtake the operations before it",
          "[soft][lists][nested]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);  // lists of at most 4
  std::vector<int> order;
  std::vector<cv::error_code> results(8, cv::wc_errc::general_err);
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code, std::size_t) {
    // w1 w2 w3: one list; w1's handler (retired by w3's completion) starts w4..w7 (a full list, posted at
    // once) and polls in place: w2 and w3 must still run before them.
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code ec, std::size_t) {
      order.push_back(1);
      results[1] = ec;
      start_writes(rig, 4, 4, order, results);
      rig.cq.poll();
    });
    start_writes(rig, 2, 2, order, results);
  });
  run_all(io);
  REQUIRE(order.size() == 7);
  for (int i = 0; i < 7; ++i)
    CHECK(order[static_cast<std::size_t>(i)] == i + 1);
  for (int i = 1; i <= 7; ++i)
    CHECK_FALSE(results[static_cast<std::size_t>(i)]);
}

TEST_CASE("a retired operation's handler may destroy its queue pair; the rest complete, posted", "[soft][lists]") {
  asio::io_context io;
  auto rig = std::make_unique<soft_verbs::soft_pair>(io, 64, 64);
  std::vector<int> order;
  std::vector<cv::error_code> results(5, cv::wc_errc::general_err);
  rig->a.async_write(rig->local_span(8), rig->remote_key(8), [&](cv::error_code, std::size_t) {
    rig->a.async_write(rig->local_span(8), rig->remote_key(8), [&](cv::error_code ec, std::size_t) {
      order.push_back(1);
      results[1] = ec;
      { cv::queue_pair gone(std::move(rig->a)); }  // destroys the queue pair whose completion is being handled
    });
    start_writes(*rig, 2, 3, order, results);
  });
  run_all(io);
  REQUIRE(order.size() == 4);
  for (int i = 0; i < 4; ++i)
    CHECK(order[static_cast<std::size_t>(i)] == i + 1);
  for (int i = 1; i <= 4; ++i)
    CHECK_FALSE(results[static_cast<std::size_t>(i)]);  // all four completed on the device before
}
