// shared_receive_queue on rxe: receives posted once for several queue pairs report which one a message
// came to; more receives than max_wr wait their turn; the low watermark (IBV_EVENT_SRQ_LIMIT_REACHED
// through device_events) drives replenishing for a fan-in of more senders than posted receives; bad input
// is refused with the errc that names it.
#include "fixtures/completion.hpp"
#include "fixtures/event_loop.hpp"
#include "fixtures/test_buffer.hpp"

#ifdef COVERBS_HAS_RDMACM
#include <coverbs/cm.hpp>
#endif

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace asio = boost::asio;
namespace cv = coverbs;
using cv::errc;
using cv::error_code;
using test::test_buffer;

namespace {

constexpr std::size_t slot = 64;  // bytes of one message / receive buffer

/// A loop, the device, a protection domain and a completion queue of depth 1024.
struct device_cq : test::event_loop {
  cv::device dev = cv::device::open();
  cv::protection_domain pd{dev};
  cv::completion_queue cq{io, dev, options()};
  static cv::completion_queue_options options() {
    cv::completion_queue_options o;
    o.depth = 1024;
    return o;
  }
};

/// An SRQ on the completion queue and `n` loopback RC pairs: senders[i] -> receivers[i], the receivers
/// attached to the SRQ. Declared so that the queue pairs go before the SRQ, the SRQ before the CQ.
struct srq_fixture : device_cq {
  cv::shared_receive_queue srq;
  std::deque<cv::queue_pair> senders, receivers;

  srq_fixture(std::size_t n, cv::srq_options so) : srq(pd, cq, so) {
    cv::queue_pair_options o;
    o.max_send_wr = 4;
    o.max_recv_wr = 4;
    o.min_rnr_timer = 1;  // a send that found no receive retries after 0.01 ms
    cv::queue_pair_options attached = o;
    attached.srq = &srq;
    for (std::size_t i = 0; i < n; ++i) {
      senders.emplace_back(pd, cq, o);
      receivers.emplace_back(pd, cq, attached);
      cv::connect_pair(senders.back(), receivers.back());
    }
  }
  ~srq_fixture() {
    senders.clear();
    receivers.clear();
  }
};

std::string message(std::size_t sender, std::size_t seq) {
  std::string m = "sender " + std::to_string(sender) + " message " + std::to_string(seq) + " ";
  m.resize(slot, char('a' + (sender + seq) % 26));
  return m;
}

}  // namespace

TEST_CASE("an SRQ receive scattered into a header and a body fills them in order; too many spans are refused",
          "[srq][sg]") {
  srq_fixture f(1, {.max_wr = 4, .max_sge = 2, .limit = 0});
  test_buffer in(f.pd, 4096), out(f.pd, 4096);
  for (std::size_t i = 0; i < 1000; ++i) out.bytes[i] = std::byte('a' + i % 26);
  std::optional<error_code> got;
  cv::srq_received r{};
  f.srq.async_recv(std::array{in.span(0, 16), in.span(100, 2000)}, [&](error_code ec, cv::srq_received m) {
    got = ec;
    r = m;
  });
  std::optional<error_code> refused;
  f.srq.async_recv(std::array{in.span(3000, 8), in.span(3100, 8), in.span(3200, 8)},
                   [&](error_code ec, cv::srq_received) { refused = ec; });
  int sent = 0;
  f.senders[0].async_send(out.span(0, 1000), [&](error_code ec, std::size_t) {
    CHECK_FALSE(ec);
    ++sent;
  });
  REQUIRE(f.run_until([&] { return got && refused && sent == 1; }));
  CHECK(*refused == cv::errc::too_many_spans);  // 3 spans, max_sge 2: before posting
  REQUIRE_FALSE(*got);
  CHECK(r.bytes == 1000);
  CHECK(r.qp_num == f.receivers[0].qp_num());
  CHECK(std::memcmp(in.bytes.data(), out.bytes.data(), 16) == 0);
  CHECK(std::memcmp(in.bytes.data() + 100, out.bytes.data() + 16, 984) == 0);
  CHECK(f.srq.posted() == 0);
}

