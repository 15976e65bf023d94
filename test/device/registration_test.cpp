// Asynchronous registration, the cache and the pool on a real device (rxe0 in the Soft-RoCE guest).
#include <coverbs/registration_service.hpp>

#include <coverbs/buffer_pool.hpp>
#include <coverbs/registration_cache.hpp>

#include "fixtures/device_mr_count.hpp"
#include "fixtures/registration_support.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/unmapping.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <catch2/catch.hpp>

#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;
using cv::error_code;

namespace {

constexpr auto rw = cv::access::local_write | cv::access::remote_read | cv::access::remote_write;

using cv::test::mapping;
using cv::test::outcome;
using cv::test::inaccessible_pages;

/// The libibverbs registrar, able to hold a registration after the verb produced it (the request is then
/// "running" with a real region in hand).
class holding_registrar final : public cv::registrar {
public:
  ibv_mr* reg_mr(ibv_pd* pd, std::span<std::byte> b, cv::access r, error_code& ec) noexcept override {
    ibv_mr* mr = inner_->reg_mr(pd, b, r, ec);
    gate_.pass();
    return mr;
  }
  error_code dereg_mr(ibv_mr* mr) noexcept override { return inner_->dereg_mr(mr); }
  error_code rereg_mr(ibv_mr* mr, int f, ibv_pd* pd, std::span<std::byte> b, cv::access r,
                      bool& valid) noexcept override {
    return inner_->rereg_mr(mr, f, pd, b, r, valid);
  }
  void hold() { gate_.hold(); }
  void release() { gate_.release(); }
  void wait_produced(int n) { gate_.wait_arrived(n); }

private:
  std::shared_ptr<cv::registrar> inner_ = cv::verbs_registrar();
  cv::test::gate gate_;
};

struct fixture {
  cv::device dev = cv::device::open();
  cv::protection_domain pd{dev};
  asio::io_context io;
  long baseline = cv::test::device_mr_count(dev.name());
  fixture() { REQUIRE(baseline >= 0); }
  long mrs_now() const { return cv::test::device_mr_count(dev.name()); }
  cv::shared_region acquire(cv::registration_cache& cache, std::span<std::byte> s) {
    cv::shared_region out;
    cache.async_acquire(pd, s, rw, [&](error_code ec, cv::shared_region r) {
      REQUIRE_FALSE(ec);
      out = std::move(r);
    });
    io.restart();
    io.run();
    return out;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "a registration through the worker completes on the caller's executor", "[reg]") {
  cv::registration_service service(io.get_executor(), {.threads = 2});
  mapping m(16 << 20);
  std::thread::id ran_on;
  cv::memory_region mr;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        mr = co_await cv::reg_mr(service, pd, m.span(), rw);
        ran_on = std::this_thread::get_id();
      },
      asio::detached);
  io.run();
  CHECK(ran_on == std::this_thread::get_id());
  REQUIRE(mr);
  CHECK(mr.data() == m.p);
  CHECK(mr.size() == m.n);
  CHECK(mr.pd() == pd.native_handle());
  CHECK(mrs_now() == baseline + 1);
  mapping source(4096);
  std::memset(source.p, 0x5a, 4096);
  cv::memory_region source_mr(pd, source.span(), cv::access::local_write);
  test::loopback qp(dev, pd);
  CHECK(qp.write(cv::span_of(source_mr), cv::remote_key_of(mr).slice(8 << 20, 4096)) == IBV_WC_SUCCESS);
  CHECK(m.p[(8 << 20) + 4095] == std::byte{0x5a});
}

TEST_CASE_METHOD(fixture, "a registration cancelled before it runs leaves nothing registered", "[reg][cancel]") {
  auto verbs = std::make_shared<holding_registrar>();
  cv::registration_service service(io.get_executor(), {.threads = 1}, verbs);
  mapping m(1 << 20);
  verbs->hold();
  outcome running, queued;
  cv::reg_mr(service, pd, m.span(0, 4096), rw, running.handler());
  verbs->wait_produced(1);
  asio::cancellation_signal signal;
  cv::reg_mr(service, pd, m.span(8192, 4096), rw, asio::bind_cancellation_slot(signal.slot(), queued.handler()));
  signal.emit(asio::cancellation_type::terminal);
  io.poll();
  REQUIRE(queued.ec);
  CHECK(*queued.ec == asio::error::operation_aborted);
  CHECK_FALSE(running.ec);
  verbs->release();
  io.run();
  CHECK_FALSE(*running.ec);
  running.region = {};
  CHECK(mrs_now() == baseline);
  CHECK(service.stats().registered == 1);
}

