// coverbs/metrics.hpp: the snapshot's counters follow the operations a test performs, natively on the
// software verbs device (test/fixtures/soft_verbs.hpp); off, nothing is counted. The same counts on rxe:
// test/device/metrics_test.cpp.
#include <coverbs/memory_region.hpp>
#include <coverbs/memory_window.hpp>
#include <coverbs/metrics.hpp>
#include <coverbs/window_operations.hpp>

#include "fixtures/run_all.hpp"
#include "fixtures/soft_pair.hpp"

#include <catch2/catch.hpp>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <thread>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;
namespace metrics = coverbs::metrics;
using test::run_all;

namespace {

const metrics::op_counters& row(const metrics::snapshot& s, metrics::op_kind k) {
  return s.data_path.operations[static_cast<std::size_t>(k)];
}

/// Switches counting on for one test case and off again.
struct counting_on {
  counting_on() { metrics::enable(); }
  ~counting_on() { metrics::disable(); }
};

}  // namespace

TEST_CASE("the operation kinds have the names the exporter uses", "[metrics]") {
  CHECK(std::string(metrics::name(metrics::op_kind::send)) == "send");
  CHECK(std::string(metrics::name(metrics::op_kind::invalidate)) == "invalidate");
  CHECK(metrics::histogram::upper_bound(0) == 1);
  CHECK(metrics::histogram::upper_bound(1) == 3);
  CHECK(metrics::histogram::upper_bound(metrics::histogram::bucket_count - 1) == UINT64_MAX);
}

TEST_CASE("switched off, the data path counts nothing", "[metrics]") {
  metrics::disable();
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);
  const auto before = metrics::read();
  CHECK_FALSE(before.enabled);
  for (int i = 0; i < 10; ++i)
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
  run_all(io);
  const auto after = metrics::read();
  CHECK(row(after, metrics::op_kind::write).posted == row(before, metrics::op_kind::write).posted);
  CHECK(row(after, metrics::op_kind::write).completed == row(before, metrics::op_kind::write).completed);
  CHECK(after.data_path.completions_per_poll.count == before.data_path.completions_per_poll.count);
}

TEST_CASE("switched on, posted and completed operations, bytes and errors are counted by kind", "[metrics]") {
  counting_on on;
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 4096);
  const auto before = metrics::read();
  CHECK(before.enabled);
  constexpr int writes = 5, sends = 3;
  for (int i = 0; i < writes; ++i)
    rig.a.async_write(rig.local_span(100), rig.remote_key(100), [](cv::error_code ec, std::size_t) { CHECK(!ec); });
  for (int i = 0; i < sends; ++i) {
    rig.b.async_recv(rig.remote_span(512), [](cv::error_code ec, cv::received) { CHECK(!ec); });
    rig.a.async_send(rig.local_span(300), [](cv::error_code ec, std::size_t) { CHECK(!ec); });
  }
  rig.a.async_read(rig.local_span(64), rig.remote_key(64), [](cv::error_code ec, std::size_t) { CHECK(!ec); });
  run_all(io);
  // A failed write, and the write behind it flushed.
  rig.soft.fail_next(IBV_WC_REM_ACCESS_ERR);
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
  run_all(io);
  const auto after = metrics::read();
  const auto delta = [&](metrics::op_kind k, std::uint64_t metrics::op_counters::*field) {
    return row(after, k).*field - row(before, k).*field;
  };
  using metrics::op_counters;
  using metrics::op_kind;
  CHECK(delta(op_kind::write, &op_counters::posted) == writes + 2);
  CHECK(delta(op_kind::write, &op_counters::completed) == writes);
  CHECK(delta(op_kind::write, &op_counters::failed) == 2);
  CHECK(delta(op_kind::write, &op_counters::bytes) == writes * 100);
  CHECK(delta(op_kind::send, &op_counters::completed) == sends);
  CHECK(delta(op_kind::send, &op_counters::bytes) == sends * 300);
  CHECK(delta(op_kind::recv, &op_counters::posted) == sends);
  CHECK(delta(op_kind::recv, &op_counters::completed) == sends);
  CHECK(delta(op_kind::recv, &op_counters::bytes) == sends * 300);
  CHECK(delta(op_kind::read, &op_counters::completed) == 1);
  CHECK(delta(op_kind::read, &op_counters::bytes) == 64);
  const auto wc = [&](cv::wc_errc e) {
    const auto i = static_cast<std::size_t>(e);
    return after.data_path.wc_errors[i] - before.data_path.wc_errors[i];
  };
  CHECK(wc(cv::wc_errc::rem_access_err) == 1);
  CHECK(wc(cv::wc_errc::wr_flush_err) == 1);
  const auto& polls = after.data_path.completions_per_poll;
  CHECK(polls.count > before.data_path.completions_per_poll.count);
  CHECK(polls.sum - before.data_path.completions_per_poll.sum == writes + 2 * sends + 1 + 2);
}

