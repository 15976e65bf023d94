// registration_service against a fake registrar: the state machine, cancellation, shutdown, retries, error
// classification, rereg fallback and batch merging, without a device.
#include <coverbs/registration_service.hpp>

#include "fixtures/fake_registrar.hpp"

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;
using cv::error_code;

namespace {

struct fixture {
  std::shared_ptr<cv::test::fake_registrar> fake = std::make_shared<cv::test::fake_registrar>();
  asio::io_context io;
  cv::protection_domain pd; // the fake never looks at it
  std::vector<std::byte> memory = std::vector<std::byte>(1 << 16);
  std::span<std::byte> bytes(std::size_t offset, std::size_t n) { return {memory.data() + offset, n}; }
  cv::registration_options options(std::size_t threads = 1) {
    cv::registration_options o;
    o.threads = threads;
    o.retry.first_backoff = std::chrono::microseconds(1);
    return o;
  }
};

using cv::test::outcome;

/// Counts the memory allocated through it that is still live.
template <typename T>
struct live_allocator {
  using value_type = T;
  int* live;
  explicit live_allocator(int* l) : live(l) {}
  template <typename U>
  live_allocator(const live_allocator<U>& o) : live(o.live) {}
  T* allocate(std::size_t n) {
    ++*live;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) {
    --*live;
    std::allocator<T>().deallocate(p, n);
  }
  template <typename U>
  bool operator==(const live_allocator<U>& o) const {
    return live == o.live;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "a registration completes on the caller's executor, never inside the initiating call",
                 "[registration]") {
  cv::registration_service service(io.get_executor(), options(2), fake);
  outcome got;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, got.handler());
  CHECK_FALSE(got.ec);
  io.run();
  REQUIRE(got.ec);
  CHECK_FALSE(*got.ec);
  CHECK(got.thread == std::this_thread::get_id());
  CHECK(got.region.data() == memory.data());
  CHECK(got.region.size() == 4096);
  CHECK(got.region.rights() == cv::access::local_write);
  CHECK(fake->live() == 1);
  const auto s = service.stats();
  CHECK(s.registered == 1);
  CHECK(s.handed_over == 1);
  CHECK(s.held() == 0);
  CHECK(s.completed == 1);
  fake->drop(got.region);
}

TEST_CASE_METHOD(fixture, "co_await reg_mr yields the region", "[registration]") {
  cv::registration_service service(io.get_executor(), options(), fake);
  std::uint32_t lkey = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        cv::memory_region mr = co_await cv::reg_mr(service, pd, bytes(0, 8192), cv::access::local_write);
        lkey = mr.lkey();
        fake->drop(mr);
      },
      asio::detached);
  io.run();
  CHECK(lkey != 0);
  CHECK(fake->live() == 0);
}

TEST_CASE_METHOD(fixture, "a request cancelled before it runs completes with operation_aborted at once",
                 "[registration][cancel]") {
  cv::registration_service service(io.get_executor(), options(1), fake);
  fake->hold(); // the first request occupies the only worker
  outcome first, second;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, first.handler());
  fake->wait_started(1);
  asio::cancellation_signal signal;
  cv::reg_mr(service, pd, bytes(8192, 4096), cv::access::local_write,
             asio::bind_cancellation_slot(signal.slot(), second.handler()));
  signal.emit(asio::cancellation_type::terminal);
  CHECK_FALSE(second.ec); // not inside emit either
  io.poll();
  REQUIRE(second.ec);
  CHECK(*second.ec == asio::error::operation_aborted);
  CHECK_FALSE(second.region);
  CHECK_FALSE(first.ec); // still running
  fake->release();
  io.run();
  CHECK_FALSE(*first.ec);
  CHECK(fake->reg_calls() == 1); // the cancelled one never reached the verb
  fake->drop(first.region);
  CHECK(service.stats().cancelled == 1);
}

