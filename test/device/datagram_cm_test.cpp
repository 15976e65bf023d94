// Datagram peers found through rdma_cm on a real device (rxe0 with 10.77.0.1 in the Soft-RoCE guest): a
// datagram_listener answers service ID resolutions with its queue pairs' numbers (round robin), and
// async_resolve_datagram_peer turns the answer into a destination a datagram reaches; private data both ways;
// a port nobody serves, an address nobody has, cancellation and bad input fail with named errors in time; the
// listener refuses a queue pair rdma_cm would announce with the wrong Q_Key. One case resolves from a second
// process (this binary again, run on a hidden test case). Multicast: two members receive a third's datagram,
// and one that left receives nothing.
#include <coverbs/cm.hpp>
#include <coverbs/datagram_queue_pair.hpp>

#include "fixtures/event_loop.hpp"
#include "fixtures/private_data.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <catch2/catch.hpp>

#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using asio::use_awaitable;
using namespace boost::asio::experimental::awaitable_operators;
using test::bytes_of;
using test::prefix;
using test::test_buffer;

namespace {

constexpr const char* address = "10.77.0.1";  // veth0, under rxe0
constexpr const char* nobody = "10.77.0.9";   // on veth0's subnet, answers no ARP
constexpr auto as_tuple = asio::as_tuple(use_awaitable);
constexpr const char* child_port_variable = "COVERBS_DATAGRAM_CM_CHILD_PORT";

/// A datagram queue pair with its own domain and completion queue.
struct endpoint {
  cv::protection_domain pd;
  cv::completion_queue cq;
  cv::datagram_queue_pair qp;
  endpoint(test::event_loop& loop, cv::device& dev, cv::datagram_options o = {})
      : pd(dev), cq(loop.io, dev), qp(pd, cq, o) {}
};

/// A resolution completed through a callback (a datagram_peer is move-only).
struct resolved {
  std::optional<cv::error_code> ec;
  cv::datagram_peer peer;
  auto handler() {
    return [this](cv::error_code e, cv::datagram_peer p) {
      ec = e;
      peer = std::move(p);
    };
  }
  bool done() const { return ec.has_value(); }
};

/// `from` sends `text` to `to` (a resolved destination); `at` receives it. Returns what `at` received.
awaitable<cv::received_datagram> send_and_receive(endpoint& from, const cv::datagram_destination& to, endpoint& at,
                                                  std::string_view text, test_buffer& out, test_buffer& in) {
  std::memcpy(out.bytes.data(), text.data(), text.size());
  in.fill('#');
  auto [rec, sent] = co_await (at.qp.async_recv(in.span(), use_awaitable) &&
                               from.qp.async_send_to(to, out.span(0, text.size()), use_awaitable));
  CHECK(sent == text.size());
  co_return rec;
}

}  // namespace

TEST_CASE("a resolved datagram peer is the listener's queue pair: its number, rdma_cm's Q_Key, a working path, "
          "the listener's private data",
          "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint server(loop, dev), client(loop, dev);
  cv::datagram_listener_options lo;
  lo.private_data = bytes_of("from-listener");
  cv::datagram_listener l(loop.io, server.qp, address, 0, lo);
  REQUIRE(l.local_port() != 0);
  REQUIRE(l.get_device());
  test_buffer out(client.pd, 256), in(server.pd, 256), back(server.pd, 256), got(client.pd, 256);

  loop.run([&]() -> awaitable<void> {
    cv::datagram_resolve_options o;
    o.private_data = bytes_of("from-resolver");
    const auto start = std::chrono::steady_clock::now();
    cv::datagram_peer peer =
        co_await cv::async_resolve_datagram_peer(client.pd, client.qp, address, l.local_port(), o, use_awaitable);
    INFO("resolved in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s");
    CHECK(peer.qp_num == server.qp.qp_num());
    CHECK(peer.qkey == cv::rdma_cm_udp_qkey);
    CHECK(peer.ah.destination_gid() == server.qp.local_gid().value);
    CHECK(peer.private_data.size() == 136);  // a SIDR reply's room, zero-padded
    CHECK(prefix(peer.private_data, 14) == std::string("from-listener\0", 14));
    CHECK(l.stats().answered == 1);
    CHECK(l.stats().refused == 0);

    // The destination reaches the listener's queue pair, which answers the sender it reports.
    const cv::received_datagram r =
        co_await send_and_receive(client, peer.destination(), server, "through rdma_cm", out, in);
    CHECK(r.bytes == 15);
    CHECK(in.str(0, 15) == "through rdma_cm");
    CHECK(r.sender.qp_num == client.qp.qp_num());
    cv::address_handle reply_path(server.pd, r.sender, server.qp.port());
    const cv::received_datagram answer = co_await send_and_receive(
        server, {&reply_path, r.sender.qp_num, r.sender.qkey}, client, "answered", back, got);
    CHECK(answer.bytes == 8);
    CHECK(got.str(0, 8) == "answered");
  });
}