TEST_CASE("receives on one SRQ arrive for several queue pairs and report which, with bytes and immediate data",
          "[srq]") {
  srq_fixture f(3, {.max_wr = 16, .max_sge = 1, .limit = 0});
  test_buffer in(f.pd, 9 * slot), out(f.pd, 9 * slot);
  for (std::size_t s = 0; s < 3; ++s)
    for (std::size_t k = 0; k < 3; ++k)
      std::memcpy(out.bytes.data() + (s * 3 + k) * slot, message(s, k).data(), slot);

  std::vector<cv::srq_received> got(9);
  std::vector<std::optional<error_code>> ecs(9);
  for (std::size_t i = 0; i < 9; ++i)
    f.srq.async_recv(in.span(i * slot, slot), [&, i](error_code ec, cv::srq_received r) {
      ecs[i] = ec;
      got[i] = r;
    });
  CHECK(f.srq.posted() == 9);
  int sent = 0;
  for (std::size_t s = 0; s < 3; ++s)
    for (std::size_t k = 0; k < 3; ++k) {
      auto buf = out.span((s * 3 + k) * slot, slot - k);  // lengths 64, 63, 62 tell the sends apart
      auto done = [&](error_code ec, std::size_t) {
        CHECK_FALSE(ec);
        ++sent;
      };
      if (k == 2)
        f.senders[s].async_send(buf, done);
      else
        f.senders[s].async_send_with_imm(buf, std::uint32_t(s * 100 + k), done);
    }
  REQUIRE(f.run_until([&] { return sent == 9 && std::all_of(ecs.begin(), ecs.end(), [](auto& e) { return bool(e); }); }));

  std::map<std::uint32_t, std::size_t> receiver_of;  // qp_num -> index
  for (std::size_t s = 0; s < 3; ++s)
    receiver_of[f.receivers[s].qp_num()] = s;
  std::set<std::pair<std::size_t, std::size_t>> seen;
  for (std::size_t i = 0; i < 9; ++i) {
    REQUIRE_FALSE(*ecs[i]);
    const cv::srq_received& r = got[i];
    REQUIRE(receiver_of.count(r.qp_num));  // the queue pair it arrived on is one of the receivers
    const std::size_t s = receiver_of[r.qp_num];
    const std::string text = in.str(i * slot, r.bytes);
    const std::size_t k = slot - r.bytes;
    REQUIRE(k < 3);
    CHECK(text == message(s, k).substr(0, slot - k));  // the sender that queue pair is connected to
    if (k == 2)
      CHECK_FALSE(r.imm);
    else
      CHECK(r.imm == std::uint32_t(s * 100 + k));
    CHECK_FALSE(r.rdma_with_imm);
    seen.insert({s, k});
  }
  CHECK(seen.size() == 9);
  CHECK(f.srq.posted() == 0);

  // write_with_imm consumes an SRQ receive too, and says so.
  std::optional<error_code> ec;
  cv::srq_received r;
  f.srq.async_recv(in.span(0, slot), [&](error_code e, cv::srq_received v) {
    ec = e;
    r = v;
  });
  f.senders[1].async_write_with_imm(out.span(0, 8), in.key(), 77, [](error_code e, std::size_t) { CHECK_FALSE(e); });
  REQUIRE(f.run_until([&] { return ec.has_value(); }));
  CHECK_FALSE(*ec);
  CHECK(r.rdma_with_imm);
  CHECK(r.imm == 77u);
  CHECK(r.qp_num == f.receivers[1].qp_num());
}

TEST_CASE("more receives than max_wr wait in FIFO order and are posted as receives complete", "[srq][credits]") {
  srq_fixture f(1, {.max_wr = 4, .max_sge = 1, .limit = 0});
  constexpr std::size_t n = 10;
  test_buffer in(f.pd, n * slot), out(f.pd, n * slot);
  std::vector<std::optional<error_code>> ecs(n);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < n; ++i)
    f.srq.async_recv(in.span(i * slot, slot), [&, i](error_code ec, cv::srq_received) {
      ecs[i] = ec;
      order.push_back(i);
    });
  CHECK(f.srq.posted() == 4);
  CHECK(f.srq.waiting() == 6);
  CHECK(f.srq.max_wr() == 4);
  asio::co_spawn(
      f.io,
      [&]() -> asio::awaitable<void> {
        for (std::size_t i = 0; i < n; ++i) {
          std::memcpy(out.bytes.data() + i * slot, message(0, i).data(), slot);
          co_await f.senders[0].async_send(out.span(i * slot, slot));
        }
      },
      asio::detached);
  REQUIRE(f.run_until([&] { return order.size() == n; }));
  for (std::size_t i = 0; i < n; ++i) {
    CHECK_FALSE(*ecs[i]);
    CHECK(order[i] == i);
    CHECK(in.str(i * slot, slot) == message(0, i));  // a single queue pair consumes them in posting order
  }
  CHECK(f.srq.posted() == 0);
  CHECK(f.srq.waiting() == 0);
}

