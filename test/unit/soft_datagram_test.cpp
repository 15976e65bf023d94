// coverbs' datagram (UD) path — the GRH slot in front of every receive, the sender parsed from it, the refusals
// before posting, truncation, receive credits, every completion token — natively on the software verbs device
// (test/fixtures/soft_verbs.hpp), which models UD as rxe does: a fast check on every host beside the device
// tests on rxe (test/device/datagram_test.cpp).
#include "fixtures/run_all.hpp"
#include "fixtures/soft_datagram_pair.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;
using test::run_all;

namespace {

constexpr cv::gid loopback_gid() {
  cv::gid g;
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 127;
  g.raw[15] = 1;
  return g;
}

/// Runs what is ready while a receive stays posted (the loop would wait for it): 100 ms at most.
void settle(asio::io_context& io) {
  io.restart();
  io.run_for(std::chrono::milliseconds(100));
}

void fill(std::span<std::byte> bytes, int seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = std::byte(static_cast<unsigned char>(seed * 7 + i));
}

cv::datagram_options small(std::uint32_t depth = 16) {
  cv::datagram_options o;
  o.max_send_wr = depth;
  o.max_recv_wr = depth;
  o.max_send_sge = o.max_recv_sge = 2;
  return o;
}

/// A receive's outcome, recorded by its handler.
struct got {
  std::optional<cv::error_code> ec;
  cv::received_datagram r;
  auto handler() {
    return [this](cv::error_code e, cv::received_datagram d) {
      ec = e;
      r = d;
    };
  }
};

/// A send's outcome.
struct sent {
  std::optional<cv::error_code> ec;
  std::size_t bytes = 0;
  auto handler() {
    return [this](cv::error_code e, std::size_t n) {
      ec = e;
      bytes = n;
    };
  }
};

}  // namespace

TEST_CASE("a datagram reports its sender and payload behind the GRH, scattered over two spans", "[soft][datagram]") {
  const bool ipv6 = GENERATE(false, true);
  INFO((ipv6 ? "IPv6 GRH" : "RoCE v2 IPv4 header"));
  asio::io_context io;
  soft_verbs::soft_datagram_pair p(io, small(), 4096);
  p.soft.set_ipv6_grh(ipv6);
  fill(p.local, 1);

  got in;
  p.b.async_recv(std::array{p.remote_span(10), p.remote_span(100, 10)}, in.handler());
  sent out;
  p.a.async_send_to_with_imm(p.to_b(), std::array{p.local_span(3), p.local_span(50, 3)}, 0xC0FFEE, out.handler());
  CHECK_FALSE(out.ec);  // never inside the initiating function
  run_all(io);

  REQUIRE(in.ec);
  CHECK(*in.ec == cv::error_code{});
  CHECK(in.r.bytes == 53);  // the payload alone, not the GRH's 40 bytes
  CHECK(in.r.imm == 0xC0FFEE);
  CHECK(std::memcmp(p.remote.data(), p.local.data(), 53) == 0);  // from the first span's first byte on
  CHECK(in.r.sender.qp_num == p.a.qp_num());
  CHECK(in.r.sender.qkey == p.b.qkey());
  CHECK(in.r.sender.ipv4 == !ipv6);
  CHECK(in.r.sender.source_gid == loopback_gid());
  CHECK(in.r.sender.source_gid == p.a.local_gid().value);
  CHECK(out.ec == cv::error_code{});
  CHECK(out.bytes == 53);
  CHECK(p.soft.datagrams_dropped() == 0);
}

TEST_CASE("an address handle made from a received sender answers it", "[soft][datagram]") {
  asio::io_context io;
  soft_verbs::soft_datagram_pair p(io, small(), 4096);
  fill(p.local, 2);
  got request, reply;
  p.b.async_recv(p.remote_span(64), request.handler());
  p.a.async_send_to(p.to_b(), p.local_span(8), [](cv::error_code ec, std::size_t) { CHECK_FALSE(ec); });
  run_all(io);
  REQUIRE(request.ec == cv::error_code{});
  p.a.async_recv(p.local_span(64, 1024), reply.handler());

  const cv::address_handle back(p.pd, request.r.sender);
  CHECK(back.destination_gid() == loopback_gid());
  p.b.async_send_to({&back, request.r.sender.qp_num, p.a.qkey()}, p.remote_span(5),
                    [](cv::error_code ec, std::size_t) { CHECK_FALSE(ec); });
  run_all(io);
  REQUIRE(reply.ec == cv::error_code{});
  CHECK(reply.r.bytes == 5);
  CHECK(reply.r.sender.qp_num == p.b.qp_num());
}

