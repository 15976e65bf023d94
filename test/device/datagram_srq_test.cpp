// Datagram (UD) queue pairs sharing one receive queue on a real device (rxe0 in the Soft-RoCE guest), as
// shared_receive_queue.hpp states it for `srq_options::datagram`: every receive reports the payload alone, the
// queue pair it arrived on and its sender; a datagram longer than the receive is truncated into it with the
// queue pairs healthy; more receives than the SRQ's depth wait for credits; a queue pair of the other transport
// is refused.
#include <coverbs/datagram_queue_pair.hpp>
#include <coverbs/queue_pair.hpp>
#include <coverbs/shared_receive_queue.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/event_loop.hpp"
#include "fixtures/test_buffer.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace cv = coverbs;
using test::completion;
using test::test_buffer;

namespace {

/// Two receiving datagram queue pairs on one datagram SRQ, and a sender with a handle to this device's GID.
struct ud_srq : test::event_loop {
  cv::device dev = cv::device::open();
  cv::protection_domain pd{dev};
  cv::completion_queue cq;
  cv::shared_receive_queue srq;
  cv::datagram_queue_pair r1, r2, sender;
  cv::address_handle here;

  static cv::srq_options srq_options(std::uint32_t depth) {
    cv::srq_options o;
    o.max_wr = depth;
    o.max_sge = 2;
    o.datagram = true;
    return o;
  }
  cv::datagram_options on_srq() {
    cv::datagram_options o;
    o.srq = &srq;
    return o;
  }
  explicit ud_srq(std::uint32_t depth = 64)
      : cq(io, dev), srq(pd, cq, srq_options(depth)),
        r1(pd, cq, on_srq()), r2(pd, cq, on_srq()), sender(pd, cq), here(pd, sender.local_gid().value, sender.port()) {}

  cv::datagram_destination to(const cv::datagram_queue_pair& q) const { return {&here, q.qp_num(), q.qkey()}; }
};

}  // namespace

