// Connections through rdma_cm on a real device (rxe0 with 10.77.0.1 in the Soft-RoCE guest): accept,
// connect, private data, echo, refusal, peer disconnects, cancellation and bad input.
#include <coverbs/cm.hpp>

#include "fixtures/event_loop.hpp"
#include "fixtures/private_data.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstring>
#include <string_view>

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
constexpr auto as_tuple = asio::as_tuple(use_awaitable);

/// A connection completed through a callback.
struct accepted {
  std::optional<cv::error_code> ec;
  cv::connection conn;
  auto handler() {
    return [this](cv::error_code e, cv::connection c) {
      ec = e;
      conn = std::move(c);
    };
  }
  bool done() const { return ec.has_value(); }
};

/// Accepts on `l` and connects to it with default options; both ends must succeed.
void connect_both(test::event_loop& loop, cv::listener& l, accepted& server, accepted& client) {
  l.async_accept(server.handler());
  cv::async_connect(loop.io.get_executor(), address, l.local_port(), {}, client.handler());
  REQUIRE(loop.run_until([&] { return server.done() && client.done(); }));
  REQUIRE_FALSE(*server.ec);
  REQUIRE_FALSE(*client.ec);
}

}  // namespace

TEST_CASE("accept and connect through rdma_cm echo messages and carry private data both ways", "[cm]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  REQUIRE(l.local_port() != 0);
  REQUIRE(l.get_device());
  CHECK_FALSE(l.get_device().owns_context());
  // The server brings its own protection domain and completion queue, on the listener's device.
  cv::protection_domain pd(l.get_device());
  cv::completion_queue cq(loop.io, l.get_device());
  test_buffer server_buf(pd, 4096);
  cv::connection_options server_options;
  server_options.pd = &pd;
  server_options.cq = &cq;
  server_options.private_data = bytes_of("from-server");

  auto server = [&]() -> awaitable<void> {
    cv::connection conn = co_await l.async_accept(server_options, use_awaitable);
    CHECK(prefix(conn.peer_private_data(), 11) == "from-client");
    CHECK(conn.qp().state() == IBV_QPS_RTS);
    CHECK(&conn.pd() == &pd);
    CHECK(conn.remote_endpoint().rfind("10.77.0.1:", 0) == 0);
    for (int i = 0; i < 3; ++i) {
      const cv::received r = co_await conn.qp().async_recv(server_buf.span());
      const std::size_t sent = co_await conn.qp().async_send(server_buf.span(0, r.bytes));
      CHECK(sent == r.bytes);
    }
    // The client disconnects next: the receive still posted is flushed.
    auto [ec, r] = co_await conn.qp().async_recv(server_buf.span(), as_tuple);
    CHECK(ec == cv::wc_errc::wr_flush_err);
    CHECK(conn.error() == cv::errc::connection_reset);
  };
  auto client = [&]() -> awaitable<void> {
    cv::connect_options o;
    o.private_data = bytes_of("from-client");
    cv::connection conn = co_await cv::async_connect(ex, address, l.local_port(), o, use_awaitable);
    CHECK(prefix(conn.peer_private_data(), 11) == "from-server");
    CHECK(conn.qp().state() == IBV_QPS_RTS);
    CHECK(conn.connected());
    test_buffer out(conn.pd(), 4096), in(conn.pd(), 4096);
    for (int i = 0; i < 3; ++i) {
      const std::string msg = "echo #" + std::to_string(i) + std::string(100 * i, 'x');
      std::memcpy(out.bytes.data(), msg.data(), msg.size());
      const std::size_t sent = co_await conn.qp().async_send(out.span(0, msg.size()));
      CHECK(sent == msg.size());
      const cv::received r = co_await conn.qp().async_recv(in.span());
      CHECK(r.bytes == msg.size());
      CHECK(in.str(0, r.bytes) == msg);
    }
    co_await conn.async_disconnect(use_awaitable);
    CHECK(conn.error() == cv::errc::disconnected);
  };
  loop.run([&]() -> awaitable<void> { co_await (server() && client()); });
}

TEST_CASE("a connection's queue pair takes its RNR timer from the options, not rdma_cm's 655 ms", "[cm]") {
  test::event_loop loop;
  cv::listener l(loop.io.get_executor(), address, 0);
  cv::connection_options server_options;
  server_options.qp.min_rnr_timer = 3;  // 0.04 ms
  cv::connect_options client_options;   // the default: 12, 0.64 ms
  accepted server, client;
  l.async_accept(server_options, server.handler());
  cv::async_connect(loop.io.get_executor(), address, l.local_port(), client_options, client.handler());
  REQUIRE(loop.run_until([&] { return server.done() && client.done(); }));
  REQUIRE_FALSE(*server.ec);
  REQUIRE_FALSE(*client.ec);
  const auto rnr_timer = [](cv::connection& c) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    REQUIRE(ibv_query_qp(c.qp().native_handle(), &attr, IBV_QP_MIN_RNR_TIMER, &init) == 0);
    return int{attr.min_rnr_timer};
  };
  CHECK(rnr_timer(server.conn) == 3);
  CHECK(rnr_timer(client.conn) == int{client_options.qp.min_rnr_timer});
  CHECK(client_options.qp.min_rnr_timer != 0);
}