TEST_CASE_METHOD(fixture, "queued requests cancelled while every worker is busy abort at once and never reach the verb",
                 "[registration][cancel]") {
  cv::registration_service service(io.get_executor(), options(2), fake);
  fake->hold(); // both workers stay inside the verb: everything else queues
  outcome busy[2];
  for (int i = 0; i < 2; ++i)
    cv::reg_mr(service, pd, bytes(i * 4096, 4096), cv::access::local_write, busy[i].handler());
  fake->wait_started(2);
  constexpr int queued = 24;
  asio::cancellation_signal signals[queued];
  std::vector<std::optional<error_code>> ec(queued);
  std::vector<std::thread::id> ran_on(queued);
  for (int i = 0; i < queued; ++i) {
    const auto range = bytes(8192 + i * 2048, 2048);
    if (i % 2) { // half through callbacks, half through coroutines
      cv::reg_mr(service, pd, range, cv::access::local_write,
                 asio::bind_cancellation_slot(signals[i].slot(), [&, i](error_code e, cv::memory_region r) {
                   ec[i] = e, ran_on[i] = std::this_thread::get_id();
                   CHECK_FALSE(r);
                 }));
    } else {
      asio::co_spawn(
          io,
          [&, i, range]() -> asio::awaitable<void> {
            try {
              cv::memory_region r = co_await cv::reg_mr(service, pd, range, cv::access::local_write);
              ec[i] = error_code{};
            } catch (const boost::system::system_error& e) {
              ec[i] = e.code();
            }
            ran_on[i] = std::this_thread::get_id();
          },
          asio::bind_cancellation_slot(signals[i].slot(), asio::detached));
    }
  }
  io.poll(); // the coroutines reach their co_await
  for (auto& s : signals)
    s.emit(asio::cancellation_type::terminal);
  io.poll();
  for (int i = 0; i < queued; ++i) {
    INFO("request " << i);
    REQUIRE(ec[i]);
    CHECK(*ec[i] == asio::error::operation_aborted);
    CHECK(ran_on[i] == std::this_thread::get_id());
  }
  CHECK_FALSE(busy[0].ec); // the running ones are untouched
  CHECK(service.stats().cancels_queued == queued);
  CHECK(service.stats().cancelled == queued);
  fake->release();
  io.run();
  CHECK(fake->reg_calls() == 2); // no cancelled request reached the verb
  CHECK_FALSE(fake->registered_any_of(bytes(8192, queued * 2048)));
  for (auto& b : busy) {
    CHECK_FALSE(*b.ec);
    fake->drop(b.region);
  }
  const auto s = service.stats();
  CHECK(s.held() == 0);
  CHECK(s.in_flight == 0);
  CHECK(s.completed == 2);
}

TEST_CASE_METHOD(fixture, "a request cancelled while queued is freed at once, not when a worker gets to it",
                 "[registration][cancel]") {
  cv::registration_service service(io.get_executor(), options(1), fake);
  fake->hold();
  outcome busy;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, busy.handler());
  fake->wait_started(1);
  int live = 0; // requests allocated with the handlers' allocator and not yet freed
  int aborted = 0;
  asio::cancellation_signal signals[8];
  for (int i = 0; i < 8; ++i) {
    auto done = asio::bind_cancellation_slot(
        signals[i].slot(), asio::bind_allocator(live_allocator<int>(&live), [&](error_code e, auto) {
          aborted += e == asio::error::operation_aborted;
        }));
    if (i % 2)
      cv::reg_shared(service, pd, bytes(8192 + i * 4096, 4096), cv::access::local_write, std::move(done));
    else
      cv::reg_mr(service, pd, bytes(8192 + i * 4096, 4096), cv::access::local_write, std::move(done));
  }
  io.poll(); // the reg_shared batch goes to the (busy) worker's queue
  CHECK(live == 8);
  for (auto& s : signals)
    s.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(aborted == 8);
  CHECK(live == 0); // while the only worker is still busy
  CHECK(service.stats().in_flight == 1);
  fake->release();
  io.run();
  CHECK_FALSE(*busy.ec);
  CHECK(fake->reg_calls() == 1);
  fake->drop(busy.region);
  CHECK(service.stats().held() == 0);
}