TEST_CASE_METHOD(fixture, "a registration cancelled while running deregisters what the worker produced",
                 "[reg][cancel]") {
  auto verbs = std::make_shared<holding_registrar>();
  cv::registration_service service(io.get_executor(), {.threads = 1}, verbs);
  mapping m(64 << 20);
  verbs->hold();
  asio::cancellation_signal signal;
  outcome got;
  cv::reg_mr(service, pd, m.span(), rw, asio::bind_cancellation_slot(signal.slot(), got.handler()));
  verbs->wait_produced(1);
  CHECK(mrs_now() == baseline + 1); // the worker holds a real region
  signal.emit(asio::cancellation_type::terminal);
  verbs->release();
  io.run();
  REQUIRE(got.ec);
  CHECK(*got.ec == asio::error::operation_aborted);
  CHECK_FALSE(got.region);
  CHECK(mrs_now() == baseline);
  const auto s = service.stats();
  CHECK(s.registered == 1);
  CHECK(s.deregistered == 1);
  CHECK(s.held() == 0);
}

TEST_CASE_METHOD(fixture, "shutdown with requests in flight aborts them all and leaves nothing registered",
                 "[reg][shutdown]") {
  auto verbs = std::make_shared<holding_registrar>();
  cv::registration_service service(io.get_executor(), {.threads = 1}, verbs);
  mapping m(1 << 20);
  verbs->hold();
  outcome got[3];
  for (int i = 0; i < 3; ++i)
    cv::reg_mr(service, pd, m.span(i * 65536, 65536), rw, got[i].handler());
  verbs->wait_produced(1);
  std::thread stopper([&] { service.shutdown(); });
  while (service.stats().cancelled < 2)
    std::this_thread::yield();
  verbs->release();
  stopper.join();
  io.run();
  for (auto& g : got) {
    REQUIRE(g.ec);
    CHECK(*g.ec == asio::error::operation_aborted);
  }
  CHECK(mrs_now() == baseline);
  CHECK(service.stats().held() == 0);
}

namespace {
/// Drops CAP_IPC_LOCK from the calling thread's effective set (root pins without limit otherwise).
bool drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}
} // namespace

TEST_CASE_METHOD(fixture, "ENOMEM under a tiny locked-memory limit names RLIMIT_MEMLOCK and its value",
                 "[reg][errors]") {
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &saved) == 0);
  mapping m(8 << 20);
  error_code ec;
  std::string message;
  cv::registration_stats stats;
  // Capabilities are per thread, and workers inherit their creator's: make the service on a thread without
  // CAP_IPC_LOCK, so the kernel applies RLIMIT_MEMLOCK to its registrations.
  bool dropped = false, limited = false;
  std::thread t([&] {
    dropped = drop_ipc_lock();
    rlimit tiny = saved;
    tiny.rlim_cur = 64 << 10;
    limited = ::setrlimit(RLIMIT_MEMLOCK, &tiny) == 0;
    if (!dropped || !limited) return;
    asio::io_context local;
    cv::registration_options o;
    o.retry.attempts = 3;
    o.retry.first_backoff = std::chrono::microseconds(100);
    cv::registration_service service(local.get_executor(), o);
    cv::reg_mr(service, pd, m.span(), rw, [&](error_code e, cv::memory_region) { ec = e; });
    local.run();
    stats = service.stats();
    message = ec.message();
  });
  t.join();
  REQUIRE(::setrlimit(RLIMIT_MEMLOCK, &saved) == 0);
  REQUIRE(dropped);
  REQUIRE(limited);
  INFO(message);
  CHECK(ec == cv::errc::memlock_exhausted);
  CHECK(ec == boost::system::errc::not_enough_memory);
  CHECK(message.find("RLIMIT_MEMLOCK is 64 KiB") != std::string::npos);
  CHECK(stats.retries == 2);
  CHECK(mrs_now() == baseline);
}