TEST_CASE("connecting to a port nobody listens on fails with connection_refused within its timeout", "[cm]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  std::uint16_t port = 0;
  {
    cv::listener l(ex, address, 0);
    port = l.local_port();
  }
  loop.run([&]() -> awaitable<void> {
    cv::connect_options o;
    o.connect_timeout = std::chrono::seconds(5);
    const auto start = std::chrono::steady_clock::now();
    auto [ec, conn] = co_await cv::async_connect(ex, address, port, o, as_tuple);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    INFO(ec.message());
    CHECK(ec == cv::errc::connection_refused);
    CHECK_FALSE(conn);
    CHECK(elapsed < std::chrono::seconds(5));
  });
}

TEST_CASE("a peer that disconnects completes the other side's outstanding receives with errors", "[cm]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  accepted server, client;
  connect_both(loop, l, server, client);

  test_buffer buf(server.conn.pd(), 4096);
  std::vector<std::optional<cv::error_code>> results(4);
  for (auto& r : results)
    server.conn.qp().async_recv(buf.span(), [&r](cv::error_code ec, cv::received) { r = ec; });
  loop.io.run_for(std::chrono::milliseconds(100));
  CHECK_FALSE(results[0]);  // nothing arrives while the peer is quiet

  std::optional<cv::error_code> disconnected;
  client.conn.async_disconnect([&](cv::error_code ec) { disconnected = ec; });
  REQUIRE(loop.run_until(
      [&] {
        return disconnected && std::all_of(results.begin(), results.end(), [](auto& r) { return r.has_value(); });
      },
      std::chrono::seconds(10)));
  CHECK_FALSE(*disconnected);
  for (auto& r : results)
    CHECK(*r == cv::wc_errc::wr_flush_err);
  CHECK(server.conn.error() == cv::errc::connection_reset);
  CHECK(server.conn.qp().error() == cv::errc::connection_reset);
  CHECK_FALSE(server.conn.connected());
  // Operations after the disconnect fail at once, and disconnecting again is harmless.
  std::optional<cv::error_code> late, again;
  server.conn.qp().async_send(buf.span(0, 8), [&](cv::error_code ec, std::size_t) { late = ec; });
  server.conn.async_disconnect([&](cv::error_code ec) { again = ec; });
  REQUIRE(loop.run_until([&] { return late && again; }));
  CHECK(*late == cv::wc_errc::wr_flush_err);
  CHECK_FALSE(*again);
}

TEST_CASE("destroying a connection flushes the peer's outstanding operations with connection_reset", "[cm]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  accepted server, client;
  connect_both(loop, l, server, client);

  test_buffer buf(client.conn.pd(), 4096);
  std::optional<cv::error_code> recv1, recv2;
  client.conn.qp().async_recv(buf.span(0, 64), [&](cv::error_code ec, cv::received) { recv1 = ec; });
  client.conn.qp().async_recv(buf.span(64, 64), [&](cv::error_code ec, cv::received) { recv2 = ec; });
  server.conn = cv::connection();  // the server goes away without a word: its cm_id sends the disconnect
  REQUIRE(loop.run_until([&] { return recv1 && recv2; }, std::chrono::seconds(10)));
  CHECK(*recv1 == cv::wc_errc::wr_flush_err);
  CHECK(*recv2 == cv::wc_errc::wr_flush_err);
  CHECK(client.conn.error() == cv::errc::connection_reset);
}

TEST_CASE("cancelling a pending accept completes it with operation_aborted and the listener keeps working", "[cm]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);
  asio::cancellation_signal signal;
  accepted first;
  l.async_accept(asio::bind_cancellation_slot(signal.slot(), first.handler()));
  loop.io.run_for(std::chrono::milliseconds(100));
  CHECK_FALSE(first.done());
  signal.emit(asio::cancellation_type::terminal);
  CHECK_FALSE(first.done());  // completes through the executor, never inside emit()
  REQUIRE(loop.run_until([&] { return first.done(); }, std::chrono::seconds(5)));
  CHECK(*first.ec == asio::error::operation_aborted);
  CHECK_FALSE(first.conn);

  accepted server, client;
  connect_both(loop, l, server, client);
}

TEST_CASE("cancelling a pending connect completes it with operation_aborted", "[cm]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::listener l(ex, address, 0);  // listens, but nobody accepts: the request waits in the backlog
  asio::cancellation_signal signal;
  accepted client;
  cv::async_connect(ex, address, l.local_port(), {}, asio::bind_cancellation_slot(signal.slot(), client.handler()));
  loop.io.run_for(std::chrono::milliseconds(300));
  REQUIRE_FALSE(client.done());
  signal.emit(asio::cancellation_type::terminal);
  REQUIRE(loop.run_until([&] { return client.done(); }, std::chrono::seconds(5)));
  CHECK(*client.ec == asio::error::operation_aborted);
  CHECK_FALSE(client.conn);
}