TEST_CASE_METHOD(fixture, "cancellations at random moments: queued and running ones abort, done ones complete",
                 "[registration][cancel]") {
  // A slow registrar and one worker: when a cancellation arrives, its request is queued, running or done.
  cv::registration_service service(io.get_executor(), options(1), fake);
  fake->set_delay(std::chrono::microseconds(1500));
  constexpr int n = 60;
  std::vector<std::optional<error_code>> ec(n);
  std::vector<asio::cancellation_signal> signals(n);
  std::vector<std::unique_ptr<asio::steady_timer>> timers;
  std::minstd_rand random(42);
  std::uniform_int_distribution<int> moment(0, n * 1500 * 5 / 4); // microseconds: spread over the whole run
  for (int i = 0; i < n; ++i) {
    cv::reg_mr(service, pd, bytes(i * 1024, 1024), cv::access::local_write,
               asio::bind_cancellation_slot(signals[i].slot(), [&, i](error_code e, cv::memory_region r) {
                 ec[i] = e;
                 if (r) fake->drop(r);
               }));
    auto& t = *timers.emplace_back(std::make_unique<asio::steady_timer>(io));
    t.expires_after(std::chrono::microseconds(moment(random)));
    t.async_wait([&, i](error_code) { signals[i].emit(asio::cancellation_type::terminal); });
  }
  io.run();
  int aborted = 0, completed = 0;
  for (auto& e : ec) {
    REQUIRE(e);
    aborted += *e == asio::error::operation_aborted;
    completed += !*e;
  }
  const auto s = service.stats();
  INFO("queued " << s.cancels_queued << ", running " << s.cancels_running << ", done " << s.cancels_late);
  CHECK(aborted + completed == n);
  CHECK(s.cancels_queued + s.cancels_running + s.cancels_late <= n); // a cancel after the upcall is not seen
  CHECK(static_cast<std::uint64_t>(aborted) == s.cancels_queued + s.cancels_running);
  CHECK(s.cancels_queued > 0); // the draw puts many moments before the worker reaches their request
  CHECK(fake->reg_calls() == static_cast<int>(n - s.cancels_queued));
  CHECK(fake->live() == 0);
  CHECK(s.held() == 0);
}

TEST_CASE_METHOD(fixture, "a cancelled running registration deregisters what the worker produced",
                 "[registration][cancel]") {
  cv::registration_service service(io.get_executor(), options(1), fake);
  fake->hold();
  asio::cancellation_signal signal;
  outcome got;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write,
             asio::bind_cancellation_slot(signal.slot(), got.handler()));
  fake->wait_started(1);
  signal.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK_FALSE(got.ec); // a running request waits for the worker
  fake->release();
  io.run();
  REQUIRE(got.ec);
  CHECK(*got.ec == asio::error::operation_aborted);
  CHECK_FALSE(got.region);
  CHECK(fake->live() == 0);
  const auto s = service.stats();
  CHECK(s.registered == 1);
  CHECK(s.deregistered == 1);
  CHECK(s.held() == 0);
  CHECK(s.cancelled == 1);
}

