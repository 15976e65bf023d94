// buffer_pool against a fake registrar: size classes, keys, return on destruction, background arenas,
// limits and option checks.
#include <coverbs/buffer_pool.hpp>

#include "fixtures/fake_registrar.hpp"

#include <boost/asio/io_context.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <thread>

namespace cv = coverbs;
namespace asio = boost::asio;
using cv::error_code;

namespace {
struct fixture {
  std::shared_ptr<cv::test::fake_registrar> fake = std::make_shared<cv::test::fake_registrar>();
  asio::io_context io;
  cv::protection_domain pd;
  cv::registration_service service{io.get_executor(), {}, fake};
  static cv::pool_options small() {
    cv::pool_options o;
    o.size_classes = {4096, 512 << 10};
    o.arena_size = 2 << 20;
    o.low_watermark = 0.5;
    o.max_arenas = 4;
    o.huge_pages = false;
    return o;
  }
};
} // namespace

TEST_CASE_METHOD(fixture, "a buffer comes from the smallest class that fits and carries its arena's keys", "[pool]") {
  cv::buffer_pool pool(service, pd, small());
  CHECK(pool.stats().arenas == 2); // one per class
  CHECK(fake->live() == 2);
  auto small_buffer = pool.try_allocate(100);
  REQUIRE(small_buffer);
  CHECK(small_buffer->size() == 100);
  CHECK(reinterpret_cast<std::uintptr_t>(small_buffer->data()) % 4096 == 0);
  CHECK(small_buffer->lkey() != 0);
  CHECK(small_buffer->span().lkey == small_buffer->lkey());
  CHECK(small_buffer->remote().rkey == small_buffer->rkey());
  auto big = pool.try_allocate(300000);
  REQUIRE(big);
  CHECK(big->lkey() != small_buffer->lkey()); // another arena, another region
  CHECK(reinterpret_cast<std::uintptr_t>(big->data()) % (512 << 10) == 0);
  CHECK_FALSE(pool.try_allocate((512 << 10) + 1)); // bigger than every class
  CHECK(pool.stats().in_use == 2);
  small_buffer.reset();
  CHECK(pool.stats().in_use == 1);
}

TEST_CASE_METHOD(fixture, "every block of an arena is handed out once until it comes back", "[pool]") {
  auto o = small();
  o.size_classes = {1 << 20};
  o.max_arenas = 1;
  cv::buffer_pool pool(service, pd, o);
  auto a = pool.try_allocate(1 << 20);
  auto b = pool.try_allocate(1 << 20);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->data() != b->data());
  CHECK_FALSE(pool.try_allocate(1));
  CHECK(pool.stats().exhausted == 1);
  std::byte* const freed = a->data();
  a.reset();
  auto c = pool.try_allocate(10);
  REQUIRE(c);
  CHECK(c->data() == freed);
}

TEST_CASE_METHOD(fixture, "below the watermark the next arena registers in the background before exhaustion",
                 "[pool][prefetch]") {
  cv::buffer_pool pool(service, pd, small()); // 4 blocks of 512 KiB per arena; grow below 2 free
  std::vector<cv::registered_buffer> held;
  for (int i = 0; i < 3; ++i) {
    auto b = pool.try_allocate(512 << 10);
    REQUIRE(b);
    held.push_back(std::move(*b));
  }
  while (pool.stats().arenas < 3) // registered on a worker, installed from the system executor
    std::this_thread::yield();
  CHECK(pool.stats().background_arenas == 1);
  for (int i = 0; i < 4; ++i) {
    auto b = pool.try_allocate(512 << 10);
    REQUIRE(b);
    held.push_back(std::move(*b));
  }
  CHECK(pool.stats().exhausted == 0);
  std::set<std::byte*> distinct;
  for (auto& b : held)
    distinct.insert(b.data());
  CHECK(distinct.size() == held.size());
}

TEST_CASE_METHOD(fixture, "async_allocate registers an arena when the class is empty, and stops at max_arenas",
                 "[pool]") {
  auto o = small();
  o.size_classes = {2 << 20};
  o.low_watermark = 0; // no background growth
  o.max_arenas = 2;
  cv::buffer_pool pool(service, pd, o);
  auto first = pool.try_allocate(1);
  REQUIRE(first);
  error_code ec;
  cv::registered_buffer second, third;
  pool.async_allocate(2 << 20, [&](error_code e, cv::registered_buffer b) { ec = e, second = std::move(b); });
  io.run();
  CHECK_FALSE(ec);
  CHECK(second);
  CHECK(pool.stats().arenas == 2);
  pool.async_allocate(1, [&](error_code e, cv::registered_buffer b) { ec = e, third = std::move(b); });
  io.restart();
  io.run();
  CHECK(ec == cv::errc::pool_exhausted);
  CHECK_FALSE(third);
}

TEST_CASE_METHOD(fixture, "buffers outlive the pool object; the arenas go with the last one", "[pool]") {
  std::optional<cv::registered_buffer> kept;
  {
    cv::buffer_pool pool(service, pd, small());
    kept = pool.try_allocate(10);
  }
  CHECK(fake->live() == 2);
  kept.reset();
  CHECK(fake->live() == 0);
  CHECK(service.stats().held() == 0);
}

TEST_CASE_METHOD(fixture, "bad pool options are refused with a message that says which", "[pool]") {
  auto o = small();
  o.arena_size = 3 << 20;
  CHECK_THROWS_WITH(cv::buffer_pool(service, pd, o), Catch::Contains("multiple of 2 MiB"));
  o = small();
  o.size_classes = {8192, 4096};
  CHECK_THROWS_WITH(cv::buffer_pool(service, pd, o), Catch::Contains("ascend"));
  o = small();
  o.size_classes = {4 << 20};
  CHECK_THROWS_WITH(cv::buffer_pool(service, pd, o), Catch::Contains("arena_size"));
  CHECK(fake->live() == 0);
}