TEST_CASE("bad sends are refused before posting and leave the queue pair healthy", "[soft][datagram]") {
  asio::io_context io;
  soft_verbs::soft_datagram_pair p(io, small(), 8192);
  const std::size_t mtu = p.a.max_datagram_size();
  CHECK(mtu == 4096);
  cv::protection_domain other_pd(p.dev);
  const cv::address_handle foreign(other_pd, p.a.local_gid().value);

  sent too_long, gathered_too_long, bad_qkey, bad_qp, wrong_pd;
  p.a.async_send_to(p.to_b(), p.local_span(mtu + 1), too_long.handler());
  p.a.async_send_to(p.to_b(), std::array{p.local_span(mtu), p.local_span(1)}, gathered_too_long.handler());
  p.a.async_send_to({&p.ah, p.b.qp_num(), 0x80000001u}, p.local_span(1), bad_qkey.handler());
  p.a.async_send_to({&p.ah, 1u << 24, p.b.qkey()}, p.local_span(1), bad_qp.handler());
  p.a.async_send_to({&foreign, p.b.qp_num(), p.b.qkey()}, p.local_span(1), wrong_pd.handler());
  const auto posted = p.soft.sends_posted();
  run_all(io);
  CHECK(*too_long.ec == cv::errc::datagram_too_long);
  CHECK(*gathered_too_long.ec == cv::errc::datagram_too_long);
  CHECK(*bad_qkey.ec == cv::errc::invalid_qkey);
  CHECK(*bad_qp.ec == cv::errc::invalid_destination_qp);
  CHECK(*wrong_pd.ec == cv::errc::address_handle_mismatch);
  CHECK(p.soft.sends_posted() == posted);  // nothing reached the device
  CHECK(p.a.error() == cv::error_code{});

  got whole;
  p.b.async_recv(p.remote_span(mtu), whole.handler());
  p.a.async_send_to(p.to_b(), p.local_span(mtu), [](cv::error_code ec, std::size_t) { CHECK_FALSE(ec); });
  run_all(io);
  CHECK(whole.ec == cv::error_code{});
  CHECK(whole.r.bytes == mtu);
}

TEST_CASE("the active MTU bounds a datagram", "[soft][datagram]") {
  asio::io_context io;
  soft_verbs::device soft;
  soft.set_active_mtu(IBV_MTU_1024);
  cv::device dev = cv::device::adopt(soft.context());
  cv::protection_domain pd(dev);
  cv::completion_queue cq(io, dev);
  cv::datagram_queue_pair qp(pd, cq, small());
  CHECK(qp.max_datagram_size() == 1024);
}

TEST_CASE("a datagram with another Q_Key is dropped by the device; the receive waits for the next", "[soft][datagram]") {
  asio::io_context io;
  soft_verbs::soft_datagram_pair p(io, small(), 4096);
  got in;
  p.b.async_recv(p.remote_span(64), in.handler());
  sent wrong;
  p.a.async_send_to({&p.ah, p.b.qp_num(), p.b.qkey() + 1}, p.local_span(4), wrong.handler());
  settle(io);
  CHECK(wrong.ec == cv::error_code{});  // UD: the sender never learns
  CHECK_FALSE(in.ec);
  CHECK(p.soft.datagrams_dropped() == 1);
  p.a.async_send_to(p.to_b(), p.local_span(6), [](cv::error_code ec, std::size_t) { CHECK_FALSE(ec); });
  run_all(io);
  REQUIRE(in.ec == cv::error_code{});
  CHECK(in.r.bytes == 6);
}

TEST_CASE("a datagram longer than the receive is truncated into it; the queue pair stays healthy", "[soft][datagram]") {
  asio::io_context io;
  soft_verbs::soft_datagram_pair p(io, small(), 4096);
  fill(p.local, 3);
  got short_one, next;
  p.b.async_recv(p.remote_span(16), short_one.handler());
  p.b.async_recv(p.remote_span(100, 16), next.handler());
  p.a.async_send_to(p.to_b(), p.local_span(40), [](cv::error_code ec, std::size_t) { CHECK_FALSE(ec); });
  p.a.async_send_to(p.to_b(), p.local_span(50), [](cv::error_code ec, std::size_t) { CHECK_FALSE(ec); });
  run_all(io);
  CHECK(*short_one.ec == cv::errc::datagram_truncated);
  CHECK(short_one.r.bytes == 16);
  CHECK(std::memcmp(p.remote.data(), p.local.data(), 16) == 0);
  CHECK(next.ec == cv::error_code{});
  CHECK(next.r.bytes == 50);
  CHECK(p.b.error() == cv::error_code{});
}

