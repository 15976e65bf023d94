// coverbs/metrics.hpp on a real device (rxe0 in the Soft-RoCE guest): the snapshot's counters equal the
// operations this test performed — by kind, bytes and errors, a deliberate remote access error included —
// and registrations and window binds appear in it. The same on the software device: test/unit/metrics_test.cpp.
#include <coverbs/metrics.hpp>
#if defined(COVERBS_HAS_RDMACM)
#include <coverbs/cm.hpp>
#endif

#include "fixtures/completion.hpp"
#include "fixtures/event_loop.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

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
  // The same, per queue pair (both made by this test) and for this thread (the loop's).
  const auto qa = p.a.counters(), qb = p.b.counters();
  const auto k = [](op_kind kind) { return static_cast<std::size_t>(kind); };
  CHECK(qa.operations[k(op_kind::send)].completed == 3);
  CHECK(qa.operations[k(op_kind::send)].bytes == 600);
  CHECK(qa.operations[k(op_kind::write)].completed == 2);
  CHECK(qa.operations[k(op_kind::read)].bytes == 512);
  CHECK(qa.operations[k(op_kind::atomic)].completed == 1);
  CHECK(qa.operations[k(op_kind::recv)].posted == 0);
  CHECK(qb.operations[k(op_kind::recv)].completed == 3);
  CHECK(qb.operations[k(op_kind::recv)].bytes == 600);
  CHECK(qb.operations[k(op_kind::send)].posted == 0);
  const auto self = static_cast<std::int64_t>(gettid());
  const auto mine = [&](const metrics::snapshot& snap) -> const metrics::thread_data_path* {
    const auto it = std::find_if(snap.threads.begin(), snap.threads.end(),
                                 [&](const auto& t) { return t.thread_id == self; });
    return it == snap.threads.end() ? nullptr : &*it;
  };
  REQUIRE(mine(d.after));
  const std::uint64_t writes_before = mine(d.before) ? mine(d.before)->data_path.operations[k(op_kind::write)].completed : 0;
  CHECK(mine(d.after)->data_path.operations[k(op_kind::write)].completed - writes_before == 2);

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
  CHECK(p.a.counters().operations[k(op_kind::write)].failed == 2);
  CHECK(p.a.counters().operations[k(op_kind::write)].posted == 4);
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

#if defined(COVERBS_HAS_RDMACM)
namespace {

using connection_result = completion<cv::connection>;  // .ec, .value: the connection

/// The connections' ends counted since `before`: by peer, locally, on error.
struct ends {
  std::uint64_t peer, local, error;
};
ends ended_since(const metrics::snapshot& before) {
  const auto now = metrics::read().connections;
  return {now.disconnected_by_peer - before.connections.disconnected_by_peer,
          now.disconnected_locally - before.connections.disconnected_locally,
          now.disconnected_on_error - before.connections.disconnected_on_error};
}

}  // namespace

TEST_CASE("each end of a connection is counted once, by its cause: peer, this side (disconnect or destruction), or a "
          "failed queue pair",
          "[metrics][cm]") {
  counting_on on;
  test::event_loop loop;
  cv::listener l(loop.io.get_executor(), "10.77.0.1", 0);  // veth0, under rxe0
  const auto connect = [&](connection_result& server, connection_result& client) {
    l.async_accept(server.handler());
    cv::async_connect(loop.io.get_executor(), "10.77.0.1", l.local_port(), {}, client.handler());
    REQUIRE(loop.run_until([&] { return server.done() && client.done(); }));
    REQUIRE_FALSE(*server.ec);
    REQUIRE_FALSE(*client.ec);
  };
  const auto settled = [&](const metrics::snapshot& before, std::uint64_t total) {
    return loop.run_until([&] {
      const ends e = ended_since(before);
      return e.peer + e.local + e.error >= total;
    });
  };
  const auto expect_ends = [&](const metrics::snapshot& before, ends want) {
    REQUIRE(settled(before, want.peer + want.local + want.error));
    const ends e = ended_since(before);
    CHECK(e.local == want.local);
    CHECK(e.peer == want.peer);
    CHECK(e.error == want.error);
  };

  SECTION("async_disconnect: this side's end is local, the other's by the peer") {
    connection_result server, client;
    connect(server, client);
    const auto before = metrics::read();
    std::optional<cv::error_code> done;
    client.value.async_disconnect([&](cv::error_code ec) { done = ec; });
    expect_ends(before, {.peer = 1, .local = 1, .error = 0});
    CHECK(loop.run_until([&] { return done.has_value(); }));
  }
  SECTION("destroying an established connection ends it locally") {
    connection_result server, client;
    connect(server, client);
    const auto before = metrics::read();
    server.value = cv::connection();  // gone without async_disconnect: its cm_id sends the disconnect
    expect_ends(before, {.peer = 1, .local = 1, .error = 0});
  }
  SECTION("a queue pair failed by a remote access error ends its connection on error, whoever disconnects") {
    connection_result server, client;
    connect(server, client);
    test_buffer local(client.value.pd(), 4096), remote(server.value.pd(), 4096);
    cv::remote_key bad = remote.key();
    bad.rkey ^= 0x5a5a00;
    completion<std::size_t> w;
    client.value.qp().async_write(local.span(0, 64), bad, w.handler());
    REQUIRE(loop.run_until([&] { return w.done(); }));
    REQUIRE(*w.ec == cv::wc_errc::rem_access_err);
    const auto before = metrics::read();
    std::optional<cv::error_code> done;
    client.value.async_disconnect([&](cv::error_code ec) { done = ec; });
    REQUIRE(settled(before, 2));
    const ends e = ended_since(before);
    CHECK(e.error >= 1);  // the client's (the server's too if the device failed its queue pair and said so)
    CHECK(e.local == 0);
    CHECK(e.peer + e.error == 2);
  }
}
#endif
