// How many completions one dispatch turn of a completion queue handles before the rest of the loop runs
// (completion_queue_options::max_completions_per_turn and turn_quota), on the software verbs device, whose
// completions are all in the queue before the first turn runs. The device suite `fairness` checks the same
// bound against timers and leases on rxe.
#include <coverbs/coverbs.hpp>

#include "fixtures/run_all.hpp"
#include "fixtures/soft_pair.hpp"

#include <boost/asio/post.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <map>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;
using test::run_all;

namespace {

/// Posts `n` 8-byte writes at once, then runs the loop with a probe handler that re-posts itself until every
/// write completed: each completion records how many probes ran before it, so completions that saw the same
/// count ran in one turn of the queue. `work` runs in every completion handler. Returns the completions per turn,
/// in order.
std::vector<int> completions_per_turn(soft_verbs::soft_pair& rig, asio::io_context& io, int n,
                                      const std::function<void()>& work = {}) {
  std::size_t probes = 0;
  std::vector<std::size_t> seen;
  for (int i = 0; i < n; ++i)
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code ec, std::size_t) {
      CHECK(ec == cv::error_code{});
      seen.push_back(probes);
      if (work) work();
    });
  std::function<void()> probe = [&] {
    ++probes;
    if (seen.size() < static_cast<std::size_t>(n)) asio::post(io, probe);
  };
  asio::post(io, probe);
  run_all(io);
  REQUIRE(seen.size() == static_cast<std::size_t>(n));
  std::map<std::size_t, int> by_probe;
  for (std::size_t s : seen)
    ++by_probe[s];
  std::vector<int> turns;
  for (auto [probe_count, count] : by_probe)
    turns.push_back(count);
  return turns;
}

void busy_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

/// Options with a bound of `count` completions and `quota` a turn.
cv::completion_queue_options bounds(unsigned count, std::chrono::microseconds quota) {
  cv::completion_queue_options o;
  o.max_completions_per_turn = count;
  o.turn_quota = quota;
  return o;
}

/// completions_per_turn of `n` writes on a queue bounded at 16 completions and 20 ms a turn, where the handler
/// of the i-th completion (from 1) is busy for 30 ms when `slow(i)`.
std::vector<int> turns_with_slow_handlers(int n, const std::function<bool(int)>& slow) {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64, bounds(16, std::chrono::milliseconds(20)));
  int handled = 0;
  return completions_per_turn(rig, io, n, [&] {
    if (slow(++handled)) busy_for(std::chrono::milliseconds(30));
  });
}

}  // namespace

TEST_CASE("the defaults: at most 16 completions per turn, and a time quota of 50 us", "[soft][turn]") {
  const cv::completion_queue_options o;
  CHECK(o.max_completions_per_turn == 16);
  CHECK(o.turn_quota == std::chrono::microseconds(50));
}

TEST_CASE("without a time quota a turn handles max_completions_per_turn completions, then yields", "[soft][turn]") {
  asio::io_context io;
  const unsigned limit = GENERATE(4u, 16u);
  soft_verbs::soft_pair rig(io, 64, 64, bounds(limit, std::chrono::microseconds(0)));
  const std::vector<int> turns = completions_per_turn(rig, io, 48);
  INFO("limit " << limit << ", turns " << turns.size());
  // Every turn but the last is full; none is larger. (Without the bound: one turn of 48.)
  for (std::size_t i = 0; i + 1 < turns.size(); ++i)
    CHECK(turns[i] == static_cast<int>(limit));
  CHECK(*std::max_element(turns.begin(), turns.end()) == static_cast<int>(limit));
  CHECK(rig.cq.stats().yields >= 48 / limit - 1);
}

TEST_CASE("a turn whose handlers outrun turn_quota stops after four completions", "[soft][turn]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64, bounds(16, std::chrono::microseconds(50)));
  // Each handler takes 200 us (as one does in the emulated Soft-RoCE guest): past the quota by the fourth.
  const std::vector<int> turns = completions_per_turn(rig, io, 24, [] { busy_for(std::chrono::microseconds(200)); });
  INFO("turns " << turns.size());
  REQUIRE(turns.size() == 6);
  for (int t : turns)
    CHECK(t == 4);
}

TEST_CASE("a quota that is not reached leaves the count as the bound", "[soft][turn]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64, bounds(16, std::chrono::seconds(10)));
  const std::vector<int> turns = completions_per_turn(rig, io, 40);
  REQUIRE(turns.size() == 3);
  CHECK(turns[0] == 16);
  CHECK(turns[1] == 16);
  CHECK(turns[2] == 8);
}

TEST_CASE("the quota is checked after every fourth completion, timed from a reading after the third", "[soft][turn]") {
  // Only the 6th handler is slow (30 ms, past the quota): the check after the 4th passes, the one after the
  // 8th stops the turn; the rest run 16 to a turn. A turn that checked once, or at every completion, differs.
  const std::vector<int> turns = turns_with_slow_handlers(40, [](int i) { return i == 6; });
  REQUIRE(turns.size() == 3);
  CHECK(turns[0] == 8);
  CHECK(turns[1] == 16);
  CHECK(turns[2] == 16);
}

TEST_CASE("the time of a turn's first three handlers is not measured: slow ones there do not end it", "[soft][turn]") {
  const std::vector<int> turns = turns_with_slow_handlers(32, [](int i) { return i <= 3; });
  REQUIRE(turns.size() == 2);
  CHECK(turns[0] == 16);
  CHECK(turns[1] == 16);
}

TEST_CASE("completion_queue::poll() is bounded by the count alone, whatever the quota", "[soft][turn]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64, bounds(16, std::chrono::microseconds(1)));
  int done = 0;
  for (int i = 0; i < 24; ++i)
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [&](cv::error_code ec, std::size_t) {
      CHECK(ec == cv::error_code{});
      ++done;
      busy_for(std::chrono::microseconds(100));
    });
  // Called outside the loop: the handlers are posted to it (never run inside poll()), 16 at most per call.
  CHECK(rig.cq.poll() == 16);
  CHECK(rig.cq.poll() == 8);
  run_all(io);
  CHECK(done == 24);
}

TEST_CASE("a negative turn_quota is refused with EINVAL, naming the option", "[soft][turn][options]") {
  asio::io_context io;
  cv::completion_queue_options o;
  o.turn_quota = std::chrono::microseconds(-1);
  try {
    soft_verbs::soft_pair rig(io, 8, 64, o);
    FAIL("a completion queue with a negative turn_quota was created");
  } catch (const cv::system_error& e) {
    CHECK(e.code().value() == EINVAL);
    CHECK_THAT(e.what(), Catch::Contains("turn_quota must not be negative"));
  }
}
