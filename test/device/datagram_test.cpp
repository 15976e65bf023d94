// Datagram (UD) queue pairs on a real device (rxe0 in the Soft-RoCE guest), as datagram_queue_pair.hpp states
// them: a receive reports its sender and its payload alone, from the first byte of the caller's spans; an
// address handle made from that sender answers it; what the device would drop while reporting success (a
// datagram above the path MTU) is refused before posting, what it drops by the rules (another Q_Key) is never
// delivered; a turn's sends share one doorbell; destruction flushes posted receives; a terminal cancellation
// of a posted receive is ignored; one queue pair takes the traffic of a thousand.
#include <coverbs/datagram_queue_pair.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/event_loop.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
using test::completion;
using test::test_buffer;

namespace {

/// Two datagram queue pairs on one completion queue, and an address handle to this device's own GID (both
/// queue pairs are reached through it).
struct ud_pair : test::event_loop {
  cv::device dev = cv::device::open();
  cv::protection_domain pd{dev};
  cv::completion_queue cq;
  cv::datagram_queue_pair a, b;
  cv::address_handle here;

  explicit ud_pair(cv::datagram_options o = {})
      : cq(io, dev), a(pd, cq, o), b(pd, cq, o), here(pd, a.local_gid().value, a.port()) {}

  cv::datagram_destination to_a() const { return {&here, a.qp_num(), a.qkey()}; }
  cv::datagram_destination to_b() const { return {&here, b.qp_num(), b.qkey()}; }
};

std::uint32_t qkey_violations(cv::device& dev) {
  ibv_port_attr attr{};
  REQUIRE(::ibv_query_port(dev.native_handle(), 1, &attr) == 0);
  return attr.qkey_viol_cntr;
}

/// Runs the loop for `d` (the receives that must stay pending get the chance to complete).
void run_for(test::event_loop& loop, std::chrono::milliseconds d) {
  loop.io.restart();
  loop.io.run_for(d);
}

}  // namespace