TEST_CASE("bad addresses, ports and private data give clear errors", "[cm]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  CHECK_THROWS_AS(cv::listener(ex, "not-an-address", 0), cv::system_error);
  // No local device has the address; the port is taken: the errno stays, the text says what to do.
  const auto bind_error = [&](const char* host, std::uint16_t port) -> std::optional<cv::system_error> {
    try {
      cv::listener l(ex, host, port);
    } catch (const cv::system_error& e) {
      return e;
    }
    return std::nullopt;
  };
  const auto unknown = bind_error("10.77.0.77", 0);
  REQUIRE(unknown);
  CHECK(unknown->code() == boost::system::errc::address_not_available);
  CHECK_THAT(unknown->what(), Catch::Contains("coverbs devices"));
  cv::listener holder(ex, address, 0);
  const auto taken = bind_error(address, holder.local_port());
  REQUIRE(taken);
  CHECK(taken->code() == boost::system::errc::address_in_use);
  CHECK_THAT(taken->what(), Catch::Contains("choose another port"));

  // A named options object: GCC 12 destroys a braced temporary inside a co_await expression twice.
  const cv::connect_options defaults;
  loop.run([&]() -> awaitable<void> {
    {
      auto [ec, c] = co_await cv::async_connect(ex, "not-an-address", "7471", defaults, as_tuple);
      CHECK(ec == cv::errc::invalid_address);
    }
    for (const char* port : {"70000", "0", "12x", ""}) {
      auto [ec, c] = co_await cv::async_connect(ex, address, port, defaults, as_tuple);
      INFO(port);
      CHECK(ec == cv::errc::invalid_port_number);
    }
    {
      cv::connect_options o;
      o.private_data.resize(57);
      auto [ec, c] = co_await cv::async_connect(ex, address, "7471", o, as_tuple);
      CHECK(ec == cv::errc::private_data_too_long);
    }
    {
      // On the device's subnet, but nobody answers ARP: address resolution gives up after its timeout.
      cv::connect_options o;
      o.resolve_address_timeout = std::chrono::milliseconds(1000);
      o.connect_timeout = std::chrono::seconds(8);
      const auto start = std::chrono::steady_clock::now();
      auto [ec, c] = co_await cv::async_connect(ex, "10.77.0.99", "7471", o, as_tuple);
      INFO(ec.message());
      CHECK(ec == cv::errc::address_resolution_failed);
      CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(8));
    }
  });

  // The error is delivered through the executor, never inside the initiating function.
  std::optional<cv::error_code> got;
  cv::async_connect(ex, "nope", "1", {}, [&](cv::error_code ec, cv::connection) { got = ec; });
  CHECK_FALSE(got);
  REQUIRE(loop.run_until([&] { return got.has_value(); }));
  CHECK(*got == cv::errc::invalid_address);
}

TEST_CASE("an io_context destroyed without running again after its connections went out of scope is clean",
          "[cm][shutdown]") {
  // The connections keep themselves alive through their event channels' pending waits; Asio destroys
  // those waits only while it destroys its io_uring service, after the timer service is gone. Each
  // connection's timer and descriptors must be gone by then (AddressSanitizer: heap-use-after-free).
  auto loop = std::make_unique<test::event_loop>();
  {
    cv::listener l(loop->io.get_executor(), address, 0);
    accepted server, client;
    connect_both(*loop, l, server, client);
    REQUIRE(server.conn.connected());
    REQUIRE(client.conn.connected());
  }
  loop.reset();
  SUCCEED("the io_context and everything it kept alive are gone");
}

// The issue's form: `{}` for the options inside co_await with as_tuple (aborted with "free(): invalid
// pointer" under GCC 12 while the options were an aggregate), and the forms without options; the listener
// and the connect take the io_context itself.
TEST_CASE("co_await connect and accept with {} or no options, on an io_context, establish", "[cm][gcc12]") {
  test::event_loop loop;
  cv::listener l(loop.io, address, 0);
  std::vector<cv::connection> accepted;  // kept open until the client has looked at its side
  auto server = [&]() -> awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      auto [ec, conn] = co_await l.async_accept(loop.io, as_tuple);
      CHECK_FALSE(ec);
      CHECK(conn.connected());
      accepted.push_back(std::move(conn));
    }
  };
  auto client = [&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto [ec1, c1] = co_await cv::async_connect(ex, address, l.local_port(), {}, as_tuple);
    CHECK_FALSE(ec1);
    auto [ec2, c2] = co_await cv::async_connect(ex, address, std::to_string(l.local_port()), {}, as_tuple);
    CHECK_FALSE(ec2);
    auto [ec3, c3] = co_await cv::async_connect(loop.io, address, l.local_port(), as_tuple);
    CHECK_FALSE(ec3);
    CHECK((c1.connected() && c2.connected() && c3.connected()));
  };
  loop.run([&]() -> awaitable<void> { co_await (server() && client()); }, std::chrono::seconds(60));
}