TEST_CASE_METHOD(fixture, "shutdown completes every request in flight with operation_aborted and leaks nothing",
                 "[registration][shutdown]") {
  cv::registration_service service(io.get_executor(), options(1), fake);
  fake->hold();
  outcome got[3];
  for (int i = 0; i < 3; ++i)
    cv::reg_mr(service, pd, bytes(i * 8192, 4096), cv::access::local_write, got[i].handler());
  fake->wait_started(1);
  std::thread stopper([&] { service.shutdown(); });
  while (service.stats().cancelled < 2) // the two queued ones are aborted before shutdown joins the worker
    std::this_thread::yield();
  fake->release();
  stopper.join();
  io.run();
  for (auto& g : got) {
    REQUIRE(g.ec);
    CHECK(*g.ec == asio::error::operation_aborted);
    CHECK_FALSE(g.region);
  }
  CHECK(fake->live() == 0);
  CHECK(service.stats().held() == 0);
  CHECK(service.stats().in_flight == 0);

  outcome late;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, late.handler());
  io.restart();
  io.run();
  REQUIRE(late.ec);
  CHECK(*late.ec == asio::error::operation_aborted);
}

TEST_CASE_METHOD(fixture, "ENOMEM is retried and the final error names RLIMIT_MEMLOCK with its value",
                 "[registration][errors]") {
  auto o = options();
  o.retry.attempts = 3;
  cv::registration_service service(io.get_executor(), o, fake);
  fake->fail_next(cv::errno_code(ENOMEM), 10);
  outcome got;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, got.handler());
  io.run();
  REQUIRE(got.ec);
  CHECK(*got.ec == cv::errc::memlock_exhausted);
  CHECK(*got.ec == boost::system::errc::not_enough_memory);
  const std::string message = got.ec->message();
  INFO(message);
  CHECK(message.find("RLIMIT_MEMLOCK is ") != std::string::npos);
  CHECK(fake->reg_calls() == 3);
  CHECK(service.stats().retries == 2);
  CHECK(service.stats().failed == 1);
}

TEST_CASE_METHOD(fixture, "a transient EAGAIN succeeds on the retry", "[registration][errors]") {
  cv::registration_service service(io.get_executor(), options(), fake);
  fake->fail_next(cv::errno_code(EAGAIN), 2);
  outcome got;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, got.handler());
  io.run();
  CHECK_FALSE(*got.ec);
  CHECK(fake->reg_calls() == 3);
  fake->drop(got.region);
}

TEST_CASE_METHOD(fixture, "EINVAL and EFAULT name the argument at fault and are not retried",
                 "[registration][errors]") {
  cv::registration_service service(io.get_executor(), options(), fake);
  outcome rights, empty, other, unmapped;
  fake->fail_next(cv::errno_code(EINVAL));
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::remote_write, rights.handler());
  io.run();
  io.restart();
  cv::reg_mr(service, pd, bytes(0, 0), cv::access::local_write, empty.handler());
  io.run();
  io.restart();
  fake->fail_next(cv::errno_code(EINVAL));
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, other.handler());
  io.run();
  io.restart();
  fake->fail_next(cv::errno_code(EFAULT));
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, unmapped.handler());
  io.run();
  CHECK(*rights.ec == cv::errc::rights_need_local_write);
  CHECK(*rights.ec == boost::system::errc::invalid_argument);
  CHECK(rights.ec->message().find("`rights`") != std::string::npos);
  CHECK(*empty.ec == cv::errc::empty_buffer);
  CHECK(empty.ec->message().find("`buffer`") != std::string::npos);
  CHECK(*other.ec == cv::errc::invalid_registration);
  CHECK(*unmapped.ec == cv::errc::buffer_not_mapped);
  CHECK(*unmapped.ec == boost::system::errc::bad_address);
  CHECK(fake->reg_calls() == 4);
  CHECK(service.stats().retries == 0);
}