TEST_CASE("a datagram reports its sender: GID, queue pair number, Q_Key, service level", "[datagram]") {
  cv::datagram_options two;
  two.max_send_sge = two.max_recv_sge = 2;
  ud_pair p(two);
  CHECK(p.a.state() == IBV_QPS_RTS);
  CHECK(p.a.qkey() == cv::rdma_cm_udp_qkey);
  CHECK(p.a.local_gid().value == p.dev.default_gid(1).value);
  test_buffer out(p.pd, 64), in(p.pd, 96);
  const std::string text = "one datagram, scattered over two spans";
  std::memcpy(out.bytes.data(), text.data(), text.size());
  in.fill('#');

  // Two spans: 16 bytes, then 64 bytes 16 bytes further on (the 16 between must stay untouched).
  completion<cv::received_datagram> got;
  p.b.async_recv(std::array{in.span(0, 16), in.span(32, 64)}, got.handler());
  const std::size_t sent = p.run([&]() -> asio::awaitable<std::size_t> {
    co_return co_await p.a.async_send_to_with_imm(p.to_b(), out.span(0, text.size()), 0xC0FFEE);  // deferred
  });
  CHECK(sent == text.size());
  REQUIRE(p.run_until([&] { return got.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*got.ec);
  const cv::received_datagram& r = got.value;
  CHECK(r.bytes == text.size());               // the payload alone: the GRH is not counted
  CHECK(in.str(0, 16) == text.substr(0, 16));  // from the first byte of the first span
  CHECK(in.str(16, 16) == std::string(16, '#'));
  CHECK(in.str(32, text.size() - 16) == text.substr(16));
  CHECK(in.str(32 + text.size() - 16, 1) == "#");
  REQUIRE(r.imm);
  CHECK(*r.imm == 0xC0FFEE);
  CHECK(r.sender.source_gid == p.a.local_gid().value);
  CHECK(r.sender.ipv4 == p.a.local_gid().value.is_ipv4_mapped());
  CHECK(r.sender.qp_num == p.a.qp_num());
  CHECK(r.sender.qkey == p.b.qkey());
  CHECK(r.sender.sl == 0);  // the address handle's service level

  // One span, no immediate data, the other way round, through use_awaitable and as_tuple: b -> a.
  in.fill('#');
  p.run([&]() -> asio::awaitable<void> {
    completion<cv::received_datagram> back;
    p.a.async_recv(in.span(0, 96), back.handler());
    auto [ec, n] = co_await p.b.async_send_to(p.to_a(), std::array{out.span(0, 3), out.span(3, 2)},
                                              asio::as_tuple(asio::use_awaitable));
    CHECK_FALSE(ec);
    CHECK(n == 5);
    while (!back.done())
      co_await asio::post(p.io, asio::use_awaitable);
    CHECK_FALSE(*back.ec);
    CHECK(back.value.bytes == 5);
    CHECK_FALSE(back.value.imm);
    CHECK(in.str(0, 6) == text.substr(0, 5) + "#");
    CHECK(back.value.sender.qp_num == p.b.qp_num());
    CHECK(back.value.sender.source_gid == p.b.local_gid().value);
  });
  CHECK(p.a.error() == cv::error_code{});
  CHECK(p.b.error() == cv::error_code{});
}

TEST_CASE("an address handle made from a received datagram's sender reaches it", "[datagram]") {
  ud_pair p;
  test_buffer out(p.pd, 64), in(p.pd, 64), reply(p.pd, 64);
  std::memcpy(out.bytes.data(), "ping", 4);
  std::memcpy(reply.bytes.data(), "pong", 4);
  completion<cv::received_datagram> request, answer;
  completion<std::size_t> sent, replied;
  p.b.async_recv(in.span(0, 32), request.handler());
  p.a.async_recv(in.span(32, 32), answer.handler());
  p.a.async_send_to(p.to_b(), out.span(0, 4), sent.handler());
  REQUIRE(p.run_until([&] { return request.done() && sent.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*request.ec);

  // b knows a only from what arrived: its own handle from the sender, the sender's queue pair and Q_Key.
  const cv::datagram_sender& from = request.value.sender;
  cv::address_handle back(p.pd, from, p.b.port(), static_cast<int>(p.b.local_gid().index));
  CHECK(back.destination_gid() == p.a.local_gid().value);
  CHECK(back.port() == p.b.port());
  p.b.async_send_to({&back, from.qp_num, from.qkey}, reply.span(0, 4), replied.handler());
  REQUIRE(p.run_until([&] { return answer.done() && replied.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*replied.ec);
  REQUIRE_FALSE(*answer.ec);
  CHECK(answer.value.bytes == 4);
  CHECK(in.str(32, 4) == "pong");
  CHECK(answer.value.sender.qp_num == p.b.qp_num());

  // The handle ibv_init_ah_from_wc(3) would make from the same sender: the same destination and source GID.
  ibv_ah_attr attr{};
  ibv_wc wc{};
  wc.wc_flags = IBV_WC_GRH;
  wc.src_qp = from.qp_num;
  std::array<std::uint8_t, 40> grh{};
  if (from.ipv4) {  // RoCE v2 over IPv4: an IPv4 header at offset 20, destination = b's address
    std::uint8_t* ip = grh.data() + 20;
    ip[0] = 0x45;
    ip[8] = 64;
    ip[9] = 17;
    std::memcpy(ip + 12, from.source_gid.raw.data() + 12, 4);
    std::memcpy(ip + 16, p.b.local_gid().value.raw.data() + 12, 4);
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
      sum += static_cast<std::uint32_t>(ip[i] << 8 | ip[i + 1]);
    while (sum >> 16)
      sum = (sum & 0xffff) + (sum >> 16);
    ip[10] = static_cast<std::uint8_t>(~sum >> 8);
    ip[11] = static_cast<std::uint8_t>(~sum);
  } else {
    grh[0] = 0x60;
    std::memcpy(grh.data() + 8, from.source_gid.raw.data(), 16);
    std::memcpy(grh.data() + 24, p.b.local_gid().value.raw.data(), 16);
  }
  REQUIRE(::ibv_init_ah_from_wc(p.dev.native_handle(), p.b.port(), &wc, reinterpret_cast<ibv_grh*>(grh.data()),
                                &attr) == 0);
  CHECK(attr.is_global == 1);
  CHECK(std::memcmp(attr.grh.dgid.raw, from.source_gid.raw.data(), 16) == 0);
  CHECK(attr.grh.sgid_index == p.b.local_gid().index);
}

TEST_CASE("a datagram longer than the path MTU is refused before posting; one of exactly the MTU arrives",
          "[datagram]") {
  ud_pair p;
  const std::size_t mtu = p.a.max_datagram_size();
  CHECK(mtu == p.dev.query_port(1).active_mtu_bytes());
  INFO("path MTU " << mtu);
  test_buffer out(p.pd, mtu + 1), in(p.pd, mtu + 64);
  for (std::size_t i = 0; i < out.bytes.size(); ++i)
    out.bytes[i] = std::byte(i * 13 % 251);
  const auto stats = p.cq.stats();

  completion<std::size_t> too_long, too_long_gathered, bad_qkey, no_handle;
  p.a.async_send_to(p.to_b(), out.span(0, mtu + 1), too_long.handler());
  CHECK_FALSE(too_long.done());  // completed through the executor, never inside the initiating function
  cv::datagram_options two;
  two.max_send_sge = 2;
  cv::datagram_queue_pair c(p.pd, p.cq, two);
  c.async_send_to(p.to_b(), std::array{out.span(0, mtu), out.span(mtu, 1)}, too_long_gathered.handler());
  p.a.async_send_to({&p.here, p.b.qp_num(), 0x80000000u | p.b.qkey()}, out.span(0, 8), bad_qkey.handler());
  p.a.async_send_to({nullptr, p.b.qp_num(), p.b.qkey()}, out.span(0, 8), no_handle.handler());
  REQUIRE(
      p.run_until([&] { return too_long.done() && too_long_gathered.done() && bad_qkey.done() && no_handle.done(); },
                  std::chrono::seconds(10)));
  CHECK(*too_long.ec == cv::errc::datagram_too_long);
  CHECK(*too_long.ec == boost::system::errc::message_size);
  CHECK(too_long.ec->message().find("max_datagram_size()") != std::string::npos);
  CHECK(*too_long_gathered.ec == cv::errc::datagram_too_long);
  CHECK(*bad_qkey.ec == cv::errc::invalid_qkey);
  CHECK(*no_handle.ec == cv::errc::address_handle_mismatch);
  CHECK(p.cq.stats().send_requests == stats.send_requests);  // nothing was posted
  CHECK(p.a.error() == cv::error_code{});
  CHECK(p.a.state() == IBV_QPS_RTS);
  CHECK(p.a.sends_outstanding() == 0);

  // The queue pair is healthy: a datagram of exactly the MTU arrives whole.
  completion<cv::received_datagram> got;
  completion<std::size_t> sent;
  p.b.async_recv(in.span(), got.handler());
  p.a.async_send_to(p.to_b(), out.span(0, mtu), sent.handler());
  REQUIRE(p.run_until([&] { return got.done() && sent.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*sent.ec);
  REQUIRE_FALSE(*got.ec);
  CHECK(got.value.bytes == mtu);
  CHECK(in.str(0, mtu) == out.str(0, mtu));
}

TEST_CASE("a datagram with another Q_Key is dropped by the device and never delivered", "[datagram]") {
  ud_pair p;
  test_buffer out(p.pd, 64), in(p.pd, 64);
  std::memcpy(out.bytes.data(), "wrongright", 10);
  const std::uint32_t violations = qkey_violations(p.dev);
  completion<cv::received_datagram> got;
  completion<std::size_t> wrong, right;
  p.b.async_recv(in.span(), got.handler());
  p.a.async_send_to({&p.here, p.b.qp_num(), p.b.qkey() + 1}, out.span(0, 5), wrong.handler());
  REQUIRE(p.run_until([&] { return wrong.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*wrong.ec);  // it left the port: UD reports no more
  run_for(p, std::chrono::milliseconds(300));
  CHECK_FALSE(got.done());                     // dropped at b: the receive is still posted
  CHECK(qkey_violations(p.dev) > violations);  // rxe counts the drop in the port's qkey_viol_cntr

  p.a.async_send_to(p.to_b(), out.span(5, 5), right.handler());
  REQUIRE(p.run_until([&] { return got.done() && right.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*got.ec);
  CHECK(got.value.bytes == 5);
  CHECK(in.str(0, 5) == "right");  // the same receive took the next datagram with the right Q_Key
  CHECK(p.b.error() == cv::error_code{});
}

TEST_CASE("send_to's initiated in one dispatch turn go out as one ibv_post_send", "[datagram]") {
  ud_pair p;  // send-queue depth 128: lists of up to 32
  constexpr int sends = 8;
  test_buffer out(p.pd, sends), in(p.pd, sends * 16);
  for (int i = 0; i < sends; ++i)
    out.bytes[i] = std::byte('A' + i);
  std::vector<completion<cv::received_datagram>> got(sends);
  for (int i = 0; i < sends; ++i)
    p.b.async_recv(in.span(i * 16, 16), got[i].handler());
  cv::completion_queue_stats before{};
  std::vector<int> order;
  int failures = 0;
  completion<std::size_t> first;
  p.a.async_send_to(p.to_b(), out.span(0, 1), [&](cv::error_code ec, std::size_t n) {  // runs in a turn
    first.ec = ec;
    first.value = n;
    before = p.cq.stats();
    for (int i = 0; i < sends; ++i)
      p.a.async_send_to(p.to_b(), out.span(i, 1), [&, i](cv::error_code e, std::size_t m) {
        if (e || m != 1) ++failures;
        order.push_back(i);
      });
  });
  REQUIRE(p.run_until([&] { return order.size() == sends; }, std::chrono::seconds(10)));
  const cv::completion_queue_stats after = p.cq.stats();
  CHECK_FALSE(*first.ec);
  CHECK(failures == 0);
  CHECK(std::is_sorted(order.begin(), order.end()));
  CHECK(after.send_doorbells - before.send_doorbells == 1);
  CHECK(after.send_requests - before.send_requests == sends);
  // The first datagram and the eight of the list: every receive but the last (the ninth has none) took one.
  REQUIRE(p.run_until([&] { return got.back().done(); }, std::chrono::seconds(10)));
  std::string arrived;
  for (int i = 0; i < sends; ++i) {
    REQUIRE(got[i].done());
    CHECK_FALSE(*got[i].ec);
    arrived += in.str(i * 16, 1);
  }
  CHECK(arrived == "AABCDEFG");  // one path keeps order
}

TEST_CASE("a send the device fails moves the datagram queue pair to the error state; reset() brings it back",
          "[datagram]") {
  ud_pair p;
  test_buffer out(p.pd, 256), in(p.pd, 256);
  std::memcpy(out.bytes.data(), "after reset", 11);
  completion<cv::received_datagram> pending;
  completion<std::size_t> failed;
  p.a.async_recv(in.span(0, 64), pending.handler());
  // Longer than max_inline_data (inline data needs no key): the device reads it through a key it does not have.
  const cv::registered_span bad{out.span(0, 128).bytes, out.span().lkey + 1};
  p.a.async_send_to(p.to_b(), bad, failed.handler());
  REQUIRE(p.run_until([&] { return failed.done() && pending.done(); }, std::chrono::seconds(10)));
  INFO("the send failed with " << failed.ec->message());
  CHECK(failed.ec->category() == cv::wc_category());
  CHECK(*pending.ec == cv::wc_errc::wr_flush_err);  // the receives are flushed too, as for RC
  CHECK(p.a.error() == *failed.ec);
  CHECK(p.a.state() == IBV_QPS_ERR);

  p.a.reset();
  CHECK(p.a.state() == IBV_QPS_RTS);
  CHECK(p.a.error() == cv::error_code{});
  completion<cv::received_datagram> got;
  completion<std::size_t> sent;
  p.a.async_recv(in.span(64, 64), got.handler());
  p.b.async_send_to(p.to_a(), out.span(0, 11), sent.handler());
  REQUIRE(p.run_until([&] { return got.done() && sent.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*got.ec);
  CHECK(in.str(64, 11) == "after reset");
}

TEST_CASE("destroying a datagram queue pair flushes its posted receives", "[datagram]") {
  ud_pair p;
  test_buffer in(p.pd, 3 * 64);
  std::vector<completion<cv::received_datagram>> got(3);
  {
    cv::datagram_queue_pair c(p.pd, p.cq);
    for (int i = 0; i < 3; ++i)
      c.async_recv(in.span(i * 64, 64), got[i].handler());
    run_for(p, std::chrono::milliseconds(20));
  }
  for (auto& g : got)
    CHECK_FALSE(g.done());  // never run inside the destructor
  REQUIRE(p.run_until([&] { return got[0].done() && got[1].done() && got[2].done(); }, std::chrono::seconds(10)));
  for (auto& g : got)
    CHECK(*g.ec == cv::wc_errc::wr_flush_err);
  CHECK(p.cq.outstanding() == 0);
}

TEST_CASE("a terminal cancellation of a posted datagram receive is ignored; one waiting for a credit is aborted",
          "[datagram]") {
  cv::datagram_options one;
  one.max_recv_wr = 1;
  ud_pair p(one);
  test_buffer out(p.pd, 8), in(p.pd, 128);
  std::memcpy(out.bytes.data(), "kept", 4);
  asio::cancellation_signal posted_signal, waiting_signal;
  completion<cv::received_datagram> posted, waiting;
  p.b.async_recv(in.span(0, 64), asio::bind_cancellation_slot(posted_signal.slot(), posted.handler()));
  p.b.async_recv(in.span(64, 64), asio::bind_cancellation_slot(waiting_signal.slot(), waiting.handler()));
  CHECK(p.b.native_handle());
  waiting_signal.emit(asio::cancellation_type::terminal);
  posted_signal.emit(asio::cancellation_type::terminal);
  run_for(p, std::chrono::milliseconds(100));
  REQUIRE(waiting.done());
  CHECK(*waiting.ec == asio::error::operation_aborted);
  CHECK_FALSE(posted.done());  // still posted, the queue pair untouched
  CHECK(p.b.error() == cv::error_code{});
  completion<std::size_t> sent;
  p.a.async_send_to(p.to_b(), out.span(0, 4), sent.handler());
  REQUIRE(p.run_until([&] { return posted.done() && sent.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*posted.ec);
  CHECK(in.str(0, 4) == "kept");
  CHECK(p.b.state() == IBV_QPS_RTS);
}

TEST_CASE("1,000 sending queue pairs through one receiving queue pair: every datagram exactly once",
          "[datagram][peers]") {
  constexpr std::size_t peers = 1000, each = 5, datagrams = peers * each;
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::protection_domain pd{dev};
  cv::completion_queue_options deep;
  deep.depth = 16384;  // 1,000 x (4 + 1) for the peers, 5,000 + 128 for the server
  cv::completion_queue cq(loop.io, dev, deep);
  cv::datagram_options server_options;
  server_options.max_recv_wr = datagrams;  // every datagram finds a receive: none is dropped for want of one
  cv::datagram_queue_pair server(pd, cq, server_options);
  cv::datagram_options peer_options;
  peer_options.max_send_wr = 4;  // the fifth datagram of each peer waits for a credit
  peer_options.max_recv_wr = 1;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<cv::datagram_queue_pair> clients;
  clients.reserve(peers);
  for (std::size_t i = 0; i < peers; ++i)
    clients.emplace_back(pd, cq, peer_options);
  const auto t1 = std::chrono::steady_clock::now();
  std::map<std::uint32_t, std::size_t> peer_of;  // qp_num -> index
  for (std::size_t i = 0; i < peers; ++i)
    peer_of[clients[i].qp_num()] = i;
  REQUIRE(peer_of.size() == peers);

  // A datagram is {peer index, sequence number}; a reply is the peer's own queue pair number.
  struct message {
    std::uint32_t peer, seq;
  };
  test_buffer out(pd, datagrams * sizeof(message)), in(pd, datagrams * sizeof(message)), replies(pd, peers * 4),
      answers(pd, peers * 4);
  cv::address_handle here(pd, server.local_gid().value, server.port());
  const cv::datagram_destination to_server{&here, server.qp_num(), server.qkey()};

  std::vector<std::array<int, each>> seen(peers, std::array<int, each>{});
  std::size_t received = 0, strangers = 0, errors = 0, answered = 0, wrong_answers = 0, replied = 0;
  std::optional<cv::address_handle> to_peers;  // one handle: every peer has this host's GID
  for (std::size_t k = 0; k < datagrams; ++k)
    server.async_recv(in.span(k * sizeof(message), sizeof(message)),
                      [&, k](cv::error_code ec, cv::received_datagram r) {
                        if (ec || r.bytes != sizeof(message)) return (void)++errors;
                        message m;
                        std::memcpy(&m, in.bytes.data() + k * sizeof(message), sizeof m);
                        const auto it = peer_of.find(r.sender.qp_num);
                        if (it == peer_of.end() || it->second != m.peer || m.seq >= each) return (void)++strangers;
                        ++seen[m.peer][m.seq];
                        ++received;
                        if (!to_peers)
                          to_peers.emplace(pd, r.sender, server.port(), static_cast<int>(server.local_gid().index));
                        if (std::count(seen[m.peer].begin(), seen[m.peer].end(), 1) != static_cast<long>(each)) return;
                        // The peer's last datagram: answer it with its own queue pair number.
                        const std::uint32_t qpn = r.sender.qp_num;
                        std::memcpy(replies.bytes.data() + m.peer * 4, &qpn, 4);
                        server.async_send_to({&*to_peers, qpn, r.sender.qkey}, replies.span(m.peer * 4, 4),
                                             [&](cv::error_code e, std::size_t) { e ? ++errors : ++replied; });
                      });
  for (std::size_t i = 0; i < peers; ++i)
    clients[i].async_recv(answers.span(i * 4, 4), [&, i](cv::error_code ec, cv::received_datagram r) {
      std::uint32_t qpn = 0;
      std::memcpy(&qpn, answers.bytes.data() + i * 4, 4);
      if (ec || r.bytes != 4 || qpn != clients[i].qp_num() || r.sender.qp_num != server.qp_num())
        ++wrong_answers;
      else
        ++answered;
    });
  std::size_t sent = 0;
  for (std::size_t seq = 0; seq < each; ++seq)
    for (std::size_t i = 0; i < peers; ++i) {
      const std::size_t k = seq * peers + i;
      const message m{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(seq)};
      std::memcpy(out.bytes.data() + k * sizeof m, &m, sizeof m);
      clients[i].async_send_to(to_server, out.span(k * sizeof m, sizeof m),
                               [&](cv::error_code e, std::size_t) { e ? ++errors : ++sent; });
    }
  const bool all =
      loop.run_until([&] { return answered + wrong_answers == peers || errors; }, std::chrono::seconds(120));
  const auto t2 = std::chrono::steady_clock::now();
  using ms = std::chrono::milliseconds;
  std::printf("datagram peers: %zu queue pairs made in %lld ms; %zu datagrams and %zu replies in %lld ms\n", peers,
              static_cast<long long>(std::chrono::duration_cast<ms>(t1 - t0).count()), received, replied,
              static_cast<long long>(std::chrono::duration_cast<ms>(t2 - t1).count()));
  CHECK(errors == 0);
  CHECK(strangers == 0);
  CHECK(sent == datagrams);
  CHECK(received == datagrams);
  std::size_t exactly_once = 0;
  for (const auto& s : seen)
    exactly_once += static_cast<std::size_t>(std::count(s.begin(), s.end(), 1));
  CHECK(exactly_once == datagrams);
  REQUIRE(all);
  CHECK(replied == peers);
  CHECK(answered == peers);
  CHECK(wrong_answers == 0);
  CHECK(server.error() == cv::error_code{});
}

TEST_CASE("a datagram longer than the receive is truncated into it; the queue pair every peer shares stays healthy",
          "[datagram]") {
  ud_pair p;
  test_buffer out(p.pd, 256), in(p.pd, 256);
  for (std::size_t i = 0; i < 256; ++i) out.bytes[i] = static_cast<std::byte>('a' + i % 26);
  in.fill('#');
  // The input a hostile peer sends: 100 bytes into an 8-byte receive (rxe failed such a receive with
  // loc_qp_op_err and moved the whole queue pair to the error state).
  completion<cv::received_datagram> small;
  completion<std::size_t> big;
  p.b.async_recv(in.span(0, 8), small.handler());
  p.a.async_send_to(p.to_b(), out.span(0, 100), big.handler());
  REQUIRE(p.run_until([&] { return small.done() && big.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*big.ec);
  CHECK(*small.ec == cv::errc::datagram_truncated);
  CHECK(*small.ec == boost::system::errc::message_size);
  CHECK(small.value.bytes == 8);
  CHECK(in.str(0, 8) == out.str(0, 8));
  CHECK(in.str(8, 8) == std::string(8, '#'));  // nothing beyond the caller's span
  CHECK(small.ec->message().find("max_datagram_size()") != std::string::npos);
  CHECK_FALSE(p.b.error());
  CHECK(p.b.state() == IBV_QPS_RTS);

  // Still serving: the next datagram arrives whole.
  completion<cv::received_datagram> next;
  completion<std::size_t> sent;
  p.b.async_recv(in.span(16, 64), next.handler());
  p.a.async_send_to(p.to_b(), out.span(0, 50), sent.handler());
  REQUIRE(p.run_until([&] { return next.done() && sent.done(); }, std::chrono::seconds(10)));
  REQUIRE_FALSE(*next.ec);
  CHECK(next.value.bytes == 50);
  CHECK(in.str(16, 50) == out.str(0, 50));
}

TEST_CASE("a destination queue pair number above 24 bits is refused before posting", "[datagram][errors]") {
  ud_pair p;
  test_buffer out(p.pd, 64);
  completion<std::size_t> wide;
  p.a.async_send_to({&p.here, 0x1000000u | p.b.qp_num(), p.b.qkey()}, out.span(0, 8), wide.handler());
  REQUIRE(p.run_until([&] { return wide.done(); }, std::chrono::seconds(10)));
  CHECK(*wide.ec == cv::errc::invalid_destination_qp);
  CHECK(wide.ec->message().find("0xFFFFFF") != std::string::npos);
  CHECK(p.a.sends_outstanding() == 0);
  CHECK_FALSE(p.a.error());
}