TEST_CASE_METHOD(fixture, "EFAULT and EINVAL from the device name the argument at fault", "[reg][errors]") {
  cv::registration_service service(io.get_executor());
  inaccessible_pages hole(8192);  // held, so no other mapping can appear there meanwhile
  outcome unmapped, rights;
  cv::reg_mr(service, pd, hole.span(), cv::access::local_write, unmapped.handler());
  mapping m(4096);
  cv::reg_mr(service, pd, m.span(), cv::access::remote_write, rights.handler());
  io.run();
  CHECK(*unmapped.ec == cv::errc::buffer_not_mapped);
  CHECK(*rights.ec == cv::errc::rights_need_local_write);
  CHECK(mrs_now() == baseline);
}

TEST_CASE_METHOD(fixture, "rereg on rxe falls back to register + deregister and the new keys work for RDMA",
                 "[reg][rereg]") {
  cv::registration_service service(io.get_executor());
  mapping first(1 << 20), second(1 << 20);
  outcome got;
  cv::reg_mr(service, pd, first.span(), cv::access::local_write, got.handler());
  io.run();
  REQUIRE_FALSE(*got.ec);
  const auto old_rkey = got.region.rkey();
  std::optional<cv::rereg_result> result;
  error_code ec;
  cv::rereg(service, std::move(got.region), {.buffer = second.span(), .rights = rw},
            [&](error_code e, cv::rereg_result r) { ec = e, result = std::move(r); });
  io.restart();
  io.run();
  REQUIRE_FALSE(ec);
  CHECK(result->method == (dev.caps().rereg_mr ? cv::rereg_method::in_place : cv::rereg_method::reregistered));
  CHECK(result->region.data() == second.p);
  CHECK(result->region.rights() == rw);
  CHECK(result->region.rkey() != old_rkey);
  CHECK(mrs_now() == baseline + 1);
  mapping source(4096);
  std::memset(source.p, 0x77, 4096);
  cv::memory_region source_mr(pd, source.span(), cv::access::local_write);
  test::loopback qp(dev, pd);
  CHECK(qp.write(cv::span_of(source_mr), cv::remote_key_of(result->region).slice(4096, 4096)) == IBV_WC_SUCCESS);
  CHECK(second.p[4096] == std::byte{0x77});
  CHECK(second.p[8191] == std::byte{0x77});
}

TEST_CASE_METHOD(fixture, "concurrent overlapping shared requests make one registration", "[reg][batch]") {
  cv::registration_service service(io.get_executor(), {.threads = 2});
  mapping m(8 << 20);
  std::vector<cv::shared_region> got;
  for (int i = 0; i < 8; ++i)
    cv::reg_shared(service, pd, m.span(i * (512 << 10), 1 << 20), rw, [&](error_code ec, cv::shared_region r) {
      CHECK_FALSE(ec);
      got.push_back(std::move(r));
    });
  io.run();
  REQUIRE(got.size() == 8);
  CHECK(service.stats().registered == 1);
  CHECK(service.stats().merged == 7);
  CHECK(mrs_now() == baseline + 1);
  for (auto& r : got)
    CHECK(r.shares_registration_with(got[0]));
  CHECK(got[0].registration().size() == (4 << 20) + (512 << 10));
  got.clear();
  CHECK(mrs_now() == baseline);
}