TEST_CASE("the low watermark fires and replenishing on it keeps a fan-in of more senders than posted receives going",
          "[srq][limit]") {
  // 20 senders, 16 receives posted at a time, limit 8: the first 16 receives run out unless the limit event
  // brings more. Each event posts 8 more (those beyond the free credits wait and are posted as receives
  // complete), then re-arms the one-shot limit.
  constexpr std::size_t senders = 20, per_sender = 10, total = senders * per_sender;
  constexpr std::uint32_t max_wr = 16, limit = 8;
  srq_fixture f(senders, {.max_wr = max_wr, .max_sge = 1, .limit = 0});
  cv::device_events events(f.io, f.dev);
  test_buffer in(f.pd, total * slot), out(f.pd, total * slot);

  std::size_t next_slot = 0, received = 0, limit_events = 0, sent = 0;
  std::vector<std::string> failures;
  std::set<std::pair<std::size_t, std::size_t>> seen;
  std::map<std::uint32_t, std::size_t> receiver_of;
  for (std::size_t s = 0; s < senders; ++s)
    receiver_of[f.receivers[s].qp_num()] = s;

  auto post = [&](std::size_t count) {
    for (; count > 0 && next_slot < total; --count) {
      const std::size_t i = next_slot++;
      f.srq.async_recv(in.span(i * slot, slot), [&, i](error_code ec, cv::srq_received r) {
        if (ec) return failures.push_back("receive: " + ec.message());
        const std::size_t s = r.imm ? *r.imm >> 16 : senders, k = r.imm ? *r.imm & 0xffff : 0;
        if (!receiver_of.count(r.qp_num) || receiver_of[r.qp_num] != s || r.bytes != slot ||
            in.str(i * slot, slot) != message(s, k) || !seen.insert({s, k}).second)
          failures.push_back("message " + std::to_string(i) + " not as sent");
        ++received;
      });
    }
  };
  std::function<void()> wait_limit = [&] {
    f.srq.async_wait_limit([&](error_code ec) {
      if (ec) return;
      ++limit_events;
      post(max_wr - limit);
      if (next_slot < total) {
        f.srq.set_limit(limit);
        wait_limit();
      }
    });
  };
  post(max_wr);
  f.srq.set_limit(limit);
  wait_limit();

  for (std::size_t s = 0; s < senders; ++s)
    asio::co_spawn(
        f.io,
        [&, s]() -> asio::awaitable<void> {
          for (std::size_t k = 0; k < per_sender; ++k) {
            const std::size_t i = s * per_sender + k;
            std::memcpy(out.bytes.data() + i * slot, message(s, k).data(), slot);
            auto [ec, n] = co_await f.senders[s].async_send_with_imm(out.span(i * slot, slot),
                                                                     std::uint32_t(s << 16 | k),
                                                                     asio::as_tuple(asio::use_awaitable));
            if (ec) failures.push_back("send: " + ec.message());  // an RNR error would show here
            ++sent;
          }
        },
        asio::detached);

  REQUIRE(f.run_until([&] { return (received == total && sent == total) || !failures.empty(); },
                      std::chrono::seconds(240)));
  INFO(limit_events << " limit events");
  CHECK(failures.empty());
  CHECK(received == total);
  CHECK(seen.size() == total);  // every message verified, each once
  // Only limit events post receives beyond the first max_wr, max_wr - limit each.
  CHECK(limit_events * (max_wr - limit) >= total - max_wr);
  CHECK(f.srq.posted() == 0);
  CHECK(f.srq.waiting() == 0);
}