TEST_CASE("an operation refused before posting counts as failed with its errc", "[metrics]") {
  counting_on on;
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);
  const auto before = metrics::read();
  // 8 bytes from a remote range of 4: refused before posting.
  rig.a.async_write(rig.local_span(8), rig.remote_key(4),
                    [](cv::error_code ec, std::size_t) { CHECK(ec == cv::errc::remote_range_too_small); });
  run_all(io);
  const auto after = metrics::read();
  const auto i = static_cast<std::size_t>(cv::errc::remote_range_too_small);
  CHECK(after.data_path.errc_errors[i] - before.data_path.errc_errors[i] == 1);
  CHECK(row(after, metrics::op_kind::write).failed - row(before, metrics::op_kind::write).failed == 1);
  CHECK(row(after, metrics::op_kind::write).posted == row(before, metrics::op_kind::write).posted);
}

TEST_CASE("a read and an atomic refused before posting count as a failed read and atomic, not as writes", "[metrics]") {
  counting_on on;
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);
  const auto before = metrics::read();
  rig.a.async_read(rig.local_span(8), rig.remote_key(4),
                   [](cv::error_code ec, std::size_t) { CHECK(ec == cv::errc::remote_range_too_small); });
  rig.a.async_fetch_add(rig.local_span(8), rig.remote_key(8), 1, [](cv::error_code ec, std::uint64_t) { CHECK(ec); });
  run_all(io);
  const auto after = metrics::read();
  for (auto kind : {metrics::op_kind::read, metrics::op_kind::atomic}) {
    INFO("kind " << static_cast<int>(kind));
    CHECK(row(after, kind).failed - row(before, kind).failed == 1);
  }
  CHECK(row(after, metrics::op_kind::write).failed == row(before, metrics::op_kind::write).failed);
}

TEST_CASE("a refused bind, a refused invalidation and one with nothing to do count as binds and invalidations, "
          "not as writes", "[metrics]") {
  counting_on on;
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);
  std::vector<std::byte> bytes(64);
  cv::memory_region mr(rig.pd, bytes, cv::access::local_write | cv::access::remote_read | cv::access::mw_bind);
  cv::memory_window w(rig.pd, cv::window_type::type2);
  const auto before = metrics::read();
  // 128 bytes of a 64-byte region: refused before posting.
  cv::bind_mw(rig.a, w, mr, {0, 128}, cv::access::remote_read,
              [](cv::error_code ec, cv::remote_key) { CHECK(ec == cv::errc::range_outside_region); });
  // The window is unbound: nothing to do, it succeeds without posting.
  cv::invalidate(rig.a, w, [](cv::error_code ec) { CHECK_FALSE(ec); });
  // No window has this key: refused before posting.
  cv::invalidate(rig.a, 0x5a5a5a5au, [](cv::error_code ec) { CHECK(ec == cv::errc::rkey_not_a_window); });
  run_all(io);
  const auto after = metrics::read();
  const auto delta = [&](metrics::op_kind k, auto field) { return row(after, k).*field - row(before, k).*field; };
  using counters = metrics::op_counters;
  CHECK(delta(metrics::op_kind::bind, &counters::failed) == 1);
  CHECK(delta(metrics::op_kind::invalidate, &counters::failed) == 1);
  CHECK(delta(metrics::op_kind::invalidate, &counters::completed) == 1);
  CHECK(delta(metrics::op_kind::invalidate, &counters::posted) == 0);
  CHECK(delta(metrics::op_kind::write, &counters::failed) == 0);
  CHECK(delta(metrics::op_kind::write, &counters::completed) == 0);
}

TEST_CASE("operations waiting for a send credit are counted", "[metrics]") {
  counting_on on;
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 2, 64);
  const auto before = metrics::read().data_path.send_credit_waits;
  for (int i = 0; i < 6; ++i)
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
  run_all(io);
  CHECK(metrics::read().data_path.send_credit_waits - before == 4);
}

TEST_CASE("counts of a thread that has ended stay in the snapshot", "[metrics][threads]") {
  counting_on on;
  const auto before = row(metrics::read(), metrics::op_kind::write).completed;
  std::thread([] {
    asio::io_context io;
    soft_verbs::soft_pair rig(io, 8, 64);
    for (int i = 0; i < 3; ++i)
      rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
    run_all(io);
  }).join();
  CHECK(row(metrics::read(), metrics::op_kind::write).completed - before == 3);
}