TEST_CASE("datagram queue pairs on a datagram SRQ: each receive reports its queue pair and its sender", "[datagram_srq]") {
  ud_srq p;
  CHECK(p.srq.attached() == 2);
  test_buffer out(p.pd, 64), in(p.pd, 4 * 64);
  in.fill('#');
  std::vector<completion<cv::srq_received>> got(4);
  for (std::size_t i = 0; i < got.size(); ++i)
    p.srq.async_recv(in.span(64 * i, 64), got[i].handler());
  for (int i = 0; i < 4; ++i) {
    const std::string text = "datagram " + std::to_string(i);
    std::memcpy(out.bytes.data() + 16 * i, text.data(), text.size());
    completion<std::size_t> sent;
    p.sender.async_send_to(p.to(i % 2 ? p.r2 : p.r1), out.span(16 * i, text.size()), sent.handler());
    REQUIRE(p.run_until([&] { return sent.done(); }, std::chrono::seconds(10)));
    REQUIRE_FALSE(*sent.ec);
  }
  REQUIRE(p.run_until([&] { return got[3].done(); }, std::chrono::seconds(10)));
  std::set<std::string> texts;
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].done());
    REQUIRE_FALSE(*got[i].ec);
    const cv::srq_received& r = got[i].value;
    CHECK(r.bytes == 10);  // the payload alone: the GRH is not counted
    texts.insert(in.str(64 * i, r.bytes));
    CHECK(in.str(64 * i + r.bytes, 1) == "#");
    REQUIRE(r.sender);
    CHECK(r.sender->qp_num == p.sender.qp_num());
    CHECK(r.sender->source_gid == p.sender.local_gid().value);
    CHECK(r.sender->qkey == cv::rdma_cm_udp_qkey);
    CHECK((r.qp_num == p.r1.qp_num() || r.qp_num == p.r2.qp_num()));
    // The datagrams went to r1, r2, r1, r2: each receive names the one its datagram was sent to.
    const int n = in.str(64 * i + 9, 1)[0] - '0';
    CHECK(r.qp_num == (n % 2 ? p.r2 : p.r1).qp_num());
  }
  CHECK(texts == std::set<std::string>{"datagram 0", "datagram 1", "datagram 2", "datagram 3"});

  // A reply through a handle made from the sender reaches it.
  completion<cv::received_datagram> reply;
  p.sender.async_recv(in.span(0, 64), reply.handler());
  const cv::address_handle back(p.pd, *got[0].value.sender);
  completion<std::size_t> answered;
  p.r1.async_send_to({&back, got[0].value.sender->qp_num, p.sender.qkey()}, out.span(0, 4), answered.handler());
  REQUIRE(p.run_until([&] { return reply.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*reply.ec);
  CHECK(reply.value.sender.qp_num == p.r1.qp_num());

  // Scattered over two spans: the payload from the first span's first byte, the GRH in neither.
  in.fill('#');
  completion<cv::srq_received> two;
  p.srq.async_recv(std::array{in.span(0, 4), in.span(8, 16)}, two.handler());
  const std::string text = "scattered datagram";
  std::memcpy(out.bytes.data(), text.data(), text.size());
  p.sender.async_send_to(p.to(p.r2), out.span(0, text.size()), answered.handler());
  REQUIRE(p.run_until([&] { return two.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*two.ec);
  CHECK(two.value.bytes == text.size());
  CHECK(in.str(0, 4) + in.str(8, text.size() - 4) == text);
  CHECK(in.str(4, 4) == "####");
  CHECK(two.value.qp_num == p.r2.qp_num());
}

TEST_CASE("a datagram SRQ truncates a long datagram into a short receive and lets receives wait for credits",
          "[datagram_srq]") {
  constexpr std::uint32_t depth = 4;
  ud_srq p(depth);
  const std::size_t mtu = p.sender.max_datagram_size();
  test_buffer out(p.pd, mtu), in(p.pd, 16 + 8 * 4 * depth);
  for (std::size_t i = 0; i < mtu; ++i)
    out.bytes[i] = std::byte('a' + i % 26);

  completion<cv::srq_received> short_one;
  p.srq.async_recv(in.span(0, 16), short_one.handler());
  completion<std::size_t> sent;
  p.sender.async_send_to(p.to(p.r1), out.span(0, mtu), sent.handler());
  REQUIRE(p.run_until([&] { return short_one.done(); }, std::chrono::seconds(10)));
  CHECK(*short_one.ec == cv::errc::datagram_truncated);
  CHECK(short_one.value.bytes == 16);
  CHECK(in.str(0, 16) == "abcdefghijklmnop");
  REQUIRE(short_one.value.sender);
  CHECK(short_one.value.sender->qp_num == p.sender.qp_num());
  CHECK(p.r1.error() == cv::error_code{});

  // 4 x depth receives: only `depth` are posted at a time, the rest wait for credits and each one is filled.
  constexpr int n = 4 * depth;
  std::vector<completion<cv::srq_received>> got(n);
  for (int i = 0; i < n; ++i)
    p.srq.async_recv(in.span(16 + 8 * i, 8), got[i].handler());
  CHECK(p.srq.posted() == depth);
  CHECK(p.srq.waiting() == n - depth);
  int received = 0;
  for (int i = 0; i < n; ++i) {
    completion<std::size_t> s;
    p.sender.async_send_to(p.to(i % 2 ? p.r2 : p.r1), out.span(i, 1), s.handler());
    // UD has no receiver-not-ready: wait for each datagram's receive before the next is sent.
    REQUIRE(p.run_until([&] { return got[i].done(); }, std::chrono::seconds(10)));
    REQUIRE_FALSE(*got[i].ec);
    CHECK(got[i].value.bytes == 1);
    CHECK(in.str(16 + 8 * i, 1) == std::string(1, char('a' + i % 26)));
    ++received;
  }
  CHECK(received == n);
  CHECK(p.r1.error() == cv::error_code{});
  CHECK(p.r2.error() == cv::error_code{});
}

TEST_CASE("a queue pair of the other transport is refused by a shared receive queue", "[datagram_srq]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue cq(loop.io, dev);
  cv::srq_options ud;
  ud.max_wr = 16;
  ud.datagram = true;
  cv::shared_receive_queue datagram_srq(pd, cq, ud), rc_srq(pd, cq, cv::srq_options{.max_wr = 16});

  cv::queue_pair_options rc;
  rc.srq = &datagram_srq;
  try {
    cv::queue_pair qp(pd, cq, rc);
    FAIL("an RC queue pair was created on a datagram SRQ");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errc::srq_transport_mismatch);
    CHECK(std::string(e.what()).find("srq_options::datagram") != std::string::npos);
  }
  cv::datagram_options d;
  d.srq = &rc_srq;
  try {
    cv::datagram_queue_pair qp(pd, cq, d);
    FAIL("a datagram queue pair was created on an RC SRQ");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errc::srq_transport_mismatch);
  }
  CHECK(datagram_srq.attached() == 0);
  CHECK(rc_srq.attached() == 0);
  // A datagram queue pair on an SRQ has no receive queue of its own.
  d.srq = &datagram_srq;
  cv::datagram_queue_pair shared(pd, cq, d);
  test_buffer in(pd, 64);
  completion<cv::received_datagram> own;
  shared.async_recv(in.span(0, 64), own.handler());
  REQUIRE(loop.run_until([&] { return own.done(); }, std::chrono::seconds(10)));
  CHECK(*own.ec == cv::errc::receive_queue_is_shared);
}

TEST_CASE("an SRQ destroyed before its queue pairs serves them until the last one is destroyed", "[datagram_srq]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue cq(loop.io, dev);
  cv::srq_options o;
  o.max_wr = 8;
  o.datagram = true;
  auto srq = std::make_unique<cv::shared_receive_queue>(pd, cq, o);
  cv::datagram_options on_srq;
  on_srq.srq = srq.get();
  auto receiver = std::make_unique<cv::datagram_queue_pair>(pd, cq, on_srq);
  cv::datagram_queue_pair sender(pd, cq);
  const cv::address_handle here(pd, sender.local_gid().value, sender.port());
  test_buffer out(pd, 64), in(pd, 128);
  std::memcpy(out.bytes.data(), "still served", 12);
  completion<cv::srq_received> first, second;
  srq->async_recv(in.span(0, 64), first.handler());
  srq->async_recv(in.span(64, 64), second.handler());
  srq.reset();  // the queue pair still uses it: the SRQ lives on

  completion<std::size_t> sent;
  sender.async_send_to({&here, receiver->qp_num(), receiver->qkey()}, out.span(0, 12), sent.handler());
  REQUIRE(loop.run_until([&] { return first.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*first.ec);
  CHECK(in.str(0, 12) == "still served");
  REQUIRE(first.value.sender);
  CHECK(first.value.sender->qp_num == sender.qp_num());
  CHECK_FALSE(second.done());

  receiver.reset();  // the last queue pair: now the SRQ goes, and its posted receive is aborted
  CHECK_FALSE(second.done());  // posted to the executor, never run inside the destructor
  REQUIRE(loop.run_until([&] { return second.done(); }, std::chrono::seconds(10)));
  CHECK(*second.ec == boost::asio::error::operation_aborted);
}