TEST_CASE("a queue pair of the SRQ that fails leaves the SRQ working for the others", "[srq][errors]") {
  srq_fixture f(2, {.max_wr = 8, .max_sge = 1, .limit = 0});
  test_buffer in(f.pd, 4 * slot), out(f.pd, slot);
  std::vector<test::completion<cv::srq_received>> r(4);
  for (std::size_t i = 0; i < 4; ++i)
    f.srq.async_recv(in.span(i * slot, slot), r[i].handler());
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  f.receivers[0].modify(attr, IBV_QP_STATE);  // as a peer's disconnect or a fatal event would
  test::completion<std::size_t> sent;
  f.senders[1].async_send(out.span(0, 7), sent.handler());
  REQUIRE(f.run_until([&] { return r[0].done() && sent.done(); }));
  CHECK_FALSE(*sent.ec);
  CHECK_FALSE(*r[0].ec);
  CHECK(r[0].value.qp_num == f.receivers[1].qp_num());
  CHECK(r[0].value.bytes == 7);
  CHECK(f.srq.posted() == 3);  // the failed queue pair took none of them
  CHECK_FALSE(r[1].done());
}

TEST_CASE("a queue pair attached to an SRQ refuses its own async_recv with receive_queue_is_shared",
          "[srq][errors]") {
  srq_fixture f(1, {.max_wr = 4, .max_sge = 1, .limit = 0});
  test_buffer in(f.pd, slot);
  test::completion<cv::received> c;
  f.receivers[0].async_recv(in.span(), c.handler());
  CHECK_FALSE(c.done());  // never inside the initiating function
  REQUIRE(f.run_until([&] { return c.done(); }));
  CHECK(*c.ec == errc::receive_queue_is_shared);
  CHECK(c.ec->message().find("shared_receive_queue::async_recv") != std::string::npos);
  CHECK(f.receivers[0].error() == error_code{});  // nothing was posted; the queue pair stays healthy
  CHECK(f.srq.attached() == 1);

  // The queue pair works: a message to it lands in an SRQ receive.
  test_buffer out(f.pd, slot);
  test::completion<cv::srq_received> r;
  f.srq.async_recv(in.span(), r.handler());
  f.senders[0].async_send(out.span(0, 5), [](error_code ec, std::size_t) { CHECK_FALSE(ec); });
  REQUIRE(f.run_until([&] { return r.done(); }));
  CHECK_FALSE(*r.ec);
  CHECK(r.value.bytes == 5);
  CHECK(r.value.qp_num == f.receivers[0].qp_num());
}

TEST_CASE("a queue pair attached to an SRQ must receive on the SRQ's completion queue", "[srq][errors]") {
  srq_fixture f(0, {.max_wr = 4, .max_sge = 1, .limit = 0});
  cv::completion_queue other(f.io, f.dev);
  cv::queue_pair_options o;
  o.srq = &f.srq;
  try {
    cv::queue_pair qp(f.pd, other, o);
    FAIL("a queue pair on another completion queue was attached");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == errc::srq_cq_mismatch);
  }
  CHECK(f.srq.attached() == 0);
  // Another send queue is fine: only the receive completion queue matters.
  cv::queue_pair qp(f.pd, other, f.cq, o);
  CHECK(f.srq.attached() == 1);
}

TEST_CASE("an SRQ larger than the device allows is refused with device_limit_exceeded naming the limit",
          "[srq][errors]") {
  device_cq f;
  cv::device& dev = f.dev;
  cv::protection_domain& pd = f.pd;
  cv::completion_queue& cq = f.cq;
  ibv_device_attr attr{};
  REQUIRE(ibv_query_device(dev.native_handle(), &attr) == 0);
  const std::uint32_t max = static_cast<std::uint32_t>(attr.max_srq_wr);
  try {
    cv::shared_receive_queue srq(pd, cq, {.max_wr = max + 1, .max_sge = 1, .limit = 0});
    FAIL("max_wr above max_srq_wr was accepted");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == errc::device_limit_exceeded);
    const std::string what = e.what();
    CHECK(what.find("max_wr") != std::string::npos);
    CHECK(what.find("max_srq_wr") != std::string::npos);
    CHECK(what.find(std::to_string(max)) != std::string::npos);
  }
  CHECK(cq.outstanding() == 0);
  // Nothing was reserved by the refused SRQ: one of the largest size fits after it (if the queue holds it).
  cv::shared_receive_queue fits(pd, cq, {.max_wr = 16, .max_sge = 1, .limit = 0});
  CHECK_THROWS_AS(fits.set_limit(17), cv::system_error);
}