TEST_CASE("receives beyond the queue's depth wait for credits, and each GRH slot serves many", "[soft][datagram]") {
  asio::io_context io;
  constexpr std::uint32_t depth = 8;
  constexpr int n = 10 * depth;
  soft_verbs::soft_datagram_pair p(io, small(depth), 8 * n);
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    p.b.async_recv(p.remote_span(8, 8 * static_cast<std::size_t>(i)), [&, i](cv::error_code ec, cv::received_datagram r) {
      CHECK(ec == cv::error_code{});
      CHECK(r.bytes == 4);
      CHECK(r.sender.qp_num == p.a.qp_num());
      order.push_back(i);
    });
  int sent_ok = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < n; ++i) {
          std::int32_t v = i;
          std::memcpy(p.local.data() + 8 * i, &v, 4);
          (void)co_await p.a.async_send_to(p.to_b(), p.local_span(4, 8 * static_cast<std::size_t>(i)),
                                           asio::use_awaitable);
          ++sent_ok;
        }
      },
      asio::detached);
  run_all(io);
  CHECK(sent_ok == n);
  REQUIRE(order.size() == n);
  for (int i = 0; i < n; ++i) {
    CHECK(order[static_cast<std::size_t>(i)] == i);
    std::int32_t v = -1;
    std::memcpy(&v, p.remote.data() + 8 * i, 4);
    CHECK(v == i);  // receive i got datagram i
  }
  CHECK(p.soft.datagrams_dropped() == 0);
}

TEST_CASE("datagram operations complete with every completion token", "[soft][datagram]") {
  asio::io_context io;
  soft_verbs::soft_datagram_pair p(io, small(), 4096);
  int finished = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        p.b.async_recv(p.remote_span(64), [](cv::error_code ec, cv::received_datagram) { CHECK_FALSE(ec); });
        std::size_t n = co_await p.a.async_send_to(p.to_b(), p.local_span(7), asio::use_awaitable);
        CHECK(n == 7);
        asio::co_spawn(
            io,
            [&]() -> asio::awaitable<void> {
              const cv::received_datagram r = co_await p.b.async_recv(p.remote_span(64), asio::deferred);
              CHECK(r.bytes == 9);
              ++finished;
            },
            asio::detached);
        co_await asio::post(io, asio::deferred);  // the receiver posts its receive first (UD drops a datagram with none)
        n = co_await p.a.async_send_to(p.to_b(), p.local_span(9), asio::deferred);
        CHECK(n == 9);
        p.b.async_recv(p.remote_span(64), [](cv::error_code, cv::received_datagram) {});
        auto [ec, m] = co_await p.a.async_send_to_with_imm(p.to_b(), p.local_span(3), 5, asio::as_tuple(asio::use_awaitable));
        CHECK_FALSE(ec);
        CHECK(m == 3);
        ++finished;
      },
      asio::detached);
  run_all(io);
  CHECK(finished == 2);
  std::future<cv::received_datagram> f = p.b.async_recv(p.remote_span(64), asio::use_future);
  p.a.async_send_to(p.to_b(), p.local_span(11), [](cv::error_code ec, std::size_t) { CHECK_FALSE(ec); });
  run_all(io);
  REQUIRE(f.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  CHECK(f.get().bytes == 11);
}

TEST_CASE("destruction flushes posted receives with wr_flush_err, through the executor", "[soft][datagram]") {
  asio::io_context io;
  std::optional<cv::error_code> ec;
  {
    soft_verbs::soft_datagram_pair p(io, small(), 4096);
    p.b.async_recv(p.remote_span(64), [&](cv::error_code e, cv::received_datagram) { ec = e; });
  }
  CHECK_FALSE(ec);
  run_all(io);
  REQUIRE(ec);
  CHECK(*ec == cv::wc_errc::wr_flush_err);
}