TEST_CASE_METHOD(fixture, "EFAULT with mw_bind as the only write-pinning right names mw_bind when the pages exist",
                 "[registration][errors]") {
  // The kernel pins pages writable for mw_bind too; the pages are mapped, so they are read-only.
  cv::registration_service service(io.get_executor(), options(), fake);
  const auto rights = cv::access::remote_read | cv::access::mw_bind;
  outcome read_only, hole;
  fake->fail_next(cv::errno_code(EFAULT));
  cv::reg_mr(service, pd, bytes(0, 4096), rights, read_only.handler());
  io.run();
  io.restart();
  cv::test::mapping gone(4096);
  const auto unmapped = gone.span();
  gone.unmap();
  fake->fail_next(cv::errno_code(EFAULT));
  cv::reg_mr(service, pd, unmapped, rights, hole.handler());
  io.run();
  REQUIRE(read_only.ec);
  CHECK(*read_only.ec == cv::errc::mw_bind_needs_writable_memory);
  CHECK(*read_only.ec == boost::system::errc::bad_address);
  CHECK(read_only.ec->message().find("mw_bind") != std::string::npos);
  REQUIRE(hole.ec);
  CHECK(*hole.ec == cv::errc::buffer_not_mapped);
}

TEST_CASE_METHOD(fixture, "rereg falls back to register-then-deregister on EOPNOTSUPP and says so",
                 "[registration][rereg]") {
  cv::registration_service service(io.get_executor(), options(), fake);
  outcome got;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, got.handler());
  io.run();
  const auto old_lkey = got.region.lkey();
  std::optional<cv::rereg_result> result;
  error_code ec;
  cv::rereg(service, std::move(got.region), {.buffer = bytes(8192, 8192), .rights = cv::access::local_write},
            [&](error_code e, cv::rereg_result r) { ec = e, result = std::move(r); });
  io.restart();
  io.run();
  REQUIRE(result);
  CHECK_FALSE(ec);
  CHECK(result->method == cv::rereg_method::reregistered);
  CHECK(result->region.data() == memory.data() + 8192);
  CHECK(result->region.size() == 8192);
  CHECK(result->region.lkey() != old_lkey);
  CHECK(fake->live() == 1);
  CHECK(service.stats().rereg_fallbacks == 1);

  fake->set_rereg_supported(true);
  ibv_mr* const same = result->region.native_handle();
  cv::rereg(service, std::move(result->region), {.rights = cv::access::local_write | cv::access::remote_read},
            [&](error_code e, cv::rereg_result r) { ec = e, result = std::move(r); });
  io.restart();
  io.run();
  CHECK_FALSE(ec);
  CHECK(result->method == cv::rereg_method::in_place);
  CHECK(result->region.native_handle() == same);
  CHECK(result->region.rights() == (cv::access::local_write | cv::access::remote_read));
  fake->drop(result->region);
  CHECK(service.stats().held() == 0);
}

TEST_CASE_METHOD(fixture, "a failed rereg fallback leaves the old region registered and hands it back",
                 "[registration][rereg]") {
  cv::registration_service service(io.get_executor(), options(), fake);
  outcome got;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, got.handler());
  io.run();
  ibv_mr* const old = got.region.native_handle();
  fake->fail_next(cv::errno_code(EFAULT));
  std::optional<cv::rereg_result> result;
  error_code ec;
  cv::rereg(service, std::move(got.region), {.buffer = bytes(4096, 4096)},
            [&](error_code e, cv::rereg_result r) { ec = e, result = std::move(r); });
  io.restart();
  io.run();
  CHECK(ec == cv::errc::buffer_not_mapped);
  CHECK(result->region.native_handle() == old);
  CHECK(fake->live() == 1);
  fake->drop(result->region);
}

TEST_CASE_METHOD(fixture, "dereg deregisters on a worker, and hands the region back when cancelled first",
                 "[registration][dereg]") {
  cv::registration_service service(io.get_executor(), options(1), fake);
  outcome a, b, blocker;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, a.handler());
  cv::reg_mr(service, pd, bytes(8192, 4096), cv::access::local_write, b.handler());
  io.run();
  REQUIRE(fake->live() == 2);
  fake->hold();
  cv::reg_mr(service, pd, bytes(16384, 4096), cv::access::local_write, blocker.handler());
  fake->wait_started(3);
  asio::cancellation_signal signal;
  outcome kept, gone;
  cv::dereg(service, std::move(a.region), asio::bind_cancellation_slot(signal.slot(), kept.handler()));
  cv::dereg(service, std::move(b.region), gone.handler());
  signal.emit(asio::cancellation_type::terminal);
  fake->release();
  io.restart();
  io.run();
  CHECK(*kept.ec == asio::error::operation_aborted);
  CHECK(kept.region); // handed back, still registered
  CHECK_FALSE(*gone.ec);
  CHECK_FALSE(gone.region);
  CHECK(fake->live() == 2);
  fake->drop(kept.region);
  fake->drop(blocker.region);
  CHECK(service.stats().held() == 0);
}