TEST_CASE("destroying an SRQ aborts its posted and waiting receives, and cancellation reaches only waiting ones",
          "[srq][lifetime]") {
  device_cq loop;
  cv::protection_domain& pd = loop.pd;
  cv::completion_queue& cq = loop.cq;
  test_buffer in(pd, 4 * slot);
  std::vector<std::optional<error_code>> ecs(4);
  asio::cancellation_signal cancel_posted, cancel_waiting;
  std::optional<error_code> limit_ec;
  {
    cv::shared_receive_queue srq(pd, cq, {.max_wr = 2, .max_sge = 1, .limit = 0});
    for (std::size_t i = 0; i < 4; ++i) {
      auto h = [&, i](error_code ec, cv::srq_received) { ecs[i] = ec; };
      if (i == 0)
        srq.async_recv(in.span(i * slot, slot), asio::bind_cancellation_slot(cancel_posted.slot(), h));
      else if (i == 3)
        srq.async_recv(in.span(i * slot, slot), asio::bind_cancellation_slot(cancel_waiting.slot(), h));
      else
        srq.async_recv(in.span(i * slot, slot), h);
    }
    srq.async_wait_limit([&](error_code ec) { limit_ec = ec; });
    CHECK(srq.posted() == 2);
    CHECK(srq.waiting() == 2);
    cancel_posted.emit(asio::cancellation_type::terminal);  // posted: not supported, nothing happens
    cancel_waiting.emit(asio::cancellation_type::terminal);
    CHECK(srq.posted() == 2);
    CHECK(srq.waiting() == 1);
    REQUIRE(loop.run_until([&] { return ecs[3].has_value(); }));
    CHECK(*ecs[3] == asio::error::operation_aborted);
    CHECK_FALSE(ecs[0].has_value());
    CHECK(cq.outstanding() == 2);
  }
  CHECK_FALSE(ecs[0].has_value());  // never inside the destructor
  REQUIRE(loop.run_until([&] { return ecs[0] && ecs[1] && ecs[2] && limit_ec; }));
  for (auto& ec : ecs)
    CHECK(*ec == asio::error::operation_aborted);
  CHECK(*limit_ec == asio::error::operation_aborted);
  CHECK(cq.outstanding() == 0);
}

TEST_CASE("a loop whose SRQ was destroyed with receives posted runs out of work and returns from run()",
          "[srq][lifetime]") {
  // The aborted receives produce no completion and so no channel event: the queue's readiness wait must
  // end by itself, or io_context::run() never returns.
  device_cq loop;
  test_buffer in(loop.pd, slot);
  std::optional<error_code> ec;
  {
    cv::shared_receive_queue srq(loop.pd, loop.cq, {.max_wr = 4, .max_sge = 1, .limit = 0});
    srq.async_recv(in.span(0, slot), [&](error_code e, cv::srq_received) { ec = e; });
    loop.io.restart();
    loop.io.run_for(std::chrono::milliseconds(50));  // the queue arms and waits on its channel
    CHECK(loop.cq.outstanding() == 1);
  }
  loop.io.restart();
  loop.io.run_for(test::scaled(std::chrono::seconds(5)));
  REQUIRE(ec);
  CHECK(*ec == asio::error::operation_aborted);
  CHECK(loop.io.stopped());  // out of work, not out of time
}

TEST_CASE("work posted right after an SRQ's receives were abandoned still completes", "[srq][lifetime]") {
  // The SRQ's destructor stops the queue's wait; a send posted before that stop is handled keeps the
  // queue waiting for its completion.
  device_cq loop;
  test_buffer in(loop.pd, slot), out(loop.pd, slot);
  loop.io.restart();
  std::optional<error_code> sent, received;
  {
    cv::shared_receive_queue srq(loop.pd, loop.cq, {.max_wr = 4, .max_sge = 1, .limit = 0});
    srq.async_recv(in.span(0, slot), [](error_code, cv::srq_received) {});
    loop.io.run_for(std::chrono::milliseconds(50));
  }
  cv::queue_pair a(loop.pd, loop.cq), b(loop.pd, loop.cq);
  cv::connect_pair(a, b);
  b.async_recv(in.span(0, slot), [&](error_code e, cv::received) { received = e; });
  a.async_send(out.span(0, 8), [&](error_code e, std::size_t) { sent = e; });
  REQUIRE(loop.run_until([&] { return sent && received; }, std::chrono::seconds(10)));
  CHECK(!*sent);
  CHECK(!*received);
}

