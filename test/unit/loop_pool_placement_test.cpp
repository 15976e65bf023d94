// loop_pool without a device: placement (round robin, least loaded), leases, the threads and their
// run/stop/join, the work guard, destruction with handlers queued; the executor_mismatch message.
#include <coverbs/error.hpp>
#include <coverbs/loop_pool.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>

#include <catch2/catch.hpp>

#include <future>
#include <set>
#include <thread>
#include <tuple>

namespace asio = boost::asio;
namespace cv = coverbs;

namespace {
/// Runs `f` on member `m` and returns its result (generous bound: the member must be running).
template <class F>
auto on(cv::loop_pool::member& m, F f) {
  auto fut = asio::post(m.get_executor(), asio::use_future(std::move(f)));
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  return fut.get();
}
}  // namespace

TEST_CASE("a pool has one loop per core by default, or as many as asked", "[loop_pool]") {
  cv::loop_pool by_default;
  CHECK(by_default.size() == std::max(1u, std::thread::hardware_concurrency()));
  cv::loop_pool three({.loops = 3});
  REQUIRE(three.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(three[i].index() == i);
    CHECK_FALSE(three[i].has_device());
    CHECK(three[i].load() == 0);
    CHECK(three[i].thread_id() == std::thread::id{});  // not running yet
  }
  CHECK(three[0].get_executor() != three[1].get_executor());
}

TEST_CASE("next() takes the members in turn", "[loop_pool]") {
  cv::loop_pool pool({.loops = 3});
  std::vector<std::size_t> order;
  for (int i = 0; i < 7; ++i) order.push_back(pool.next().index());
  CHECK(order == std::vector<std::size_t>{0, 1, 2, 0, 1, 2, 0});
}

TEST_CASE("least_loaded() picks the member with the fewest leases alive, ties in turn", "[loop_pool]") {
  cv::loop_pool pool({.loops = 3});
  std::vector<std::shared_ptr<void>> held;
  // Placing six in a row spreads them two per member.
  for (int i = 0; i < 6; ++i) held.push_back(pool.least_loaded().lease());
  for (std::size_t i = 0; i < 3; ++i) CHECK(pool[i].load() == 2);
  // Releasing two of member 1's (the leases at positions 1 and 4) makes it the choice, until it is level.
  held[1].reset();
  held[4].reset();
  CHECK(pool[1].load() == 0);
  CHECK(pool.least_loaded().index() == 1);
  held.push_back(pool[1].lease());
  CHECK(pool.least_loaded().index() == 1);
  // Copies of a lease are one placement.
  auto copy = held.back();
  CHECK(pool[1].load() == 1);
  held.clear();
  CHECK(pool[1].load() == 1);
  copy.reset();
  CHECK(pool[1].load() == 0);
}

TEST_CASE("a lease may outlive its pool", "[loop_pool]") {
  std::shared_ptr<void> lease;
  {
    cv::loop_pool pool({.loops = 1});
    lease = pool[0].lease();
  }
  lease.reset();  // no access to the destroyed member
}

TEST_CASE("each member runs its handlers on its own thread, kept alive while idle", "[loop_pool]") {
  cv::loop_pool pool({.loops = 3});
  pool.run();
  std::set<std::thread::id> ids;
  for (std::size_t i = 0; i < 3; ++i) {
    auto& m = pool[i];
    REQUIRE(m.thread_id() != std::thread::id{});
    ids.insert(m.thread_id());
    // Idle for a moment first: the work guard keeps the member's run() from returning.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(on(m, [] { return std::this_thread::get_id(); }) == m.thread_id());
    CHECK(on(m, [&] { return pool.current(); }) == &m);
  }
  CHECK(ids.size() == 3);
  CHECK_FALSE(ids.count(std::this_thread::get_id()));
  CHECK(pool.current() == nullptr);
  pool.run();  // already running: nothing changes
  for (std::size_t i = 0; i < 3; ++i) CHECK(ids.count(pool[i].thread_id()));
}