TEST_CASE("each queue pair counts its own operations, bytes, failures and credit waits", "[metrics]") {
  counting_on on;
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 2, 4096);
  for (int i = 0; i < 5; ++i)  // 2 send credits: 3 of the 5 writes wait for one
    rig.a.async_write(rig.local_span(100), rig.remote_key(100), [](cv::error_code ec, std::size_t) { CHECK(!ec); });
  rig.b.async_recv(rig.remote_span(512), [](cv::error_code ec, cv::received) { CHECK(!ec); });
  rig.a.async_send(rig.local_span(300), [](cv::error_code ec, std::size_t) { CHECK(!ec); });
  rig.b.async_read(rig.remote_span(8), rig.remote_key(4),  // refused before posting: counted as failed on b
                   [](cv::error_code ec, std::size_t) { CHECK(ec == cv::errc::remote_range_too_small); });
  run_all(io);
  using metrics::op_kind;
  const auto a = rig.a.counters(), b = rig.b.counters();
  const auto& aw = a.operations[static_cast<std::size_t>(op_kind::write)];
  CHECK(aw.posted == 5);
  CHECK(aw.completed == 5);
  CHECK(aw.failed == 0);
  CHECK(aw.bytes == 500);
  CHECK(a.operations[static_cast<std::size_t>(op_kind::send)].bytes == 300);
  CHECK(a.send_credit_waits == 4);  // 3 writes and the send behind them
  CHECK(a.operations[static_cast<std::size_t>(op_kind::recv)].posted == 0);
  const auto& br = b.operations[static_cast<std::size_t>(op_kind::recv)];
  CHECK(br.posted == 1);
  CHECK(br.completed == 1);
  CHECK(br.bytes == 300);
  CHECK(b.operations[static_cast<std::size_t>(op_kind::write)].posted == 0);
  const auto& bread = b.operations[static_cast<std::size_t>(op_kind::read)];
  CHECK(bread.failed == 1);
  CHECK(bread.posted == 0);
  CHECK(b.send_credit_waits == 0);
  // Off: nothing more is counted on the queue pair.
  metrics::disable();
  rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
  run_all(io);
  CHECK(rig.a.counters().operations[static_cast<std::size_t>(op_kind::write)].completed == 5);
}

TEST_CASE("each live thread's counts are in the snapshot under its name and thread id", "[metrics][threads]") {
  counting_on on;
  std::promise<std::int64_t> counted;
  std::promise<void> release;
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "metrics-test-9");
    asio::io_context io;
    soft_verbs::soft_pair rig(io, 8, 64);
    for (int i = 0; i < 7; ++i)
      rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
    run_all(io);
    counted.set_value(static_cast<std::int64_t>(gettid()));
    release.get_future().wait();
  });
  const std::int64_t tid = counted.get_future().get();
  const auto s = metrics::read();
  const auto it = std::find_if(s.threads.begin(), s.threads.end(), [&](const auto& e) { return e.thread_id == tid; });
  REQUIRE(it != s.threads.end());
  CHECK(it->name == "metrics-test-9");
  CHECK(it->data_path.operations[static_cast<std::size_t>(metrics::op_kind::write)].completed == 7);
  CHECK(it->data_path.completions_per_poll.sum >= 7);
  CHECK(std::is_sorted(s.threads.begin(), s.threads.end(),
                       [](const auto& x, const auto& y) { return x.thread_id < y.thread_id; }));
  const auto total = row(s, metrics::op_kind::write).completed;
  release.set_value();
  t.join();
  // Ended: gone from the list, its counts kept in the totals.
  const auto after = metrics::read();
  CHECK(std::none_of(after.threads.begin(), after.threads.end(), [&](const auto& e) { return e.thread_id == tid; }));
  CHECK(row(after, metrics::op_kind::write).completed >= total);
}

// Run only in a -Dmetrics=false build (test/meson.build), where the counting points are compiled out.
TEST_CASE("built with -Dmetrics=false, enable() does nothing and nothing is counted", "[.compiled_out]") {
  metrics::enable();
  CHECK_FALSE(metrics::enabled());
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);
  for (int i = 0; i < 3; ++i)
    rig.a.async_write(rig.local_span(8), rig.remote_key(8), [](cv::error_code, std::size_t) {});
  run_all(io);
  const auto s = metrics::read();
  metrics::disable();
  CHECK_FALSE(s.enabled);
  CHECK(row(s, metrics::op_kind::write).completed == 0);
  CHECK(s.data_path.completions_per_poll.count == 0);
  CHECK(s.threads.empty());
  CHECK(rig.a.counters().operations[static_cast<std::size_t>(metrics::op_kind::write)].completed == 0);
}