#ifdef COVERBS_HAS_RDMACM
TEST_CASE("connections accepted onto one SRQ: every message of every client arrives, reported with its connection",
          "[srq][cm]") {
  constexpr std::size_t clients = 4, per_client = 8, total = clients * per_client;
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, "10.77.0.1", 0);
  cv::protection_domain pd(l.get_device());
  cv::completion_queue cq(loop.io, l.get_device());
  cv::shared_receive_queue srq(pd, cq, {.max_wr = total, .max_sge = 1, .limit = 0});
  test_buffer in(pd, total * slot);
  std::vector<cv::connection> client_conns, server_conns;  // destroyed before the SRQ
  std::vector<std::unique_ptr<test_buffer>> out;           // in the clients' own protection domains

  std::size_t received = 0, sent = 0;
  std::vector<std::string> failures;
  std::map<std::size_t, std::uint32_t> qp_of_client;
  for (std::size_t i = 0; i < total; ++i)
    srq.async_recv(in.span(i * slot, slot), [&, i](error_code ec, cv::srq_received r) {
      if (ec) return failures.push_back("receive: " + ec.message());
      const std::size_t c = r.imm ? *r.imm >> 16 : clients, k = r.imm ? *r.imm & 0xffff : 0;
      if (c >= clients || r.bytes != slot || in.str(i * slot, slot) != message(c, k))
        return failures.push_back("message " + std::to_string(i) + " not as sent");
      if (!qp_of_client.emplace(c, r.qp_num).first->second || qp_of_client[c] != r.qp_num)
        failures.push_back("client " + std::to_string(c) + " reported on two queue pairs");
      ++received;
    });

  cv::connection_options so;
  so.pd = &pd;
  so.cq = &cq;
  so.qp.srq = &srq;
  asio::co_spawn(
      ex,
      [&]() -> asio::awaitable<void> {
        for (std::size_t c = 0; c < clients; ++c)
          server_conns.push_back(co_await l.async_accept(so, asio::use_awaitable));
      },
      asio::detached);
  for (std::size_t c = 0; c < clients; ++c)
    asio::co_spawn(
        ex,
        [&, c]() -> asio::awaitable<void> {
          // Named first: GCC 12 frees a temporary of a co_await expression twice (programming-model.md).
          const cv::connect_options options;
          const std::uint16_t port = l.local_port();
          cv::connection conn = co_await cv::async_connect(ex, "10.77.0.1", port, options, asio::use_awaitable);
          auto& buf = *out.emplace_back(std::make_unique<test_buffer>(conn.pd(), per_client * slot));
          cv::queue_pair& qp = conn.qp();
          client_conns.push_back(std::move(conn));
          for (std::size_t k = 0; k < per_client; ++k) {
            std::memcpy(buf.bytes.data() + k * slot, message(c, k).data(), slot);
            auto [ec, n] = co_await qp.async_send_with_imm(buf.span(k * slot, slot), std::uint32_t(c << 16 | k),
                                                            asio::as_tuple(asio::use_awaitable));
            if (ec) failures.push_back("send: " + ec.message());
            ++sent;
          }
        },
        asio::detached);
  REQUIRE(loop.run_until([&] { return (received == total && sent == total) || !failures.empty(); },
                         std::chrono::seconds(120)));
  CHECK(failures.empty());
  CHECK(received == total);
  REQUIRE(server_conns.size() == clients);
  std::set<std::uint32_t> server_qps, reported;
  for (auto& c : server_conns)
    server_qps.insert(c.qp().qp_num());
  for (auto& [c, qp] : qp_of_client)
    reported.insert(qp);
  CHECK(reported == server_qps);  // one queue pair per client, each an accepted connection's
  CHECK(srq.attached() == clients);
  CHECK(srq.posted() == 0);
}
#endif
