// coverbs/metrics.hpp on a real device (rxe0 in the Soft-RoCE guest): the snapshot's counters equal the
// operations this test performed — by kind, bytes and errors, a deliberate remote access error included —
// and registrations and window binds appear in it. The same on the software device: test/unit/metrics_test.cpp.
#include <coverbs/metrics.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
namespace metrics = coverbs::metrics;
using test::completion;
using test::rc_pair;
using test::test_buffer;

namespace {

/// `after` - `before` for every operation kind.
struct op_delta {
  metrics::snapshot before, after;
  const metrics::op_counters& at(const metrics::snapshot& s, metrics::op_kind k) const {
    return s.data_path.operations[static_cast<std::size_t>(k)];
  }
  std::uint64_t posted(metrics::op_kind k) const { return at(after, k).posted - at(before, k).posted; }
  std::uint64_t completed(metrics::op_kind k) const { return at(after, k).completed - at(before, k).completed; }
  std::uint64_t failed(metrics::op_kind k) const { return at(after, k).failed - at(before, k).failed; }
  std::uint64_t bytes(metrics::op_kind k) const { return at(after, k).bytes - at(before, k).bytes; }
  std::uint64_t wc(cv::wc_errc e) const {
    const auto i = static_cast<std::size_t>(e);
    return after.data_path.wc_errors[i] - before.data_path.wc_errors[i];
  }
};

struct counting_on {
  counting_on() { metrics::enable(); }
  ~counting_on() { metrics::disable(); }
};

}  // namespace

TEST_CASE("the snapshot counts each operation by kind with its bytes, and a remote access error by its status",
          "[metrics]") {
  counting_on on;
  rc_pair p;
  test_buffer local(p.pd, 8192), remote(p.pd, 8192);
  op_delta d;
  d.before = metrics::read();
  // 3 sends of 100, 200, 300 bytes into 3 receives; 2 writes of 1000; 1 read of 512; 1 fetch-add.
  completion<cv::received> r[3];
  completion<std::size_t> s[3], w[2], rd;
  for (int i = 0; i < 3; ++i)
    p.b.async_recv(remote.span(static_cast<std::size_t>(i) * 1024, 1024), r[i].handler());
  for (int i = 0; i < 3; ++i)
    p.a.async_send(local.span(0, static_cast<std::size_t>(i + 1) * 100), s[i].handler());
  for (auto& x : w)
    p.a.async_write(local.span(0, 1000), remote.key().slice(4096, 1000), x.handler());
  p.a.async_read(local.span(2048, 512), remote.key().slice(0, 512), rd.handler());
  completion<std::uint64_t> add;
  p.a.async_fetch_add(local.span(4096, 8), remote.key().slice(6000, 8), 1, add.handler());
  REQUIRE(p.run_until([&] {
    return std::all_of(std::begin(r), std::end(r), [](auto& x) { return x.done(); }) &&
           std::all_of(std::begin(s), std::end(s), [](auto& x) { return x.done(); }) && w[0].done() && w[1].done() &&
           rd.done() && add.done();
  }));
  d.after = metrics::read();
  using metrics::op_kind;
  CHECK(d.after.enabled);
  CHECK(d.posted(op_kind::send) == 3);
  CHECK(d.completed(op_kind::send) == 3);
  CHECK(d.bytes(op_kind::send) == 600);
  CHECK(d.posted(op_kind::recv) == 3);
  CHECK(d.completed(op_kind::recv) == 3);
  CHECK(d.bytes(op_kind::recv) == 600);
  CHECK(d.completed(op_kind::write) == 2);
  CHECK(d.bytes(op_kind::write) == 2000);
  CHECK(d.completed(op_kind::read) == 1);
  CHECK(d.bytes(op_kind::read) == 512);
  CHECK(d.completed(op_kind::atomic) == 1);
  CHECK(d.bytes(op_kind::atomic) == 8);
  for (std::size_t k = 0; k < metrics::op_kind_count; ++k)
    CHECK(d.failed(static_cast<op_kind>(k)) == 0);
  CHECK(d.after.data_path.completions_per_poll.sum - d.before.data_path.completions_per_poll.sum == 3 + 3 + 2 + 1 + 1);

  // A write to a key that names nothing: rem_access_err, and the write behind it flushed.
  d.before = metrics::read();
  cv::remote_key bad = remote.key();
  bad.rkey ^= 0x5a5a00;
  completion<std::size_t> w_bad, w_after;
  p.a.async_write(local.span(0, 64), bad, w_bad.handler());
  p.a.async_write(local.span(0, 64), remote.key(), w_after.handler());
  REQUIRE(p.run_until([&] { return w_bad.done() && w_after.done(); }));
  REQUIRE(*w_bad.ec == cv::wc_errc::rem_access_err);
  d.after = metrics::read();
  CHECK(d.failed(op_kind::write) == 2);
  CHECK(d.completed(op_kind::write) == 0);
  CHECK(d.bytes(op_kind::write) == 0);
  CHECK(d.wc(cv::wc_errc::rem_access_err) == 1);
  CHECK(d.wc(cv::wc_errc::wr_flush_err) == 1);
}

TEST_CASE("registrations through a service appear in the snapshot, and stay after the service is gone", "[metrics]") {
  counting_on on;
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  std::vector<std::byte> memory(1 << 20);
  const auto before = metrics::read().registration;
  {
    cv::registration_service service(loop.io.get_executor());
    std::optional<cv::error_code> reg_ec;
    cv::memory_region region;
    cv::reg_mr(service, pd, std::span(memory), cv::access::local_write, [&](cv::error_code ec, cv::memory_region mr) {
      reg_ec = ec;
      region = std::move(mr);
    });
    REQUIRE(loop.run_until([&] { return reg_ec.has_value(); }));
    REQUIRE_FALSE(*reg_ec);
    const auto during = metrics::read().registration;
    CHECK(during.registered - before.registered == 1);
    CHECK(during.bytes_registered - before.bytes_registered == memory.size());
    CHECK(during.latency_us.count - before.latency_us.count == 1);
  }
  CHECK(metrics::read().registration.registered - before.registered == 1);
}