TEST_CASE_METHOD(fixture, "overlapping and adjacent shared requests of one turn share one registration",
                 "[registration][batch]") {
  cv::registration_service service(io.get_executor(), options(2), fake);
  std::vector<cv::shared_region> got(5);
  int done = 0;
  const auto keep = [&](int i) {
    return [&, i](error_code ec, cv::shared_region r) {
      CHECK_FALSE(ec);
      got[i] = std::move(r);
      ++done;
    };
  };
  const auto rw = cv::access::local_write;
  cv::reg_shared(service, pd, bytes(0, 4096), rw, keep(0));
  cv::reg_shared(service, pd, bytes(2048, 4096), rw, keep(1));                        // overlaps 0
  cv::reg_shared(service, pd, bytes(6144, 2048), rw, keep(2));                        // touches 1
  cv::reg_shared(service, pd, bytes(32768, 4096), rw, keep(3));                       // apart
  cv::reg_shared(service, pd, bytes(0, 4096), rw | cv::access::remote_read, keep(4)); // other rights
  io.run();
  REQUIRE(done == 5);
  CHECK(fake->reg_calls() == 3);
  CHECK(got[0].shares_registration_with(got[1]));
  CHECK(got[1].shares_registration_with(got[2]));
  CHECK_FALSE(got[0].shares_registration_with(got[3]));
  CHECK_FALSE(got[0].shares_registration_with(got[4]));
  CHECK(got[0].registration().data() == memory.data());
  CHECK(got[0].registration().size() == 8192);
  CHECK(got[2].data() == memory.data() + 6144);
  CHECK(got[2].size() == 2048);
  CHECK(got[2].lkey() == got[0].lkey());
  CHECK(got[2].span().lkey == got[0].lkey());
  CHECK(service.stats().merged == 2);
  CHECK(service.stats().shared_live == 3);
  got[0] = got[1] = {};
  CHECK(fake->live() == 3); // got[2] still holds the first registration
  got.clear();
  CHECK(fake->live() == 0);
  CHECK(service.stats().held() == 0);
}

TEST_CASE_METHOD(fixture, "a merged registration that fails is retried request by request: only the bad one fails",
                 "[registration][batch]") {
  // B's pages refuse the rights (as read-only pages refuse local_write: EFAULT), so the union A+B fails.
  cv::registration_service service(io.get_executor(), options(1), fake);
  fake->fail_range(bytes(8192, 4096), cv::errno_code(EFAULT));
  const auto rw = cv::access::local_write;
  error_code ec[3];
  cv::shared_region got[3];
  int done = 0;
  const auto keep = [&](int i) {
    return [&, i](error_code e, cv::shared_region r) { ec[i] = e, got[i] = std::move(r), ++done; };
  };
  cv::reg_shared(service, pd, bytes(0, 4096), rw, keep(0));    // A
  cv::reg_shared(service, pd, bytes(2048, 6144), rw, keep(1)); // overlaps A, touches B
  cv::reg_shared(service, pd, bytes(8192, 4096), rw, keep(2)); // B: the bad neighbour
  io.run();
  REQUIRE(done == 3);
  CHECK_FALSE(ec[0]);
  CHECK_FALSE(ec[1]);
  CHECK(ec[2] == cv::errc::buffer_not_mapped);
  CHECK(ec[2] == boost::system::errc::bad_address);
  CHECK_FALSE(got[2]);
  REQUIRE(got[0]);
  REQUIRE(got[1]);
  // Each good request got a registration of exactly what it asked for, not of the failed union.
  CHECK(got[0].registration().data() == memory.data());
  CHECK(got[0].registration().size() == 4096);
  CHECK(got[1].registration().data() == memory.data() + 2048);
  CHECK(got[1].registration().size() == 6144);
  const auto s = service.stats();
  CHECK(s.completed == 2);
  CHECK(s.failed == 1);
  CHECK(s.merged == 0);
  CHECK(s.merges_split == 1);
  got[0] = got[1] = {};
  CHECK(fake->live() == 0);
  CHECK(service.stats().held() == 0);
}