TEST_CASE_METHOD(fixture, "a bad neighbour in the same turn fails alone: the good request is registered",
                 "[reg][batch]") {
  // Two adjacent pages; the second refuses write access. Requested in one turn with the same rights, they
  // would merge; the union fails with EFAULT and is retried request by request.
  const int protection = GENERATE(PROT_READ, PROT_NONE);
  INFO((protection == PROT_READ ? "PROT_READ" : "PROT_NONE"));
  cv::registration_service service(io.get_executor());
  mapping m(8192);
  REQUIRE(::mprotect(m.p + 4096, 4096, protection) == 0);
  error_code ec_a, ec_b;
  cv::shared_region a, b;
  int done = 0;
  cv::reg_shared(service, pd, m.span(0, 4096), rw, [&](error_code e, cv::shared_region r) {
    ec_a = e, a = std::move(r), ++done;
  });
  cv::reg_shared(service, pd, m.span(4096, 4096), rw, [&](error_code e, cv::shared_region r) {
    ec_b = e, b = std::move(r), ++done;
  });
  io.run();
  REQUIRE(done == 2);
  CHECK_FALSE(ec_a);
  CHECK(ec_b == cv::errc::buffer_not_mapped);
  CHECK(ec_b == boost::system::errc::bad_address);
  CHECK(ec_b.message().find("read-only") != std::string::npos);
  CHECK_FALSE(b);
  REQUIRE(a);
  CHECK(a.registration().data() == m.p);
  CHECK(a.registration().size() == 4096);
  CHECK(service.stats().merges_split == 1);
  CHECK(mrs_now() == baseline + 1);
  { // the good registration works for RDMA
    mapping source(4096);
    std::memset(source.p, 0x6b, 4096);
    cv::memory_region source_mr(pd, source.span(), cv::access::local_write);
    test::loopback qp(dev, pd);
    CHECK(qp.write(cv::span_of(source_mr), a.remote()) == IBV_WC_SUCCESS);
    CHECK(m.p[4095] == std::byte{0x6b});
  }
  a = {};
  CHECK(mrs_now() == baseline);
  REQUIRE(::mprotect(m.p + 4096, 4096, PROT_READ | PROT_WRITE) == 0);
}