TEST_CASE("a resolution carries the resolver's private data to the listener's side", "[datagram_cm]") {
  // The datagram_listener keeps nothing of a request; a raw UDP-port-space listener shows what arrives.
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint client(loop, dev);
  rdma_event_channel* channel = rdma_create_event_channel();
  REQUIRE(channel);
  REQUIRE(::fcntl(channel->fd, F_SETFL, ::fcntl(channel->fd, F_GETFL) | O_NONBLOCK) == 0);
  rdma_cm_id* listen_id = nullptr;
  REQUIRE(rdma_create_id(channel, &listen_id, nullptr, RDMA_PS_UDP) == 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  REQUIRE(inet_pton(AF_INET, address, &a.sin_addr) == 1);
  REQUIRE(rdma_bind_addr(listen_id, reinterpret_cast<sockaddr*>(&a)) == 0);
  REQUIRE(rdma_listen(listen_id, 4) == 0);
  const std::uint16_t port = ntohs(rdma_get_src_port(listen_id));

  resolved r;
  cv::datagram_resolve_options o;
  o.private_data = bytes_of(std::string(179, 'p') + "!");  // 180 bytes: the most a request carries
  cv::async_resolve_datagram_peer(client.pd, client.qp, address, port, o, r.handler());
  rdma_cm_event* ev = nullptr;
  // The request is read here, between turns of the loop that drives the resolver.
  const bool requested =
      loop.run_until([&] { return ev || rdma_get_cm_event(channel, &ev) == 0; }, std::chrono::seconds(10));
  INFO("the resolver: " << (r.done() ? r.ec->message() : std::string("pending")));
  REQUIRE(requested);
  REQUIRE(ev->event == RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(ev->param.ud.private_data_len >= 180);
  const std::string carried(static_cast<const char*>(ev->param.ud.private_data), 180);
  CHECK(carried == std::string(179, 'p') + "!");
  rdma_cm_id* request = ev->id;
  rdma_conn_param p{};
  p.qp_num = 0x123;  // any number: this listener answers for a queue pair that does not exist
  rdma_ack_cm_event(ev);
  REQUIRE(rdma_accept(request, &p) == 0);
  REQUIRE(loop.run_until([&] { return r.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*r.ec);
  CHECK(r.peer.qp_num == 0x123);
  CHECK(r.peer.qkey == cv::rdma_cm_udp_qkey);
  rdma_destroy_id(request);
  rdma_destroy_id(listen_id);
  rdma_destroy_event_channel(channel);

  // 181 bytes are refused before anything starts.
  o.private_data.push_back(std::byte{0});
  resolved too_long;
  cv::async_resolve_datagram_peer(client.pd, client.qp, address, port, o, too_long.handler());
  CHECK_FALSE(too_long.done());  // never inside the initiating function
  REQUIRE(loop.run_until([&] { return too_long.done(); }, std::chrono::seconds(5)));
  CHECK(*too_long.ec == cv::errc::private_data_too_long);
}

TEST_CASE("a datagram listener answers with its queue pairs round robin", "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint a(loop, dev), client(loop, dev);
  cv::datagram_queue_pair b(a.pd, a.cq);
  cv::datagram_queue_pair* serve[] = {&a.qp, &b};
  cv::datagram_listener l(loop.io.get_executor(), serve, address, 0);
  loop.run([&]() -> awaitable<void> {
    std::vector<std::uint32_t> got;
    for (int i = 0; i < 4; ++i) {
      cv::datagram_peer p =
          co_await cv::async_resolve_datagram_peer(client.pd, client.qp, address, l.local_port(), use_awaitable);
      got.push_back(p.qp_num);
    }
    CHECK(got == std::vector<std::uint32_t>{a.qp.qp_num(), b.qp_num(), a.qp.qp_num(), b.qp_num()});
    CHECK(l.stats().answered == 4);
  });
}

TEST_CASE("resolving a port nobody serves, or an address nobody has, fails with a named error within its timeout",
          "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint client(loop, dev);
  std::uint16_t port = 0;
  {
    cv::datagram_listener l(loop.io, client.qp, address, 0);
    port = l.local_port();
  }
  loop.run([&]() -> awaitable<void> {
    cv::datagram_resolve_options o;
    o.timeout = std::chrono::seconds(5);
    auto start = std::chrono::steady_clock::now();
    auto [ec, peer] = co_await cv::async_resolve_datagram_peer(client.pd, client.qp, address, port, o, as_tuple);
    INFO(ec.message());
    CHECK(ec == cv::errc::connection_refused);  // the kernel answers "no such service ID"
    CHECK_FALSE(peer.ah);
    CHECK(std::chrono::steady_clock::now() - start < o.timeout);

    // Nobody answers ARP for this address: the operation's own limit ends it first.
    o.timeout = std::chrono::milliseconds(500);
    start = std::chrono::steady_clock::now();
    auto [late, none] = co_await cv::async_resolve_datagram_peer(client.pd, client.qp, nobody, 7174, o, as_tuple);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    INFO(late.message());
    CHECK(late == asio::error::timed_out);
    CHECK(elapsed >= std::chrono::milliseconds(450));
    CHECK(elapsed < std::chrono::seconds(3));

    // Without that limit, address resolution's own (resolve_address_timeout) names the step that failed.
    o.timeout = std::chrono::seconds(10);
    o.resolve_address_timeout = std::chrono::milliseconds(500);
    auto [unresolved, nothing] =
        co_await cv::async_resolve_datagram_peer(client.pd, client.qp, nobody, 7174, o, as_tuple);
    INFO(unresolved.message());
    CHECK(unresolved == cv::errc::address_resolution_failed);
  });
}

TEST_CASE("cancelling a datagram peer's resolution completes it with operation_aborted", "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint client(loop, dev);
  asio::cancellation_signal signal;
  resolved r;
  cv::async_resolve_datagram_peer(client.pd, client.qp, nobody, 7174, cv::datagram_resolve_options(),
                                  asio::bind_cancellation_slot(signal.slot(), r.handler()));
  loop.io.restart();
  loop.io.run_for(std::chrono::milliseconds(300));
  REQUIRE_FALSE(r.done());  // still resolving the address (2 s)
  signal.emit(asio::cancellation_type::terminal);
  REQUIRE(loop.run_until([&] { return r.done(); }, std::chrono::seconds(5)));
  CHECK(*r.ec == asio::error::operation_aborted);
  CHECK_FALSE(r.peer.ah);
}

TEST_CASE("a datagram listener refuses queue pairs rdma_cm would announce with another Q_Key; bad input is named",
          "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  cv::datagram_options other;
  other.qkey = 0x1111;
  endpoint wrong(loop, dev, other), right(loop, dev), client(loop, dev);
  cv::datagram_queue_pair* serve[] = {&right.qp, &wrong.qp};
  try {
    cv::datagram_listener l(loop.io, serve, address, 0);
    FAIL("a queue pair with Q_Key 0x1111 was accepted");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errc::qkey_mismatch);
    CHECK(std::string(e.what()).find("0x00001111") != std::string::npos);
    CHECK(std::string(e.what()).find("0x01234567") != std::string::npos);
  }
  cv::datagram_listener_options big;
  big.private_data.resize(137);
  CHECK_THROWS_MATCHES(cv::datagram_listener(loop.io, right.qp, address, 0, big), cv::system_error,
                       Catch::Predicate<cv::system_error>(
                           [](const cv::system_error& e) { return e.code() == cv::errc::private_data_too_long; }));
  CHECK_THROWS_AS(cv::datagram_listener(loop.io, std::span<cv::datagram_queue_pair* const>(), address, 0),
                  cv::system_error);

  // A domain other than the sending queue pair's would make a handle that queue pair cannot send through.
  resolved r;
  cv::async_resolve_datagram_peer(right.pd, client.qp, address, 7174, r.handler());
  CHECK_FALSE(r.done());
  REQUIRE(loop.run_until([&] { return r.done(); }, std::chrono::seconds(5)));
  CHECK(*r.ec == cv::errc::address_handle_mismatch);
}

TEST_CASE("two queue pairs joined to a multicast group both receive a member's datagram; after leaving, none",
          "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  std::optional<cv::error_code> a_got, b_got, a_again, b_again;
  endpoint a(loop, dev), b(loop, dev), sender(loop, dev);
  test_buffer in_a(a.pd, 256), in_b(b.pd, 256), out(sender.pd, 64);
  cv::multicast_options o;
  o.source_address = address;
  cv::multicast_membership ma, mb, ms;
  loop.run([&]() -> awaitable<void> {
    ma = co_await cv::async_join_multicast(a.pd, a.qp, "239.1.2.3", o, use_awaitable);
    mb = co_await cv::async_join_multicast(b.pd, b.qp, "239.1.2.3", o, use_awaitable);
    ms = co_await cv::async_join_multicast(sender.pd, sender.qp, "239.1.2.3", o, use_awaitable);
  });
  REQUIRE(ma);
  CHECK(ma.group().to_string() == "::ffff:239.1.2.3");
  CHECK(ma.qkey() == cv::rdma_cm_udp_qkey);
  CHECK(ms.destination().qp_num == 0xFFFFFF);

  std::size_t bytes_a = 0, bytes_b = 0;
  std::uint32_t from_a = 0;
  a.qp.async_recv(in_a.span(), [&](cv::error_code ec, cv::received_datagram r) {
    a_got = ec;
    bytes_a = r.bytes;
    from_a = r.sender.qp_num;
  });
  b.qp.async_recv(in_b.span(), [&](cv::error_code ec, cv::received_datagram r) {
    b_got = ec;
    bytes_b = r.bytes;
  });
  std::memcpy(out.bytes.data(), "to the group", 12);
  loop.run([&]() -> awaitable<void> {
    co_await sender.qp.async_send_to(ms.destination(), out.span(0, 12), use_awaitable);
  });
  REQUIRE(loop.run_until([&] { return a_got && b_got; }, std::chrono::seconds(10)));
  CHECK_FALSE(*a_got);
  CHECK_FALSE(*b_got);
  CHECK(bytes_a == 12);
  CHECK(bytes_b == 12);
  CHECK(in_a.str(0, 12) == "to the group");
  CHECK(in_b.str(0, 12) == "to the group");
  CHECK(from_a == sender.qp.qp_num());

  // a leaves: the next datagram reaches b only; a's receive stays posted.
  ma.leave();
  CHECK_FALSE(ma);
  a.qp.async_recv(in_a.span(), [&](cv::error_code ec, cv::received_datagram) { a_again = ec; });
  b.qp.async_recv(in_b.span(), [&](cv::error_code ec, cv::received_datagram) { b_again = ec; });
  loop.run([&]() -> awaitable<void> {
    co_await sender.qp.async_send_to(ms.destination(), out.span(0, 12), use_awaitable);
  });
  REQUIRE(loop.run_until([&] { return b_again.has_value(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*b_again);
  loop.io.restart();
  loop.io.run_for(std::chrono::milliseconds(300));
  CHECK_FALSE(a_again);
  CHECK_FALSE(mb.error());
}

TEST_CASE("a multicast join refuses what is not a multicast group, and can be cancelled", "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint a(loop, dev);
  std::optional<cv::error_code> unicast, aborted;
  cv::multicast_options o;
  o.source_address = address;
  cv::async_join_multicast(a.pd, a.qp, address, o, [&](cv::error_code ec, cv::multicast_membership m) {
    unicast = ec;
    CHECK_FALSE(m);
  });
  CHECK_FALSE(unicast);  // never inside the initiating function
  REQUIRE(loop.run_until([&] { return unicast.has_value(); }, std::chrono::seconds(5)));
  CHECK(*unicast == cv::errc::invalid_address);

  asio::cancellation_signal signal;
  cv::async_join_multicast(a.pd, a.qp, "239.1.2.4", o,
                           asio::bind_cancellation_slot(signal.slot(), [&](cv::error_code ec, cv::multicast_membership m) {
                             aborted = ec;
                             CHECK_FALSE(m);
                           }));
  signal.emit(asio::cancellation_type::terminal);
  REQUIRE(loop.run_until([&] { return aborted.has_value(); }, std::chrono::seconds(5)));
  CHECK(*aborted == asio::error::operation_aborted);
}

// The resolver of the two-process case below: this binary again, told the listener's port by the parent.
TEST_CASE("(child) resolve the parent's listener, send a datagram, receive its answer", "[.][datagram_cm_child]") {
  const char* port = std::getenv(child_port_variable);
  REQUIRE(port);
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint self(loop, dev);
  test_buffer out(self.pd, 64), in(self.pd, 64);
  loop.run([&]() -> awaitable<void> {
    cv::datagram_peer peer = co_await cv::async_resolve_datagram_peer(
        self.pd, self.qp, address, static_cast<std::uint16_t>(std::atoi(port)), use_awaitable);
    std::memcpy(out.bytes.data(), "from the child", 14);
    auto [rec, sent] = co_await (self.qp.async_recv(in.span(), use_awaitable) &&
                                 self.qp.async_send_to(peer.destination(), out.span(0, 14), use_awaitable));
    CHECK(rec.bytes == 5);
    CHECK(in.str(0, 5) == "ack 1");
    CHECK(rec.sender.qp_num == peer.qp_num);
  });
}

TEST_CASE("a second process resolves a datagram listener and exchanges datagrams with its queue pair",
          "[datagram_cm]") {
  test::event_loop loop;
  cv::device dev = cv::device::open();
  endpoint server(loop, dev);
  cv::datagram_listener l(loop.io, server.qp, address, 0);
  test_buffer in(server.pd, 64), out(server.pd, 64);

  const std::string port_variable = std::string(child_port_variable) + "=" + std::to_string(l.local_port());
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(port_variable.c_str()));
  env.push_back(nullptr);
  std::string self = "/proc/self/exe", tag = "[datagram_cm_child]", colour = "--use-colour", no = "no";
  char* argv[] = {self.data(), tag.data(), colour.data(), no.data(), nullptr};
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, env.data()) == 0);

  int status = -1;
  bool exited = false;
  const auto reap = [&] {
    if (!exited && waitpid(child, &status, WNOHANG) == child) exited = true;
    return exited;
  };
  loop.run(
      [&]() -> awaitable<void> {
        const cv::received_datagram r = co_await server.qp.async_recv(in.span(), use_awaitable);
        CHECK(in.str(0, r.bytes) == "from the child");
        cv::address_handle back(server.pd, r.sender, server.qp.port());
        std::memcpy(out.bytes.data(), "ack 1", 5);
        co_await server.qp.async_send_to({&back, r.sender.qp_num, r.sender.qkey}, out.span(0, 5), use_awaitable);
      },
      std::chrono::seconds(60));
  CHECK(loop.run_until(reap, std::chrono::seconds(60)));
  if (!exited) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(l.stats().answered == 1);
}