TEST_CASE("stop() and join() end the threads; run() starts them again", "[loop_pool]") {
  cv::loop_pool pool({.loops = 2});
  pool.run();
  pool.stop();
  pool.join();
  CHECK(pool[0].thread_id() == std::thread::id{});
  // Posted while stopped: runs once the pool runs again.
  auto fut = asio::post(pool[1].get_executor(), asio::use_future([] { return std::this_thread::get_id(); }));
  pool.run();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(fut.get() == pool[1].thread_id());
}

TEST_CASE("destroying a running pool stops it and destroys the handlers still queued", "[loop_pool]") {
  auto token = std::make_shared<int>(0);
  std::atomic<int> waiting{0};
  {
    cv::loop_pool pool({.loops = 2});
    pool.run();
    for (std::size_t i = 0; i < 2; ++i) {
      auto timer = std::make_shared<asio::steady_timer>(pool[i].get_executor(), std::chrono::hours(1));
      asio::post(pool[i].get_executor(), [timer, token, &waiting] {
        timer->async_wait([timer, token](const cv::error_code&) {});
        waiting.fetch_add(1);
      });
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (waiting.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(waiting.load() == 2);
    CHECK(token.use_count() == 3);
  }
  CHECK(token.use_count() == 1);  // the pending waits (and their timers) are gone with the pool
}

TEST_CASE("executor_mismatch says what was wrong and how to fix it", "[loop_pool][error]") {
  const cv::error_code ec = cv::errc::executor_mismatch;
  CHECK(ec.category() == cv::coverbs_category());
  CHECK(ec.message().find("another executor") != std::string::npos);
  CHECK(ec.message().find("connection_options::cq") != std::string::npos);
  CHECK(ec.message().find("connection_options()") != std::string::npos);
}

namespace {
/// Per-member state of a test: where it was made.
struct member_state {
  std::size_t index;
  std::thread::id made_on;
  std::shared_ptr<int> token;
};
}  // namespace

TEST_CASE("emplace_state makes one T per member on that member's thread, reached from handlers run there",
          "[loop_pool]") {
  auto token = std::make_shared<int>(0);
  {
    cv::loop_pool pool({.loops = 3});
    // Before run(): made once each member runs, before what is posted to it later.
    pool.emplace_state<member_state>([token](cv::loop_pool::member& m) {
      return member_state{m.index(), std::this_thread::get_id(), token};
    });
    pool.run();
    for (std::size_t i = 0; i < 3; ++i) {
      auto& m = pool[i];
      const auto [index, made_on, self] = on(m, [&] {
        auto& s = pool.current()->state<member_state>();
        return std::tuple(s.index, s.made_on, std::this_thread::get_id());
      });
      CHECK(index == i);
      CHECK(made_on == m.thread_id());
      CHECK(self == made_on);
    }
    CHECK(token.use_count() == 4);
    // A second emplace_state of the same type replaces each member's T.
    pool.emplace_state<member_state>([](cv::loop_pool::member& m) {
      return member_state{m.index() + 100, std::this_thread::get_id(), nullptr};
    });
    // Each member replaces its own on its thread: the old ones (holding the token) are gone once all three ran it.
    for (std::size_t i = 0; i < 3; ++i)
      CHECK(on(pool[i], [&] { return pool[i].state<member_state>().index; }) == i + 100);
    CHECK(token.use_count() == 1);
    pool.emplace_state<member_state>([token](cv::loop_pool::member& m) {
      return member_state{m.index(), std::this_thread::get_id(), token};
    });
    CHECK(on(pool[0], [&] { return pool[0].find_state<member_state>() != nullptr; }));
  }
  CHECK(token.use_count() == 1);  // destroyed with the pool
}

TEST_CASE("state<T>() of a type never emplaced says which member and what to call", "[loop_pool][error]") {
  cv::loop_pool pool({.loops = 2});
  CHECK(pool[1].find_state<member_state>() == nullptr);
  CHECK_THROWS_WITH(pool[1].state<member_state>(),
                    Catch::Contains("loop_pool member 1 has no state of type") &&
                        Catch::Contains("call loop_pool::emplace_state<T> first"));
}

TEST_CASE("pd() of a pool without a device says how to get one", "[loop_pool][error]") {
  cv::loop_pool pool({.loops = 1});
  CHECK_THROWS_WITH(pool.pd(), Catch::Contains("no device") && Catch::Contains("loop_pool(device&, options)"));
}