TEST_CASE_METHOD(fixture, "unmapping a bad neighbour acquired in the same turn leaves the good cache entry valid",
                 "[cache][monitor]") {
  cv::registration_service service(io.get_executor());
  cv::registration_cache cache(service);
  INFO(cache.monitor_status().message());
  REQUIRE_FALSE(cache.monitor_status());
  auto* p = static_cast<std::byte*>(::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(p != MAP_FAILED);
  std::memset(p, 0, 8192);
  REQUIRE(::mprotect(p + 4096, 4096, PROT_READ) == 0);
  error_code ec_a, ec_b;
  cv::shared_region a, b;
  cache.async_acquire(pd, {p, 4096}, rw, [&](error_code e, cv::shared_region r) { ec_a = e, a = std::move(r); });
  cache.async_acquire(pd, {p + 4096, 4096}, rw, [&](error_code e, cv::shared_region r) { ec_b = e, b = std::move(r); });
  io.run();
  CHECK_FALSE(ec_a);
  CHECK(ec_b == cv::errc::buffer_not_mapped);
  REQUIRE(a);
  REQUIRE(::munmap(p + 4096, 4096) == 0); // B goes away
  auto hit = cache.lookup(pd, {p, 4096}, rw); // applies the monitor's events
  REQUIRE(hit);
  CHECK(hit->shares_registration_with(a));
  CHECK(a.valid());
  CHECK(cache.stats().invalidations == 0);
  hit.reset();
  a = {};
  cache.clear();
  CHECK(mrs_now() == baseline);
  ::munmap(p, 4096);
}

TEST_CASE_METHOD(fixture, "100 registrations of 64 MiB cancelled at random moments: queued and running ones abort",
                 "[reg][cancel]") {
  // One worker, 100 asynchronous registrations of the same 64 MiB, each cancelled at a random moment within
  // the time all of them take: its request is then queued, running or done. Prints the figures.
  constexpr int n = 100;
  constexpr std::size_t size = 64 << 20;
  cv::registration_service service(io.get_executor(), {.threads = 1});
  mapping m(size);
  // How long one registration takes here (the guest is slow): spread the cancellations over n of them.
  const auto t0 = std::chrono::steady_clock::now();
  { cv::memory_region probe(pd, m.span(), rw); }
  const auto one = std::chrono::steady_clock::now() - t0;
  std::vector<std::optional<error_code>> ec(n);
  std::vector<asio::cancellation_signal> signals(n);
  std::vector<std::unique_ptr<asio::steady_timer>> timers;
  std::minstd_rand random(11);
  std::uniform_int_distribution<long long> moment(0, std::chrono::duration_cast<std::chrono::microseconds>(one).count() * n);
  for (int i = 0; i < n; ++i) {
    cv::reg_mr(service, pd, m.span(), rw,
               asio::bind_cancellation_slot(signals[i].slot(), [&, i](error_code e, cv::memory_region) { ec[i] = e; }));
    auto& t = *timers.emplace_back(std::make_unique<asio::steady_timer>(io));
    t.expires_after(std::chrono::microseconds(moment(random)));
    t.async_wait([&, i](error_code) { signals[i].emit(asio::cancellation_type::terminal); });
  }
  const auto start = std::chrono::steady_clock::now();
  io.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int aborted = 0, completed = 0;
  for (auto& e : ec) {
    REQUIRE(e);
    aborted += *e == asio::error::operation_aborted;
    completed += !*e;
  }
  const auto s = service.stats();
  const double one_ms = std::chrono::duration<double, std::milli>(one).count();
  WARN("100 x 64 MiB, one registration " << one_ms << " ms, run "
                                         << seconds << " s: cancelled while queued " << s.cancels_queued
                                         << ", while running " << s.cancels_running << ", after the verb "
                                         << s.cancels_late << ", after the handler "
                                         << n - s.cancels_queued - s.cancels_running - s.cancels_late
                                         << "; operation_aborted " << aborted << ", completed " << completed);
  CHECK(aborted + completed == n);
  CHECK(static_cast<std::uint64_t>(aborted) == s.cancels_queued + s.cancels_running);
  CHECK(s.cancels_queued > 0);
  CHECK(s.registered == n - s.cancels_queued); // one per request that reached the verb
  CHECK(s.held() == 0);
  CHECK(mrs_now() == baseline);
}

TEST_CASE_METHOD(fixture, "the cache hits on a contained sub-range and evicts under its limits", "[cache]") {
  cv::registration_service service(io.get_executor());
  cv::registration_cache cache(service, {.max_entries = 2, .max_bytes_pinned = 64 << 20, .monitor = true});
  mapping m(16 << 20);
  auto whole = acquire(cache, m.span(0, 4 << 20));
  auto part = cache.lookup(pd, m.span(1 << 20, 4096), rw);
  REQUIRE(part);
  CHECK(part->lkey() == whole.lkey());
  whole = {};
  part.reset();
  acquire(cache, m.span(8 << 20, 1 << 20));
  acquire(cache, m.span(12 << 20, 1 << 20)); // a third entry: the oldest unused goes
  const auto s = cache.stats();
  CHECK(s.entries == 2);
  CHECK(s.evictions == 1);
  CHECK(mrs_now() == baseline + 2);
  cache.clear();
  CHECK(mrs_now() == baseline);
}

TEST_CASE_METHOD(fixture,
                 "unmapped cached memory is not handed out again and the next request registers the "
                 "new memory",
                 "[cache][monitor]") {
  cv::registration_service service(io.get_executor());
  cv::registration_cache cache(service);
  INFO(cache.monitor_status().message());
  REQUIRE_FALSE(cache.monitor_status());
  // munmap of an unused entry: deregistered, not hit again
  {
    auto* p =
        static_cast<std::byte*>(::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
    acquire(cache, {p, 1 << 20});
    CHECK(mrs_now() == baseline + 1);
    REQUIRE(::munmap(p, 1 << 20) == 0);
    CHECK_FALSE(cache.lookup(pd, {p, 4096}, rw));
    CHECK(mrs_now() == baseline);
  }
  // mmap(MAP_FIXED) over an entry in use: the handle turns invalid, the next request registers the new pages
  mapping m(1 << 20);
  auto old = acquire(cache, m.span());
  void* again = ::mmap(m.p, m.n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  REQUIRE(again == m.p);
  CHECK_FALSE(cache.lookup(pd, m.span(0, 4096), rw));
  CHECK_FALSE(old.valid());
  auto fresh = acquire(cache, m.span());
  CHECK(fresh.valid());
  CHECK_FALSE(fresh.shares_registration_with(old));
  mapping source(4096);
  std::memset(source.p, 0x33, 4096);
  cv::memory_region source_mr(pd, source.span(), cv::access::local_write);
  test::loopback qp(dev, pd);
  CHECK(qp.write(cv::span_of(source_mr), fresh.remote().slice(0, 4096)) == IBV_WC_SUCCESS);
  CHECK(m.p[4095] == std::byte{0x33}); // the data lands in the memory the process sees now
  old = {};
  CHECK(cache.stats().invalidations == 2);
}

TEST_CASE_METHOD(fixture, "a held cache handle is invalid as soon as the call that unmaps or replaces its memory "
                          "returns, and its keys still reach the old pages",
                 "[cache][monitor]") {
  cv::registration_service service(io.get_executor());
  cv::registration_cache cache(service);
  INFO(cache.monitor_status().message());
  REQUIRE_FALSE(cache.monitor_status());
  for (const cv::test::unmapping u : cv::test::every_unmapping) {
    INFO(cv::test::name(u));
    {
      cv::test::four_pages m;
      const auto held = acquire(cache, {m.p, m.n});
      REQUIRE(held.valid());
      REQUIRE(cv::test::take_away(u, m.p, m.n, m.to.p));
      CHECK_FALSE(held.valid());        // no other cache call in between
      CHECK(mrs_now() == baseline + 1); // still registered: the handle holds it
      if (u == cv::test::unmapping::map_fixed) {
        // What valid() warns of: a write through the old keys succeeds into pages the process gave back.
        mapping source(4096);
        std::memset(source.p, 0x5a, 4096);
        cv::memory_region source_mr(pd, source.span(), cv::access::local_write);
        test::loopback qp(dev, pd);
        CHECK(qp.write(cv::span_of(source_mr), held.remote().slice(0, 4096)) == IBV_WC_SUCCESS);
        CHECK(m.p[0] == std::byte{0}); // the process's new page never sees it
      }
    }
    CHECK(mrs_now() == baseline); // the last handle went: deregistered
  }
  CHECK(cache.stats().invalidations == std::size(cv::test::every_unmapping));
}

TEST_CASE_METHOD(fixture, "a thread polling a cache handle's valid() never sees true after another thread unmapped",
                 "[cache][monitor][race]") {
  cv::registration_service service(io.get_executor());
  cv::registration_cache cache(service);
  INFO(cache.monitor_status().message());
  REQUIRE_FALSE(cache.monitor_status());
  constexpr int rounds = 40;
  const auto r = cv::test::race_valid_against_unmapping(rounds, [&](std::span<std::byte> bytes) {
    auto held = acquire(cache, bytes);
    REQUIRE(held.valid());
    return held;
  });
  CHECK(r.failed_calls == 0);
  CHECK(r.polls_after == rounds);
  CHECK(r.stale == 0);
  CHECK(cache.stats().invalidations == rounds);
}

TEST_CASE_METHOD(fixture, "pool buffers carry working keys for RDMA write and read", "[pool]") {
  cv::registration_service service(io.get_executor());
  cv::pool_options o;
  o.size_classes = {4096, 65536};
  o.arena_size = 2 << 20;
  cv::buffer_pool pool(service, pd, o);
  auto a = pool.try_allocate(4096);
  auto b = pool.try_allocate(65536);
  auto c = pool.try_allocate(4096);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  std::memset(a->data(), 0x42, 4096);
  test::loopback qp(dev, pd);
  CHECK(qp.write(a->span(), b->remote().slice(1000, 4096)) == IBV_WC_SUCCESS);
  CHECK(b->data()[1000] == std::byte{0x42});
  CHECK(b->data()[5095] == std::byte{0x42});
  CHECK(qp.read(c->span(), b->remote().slice(1000, 4096)) == IBV_WC_SUCCESS);
  CHECK(std::memcmp(a->data(), c->data(), 4096) == 0);
  INFO("arenas on MAP_HUGETLB: " << pool.stats().huge_tlb_arenas);
  CHECK(mrs_now() == baseline + 2);
}

TEST_CASE_METHOD(fixture, "the next arena registers in the background before the pool runs dry", "[pool]") {
  cv::registration_service service(io.get_executor());
  cv::pool_options o;
  o.size_classes = {256 << 10};
  o.arena_size = 2 << 20; // 8 blocks; grow when fewer than 4 are free
  o.low_watermark = 0.5;
  cv::buffer_pool pool(service, pd, o);
  std::vector<cv::registered_buffer> held;
  for (int i = 0; i < 5; ++i) {
    auto b = pool.try_allocate(256 << 10);
    REQUIRE(b);
    held.push_back(std::move(*b));
  }
  while (pool.stats().arenas < 2)
    std::this_thread::yield();
  CHECK(pool.stats().background_arenas == 1);
  for (int i = 0; i < 8; ++i) {
    auto b = pool.try_allocate(256 << 10);
    REQUIRE(b);
    held.push_back(std::move(*b));
  }
  CHECK(pool.stats().exhausted == 0);
  CHECK(mrs_now() >= baseline + 2);
}

TEST_CASE_METHOD(fixture, "reg_mr without a service completes on the caller's executor, never inline nor on a worker",
                 "[reg][executor]") {
  // The default service has no loop of its own: the executor comes from the call or from the handler.
  mapping m(3 * 4096);
  outcome by_executor, by_context, bound;
  cv::reg_mr(io.get_executor(), pd, m.span(0, 4096), rw, by_executor.handler());
  cv::reg_mr(io, pd, m.span(4096, 4096), rw, by_context.handler());
  cv::reg_mr(pd, m.span(8192, 4096), rw, asio::bind_executor(io, bound.handler()));
  CHECK_FALSE(by_executor.ec); // never inside the initiating call
  CHECK_FALSE(by_context.ec);
  CHECK_FALSE(bound.ec);
  // The handlers run only inside run(): a worker finishing first leaves them queued on `io`.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(by_executor.ec);
  CHECK_FALSE(bound.ec);
  io.run();
  for (outcome* o : {&by_executor, &by_context, &bound}) {
    REQUIRE(o->ec);
    CHECK_FALSE(*o->ec);
    CHECK(o->thread == std::this_thread::get_id());
    CHECK(o->region);
  }
  // A coroutine's use_awaitable brings its executor: no executor argument needed.
  std::optional<std::thread::id> awaited;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        cv::memory_region r = co_await cv::reg_mr(pd, m.span(0, 4096), rw);
        CHECK(r);
        awaited = std::this_thread::get_id();
      },
      asio::detached);
  io.restart();
  io.run();
  REQUIRE(awaited);
  CHECK(*awaited == std::this_thread::get_id());
}

TEST_CASE_METHOD(fixture, "read-only memory registered with mw_bind is refused naming mw_bind, not a write right",
                 "[reg][errors]") {
  // The kernel pins pages writable for mw_bind (a window may later grant remote write): EFAULT on read-only
  // pages, although the rights ask for no write.
  mapping m(8192);
  REQUIRE(::mprotect(m.p, 8192, PROT_READ) == 0);
  const auto rights = cv::access::remote_read | cv::access::mw_bind;
  cv::registration_service service(io.get_executor());
  outcome got;
  cv::reg_mr(service, pd, m.span(), rights, got.handler());
  io.run();
  REQUIRE(got.ec);
  INFO(got.ec->message());
  CHECK(*got.ec == cv::errc::mw_bind_needs_writable_memory);
  CHECK(*got.ec == boost::system::errc::bad_address);
  CHECK(got.ec->message().find("mw_bind") != std::string::npos);
  CHECK(got.ec->message().find("read-only") != std::string::npos);
  { // the synchronous registration says the same
    error_code ec;
    cv::memory_region r(pd, m.span(), rights, ec);
    CHECK(ec == cv::errc::mw_bind_needs_writable_memory);
    CHECK_FALSE(r);
    try {
      cv::memory_region thrown(pd, m.span(), rights);
      FAIL("read-only memory was registered with mw_bind");
    } catch (const cv::system_error& e) {
      CHECK(e.code() == cv::errc::mw_bind_needs_writable_memory);
    }
  }
  // The way out the message gives: read-only memory with remote_read alone.
  cv::memory_region readable(pd, m.span(), cv::access::remote_read);
  CHECK(readable);
  // Unmapped memory with the same rights is "not mapped", not "read-only".
  mapping gone(4096);
  const auto hole = gone.span();
  gone.unmap();
  error_code unmapped;
  cv::memory_region none(pd, hole, rights, unmapped);
  CHECK(unmapped == cv::errc::buffer_not_mapped);
  REQUIRE(::mprotect(m.p, 8192, PROT_READ | PROT_WRITE) == 0);
}