TEST_CASE_METHOD(fixture, "a cancelled shared request gives up its share and the registration lives on",
                 "[registration][batch][cancel]") {
  cv::registration_service service(io.get_executor(), options(1), fake);
  fake->hold();
  asio::cancellation_signal signal;
  error_code first_ec, second_ec;
  cv::shared_region first, second;
  cv::reg_shared(service, pd, bytes(0, 4096), cv::access::local_write,
                 asio::bind_cancellation_slot(
                     signal.slot(), [&](error_code ec, cv::shared_region r) { first_ec = ec, first = std::move(r); }));
  cv::reg_shared(service, pd, bytes(4096, 4096), cv::access::local_write,
                 [&](error_code ec, cv::shared_region r) { second_ec = ec, second = std::move(r); });
  io.poll(); // the kick sends both to the worker, which starts the merged registration
  fake->wait_started(1);
  signal.emit(asio::cancellation_type::terminal);
  fake->release();
  io.run();
  CHECK(first_ec == asio::error::operation_aborted);
  CHECK_FALSE(first);
  CHECK_FALSE(second_ec);
  CHECK(second.registration().size() == 8192);
  CHECK(fake->live() == 1);
  second = {};
  CHECK(fake->live() == 0);
}

namespace {
template <typename T>
struct counting_allocator {
  using value_type = T;
  int* count;
  explicit counting_allocator(int* c) : count(c) {}
  template <typename U>
  counting_allocator(const counting_allocator<U>& o) : count(o.count) {}
  T* allocate(std::size_t n) {
    ++*count;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) { std::allocator<T>().deallocate(p, n); }
  template <typename U>
  bool operator==(const counting_allocator<U>& o) const {
    return count == o.count;
  }
};
} // namespace

TEST_CASE_METHOD(fixture, "the request is allocated with the handler's associated allocator", "[registration]") {
  cv::registration_service service(io.get_executor(), options(), fake);
  int allocations = 0;
  outcome got;
  cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write,
             asio::bind_allocator(counting_allocator<int>(&allocations), got.handler()));
  io.run();
  CHECK(allocations >= 1);
  CHECK_FALSE(*got.ec);
  fake->drop(got.region);
}

TEST_CASE_METHOD(fixture, "stats().held() never reads negative, even with a region registered and handed over mid-read",
                 "[registration]") {
  cv::registration_service service(io.get_executor(), options(1), fake);
  outcome r;
  // Between the two halves of the read, a whole registration: registered by the worker, handed to us.
  static std::function<void()> during;
  during = [&] {
    cv::reg_mr(service, pd, bytes(0, 4096), cv::access::local_write, r.handler());
    io.run();
  };
  cv::detail::registration_core::pause_in_stats = [] { during(); };
  const cv::registration_stats s = service.stats();
  cv::detail::registration_core::pause_in_stats = nullptr;
  REQUIRE(r.region);
  CHECK(s.held() >= 0);  // 1 or 0: the registration may or may not be in the read, never half of it
  CHECK(service.stats().held() == 0);
  fake->drop(r.region);
}
