// bench_datagram: latency and message rate of unreliable datagrams (UD) through coverbs, measured the way
// perftest measures them, so the figures sit beside ib_send_lat -c UD and ib_send_bw -c UD in the same run.
//
//   bench_datagram [--test lat|rate] (default lat) [--size BYTES] [--iters N] [--depth N] [--rx-depth N]
//                  [--duration-ms N] [--inline BYTES] [--device NAME] [--json]
//
// Two sides, each with its own device context, io_context, thread, completion queue (busy-polled, like
// perftest's default) and datagram_queue_pair (like perftest's server and client processes); each sends
// through an address handle made from the other's GID and port, to the other's queue pair number and Q_Key.
//   lat   ping-pong of --size bytes (default 2) into receives posted ahead: on each receive a side re-posts it,
//         and the server answers / the client sends the next ping. t_typical = the median of half of each
//         round trip, in microseconds (perftest's t_typical for ib_send_lat); --iters round trips.
//   rate  the client keeps --depth sends of --size bytes (default 8) in flight (a send's completion handler
//         sends the next) for --duration-ms; the server keeps --rx-depth receives posted, re-posting each from
//         its completion handler, and counts what arrives. msg_per_s = datagrams received / the time from the
//         first send until the last arrival; sent_msg_per_s = datagrams sent / the time from the first send
//         until the last send completed (what ib_send_bw's client reports); dropped = sent - received (UD
//         drops a datagram that finds no receive posted).
// --inline: datagram_options::max_inline_data of both queue pairs (default 0: perftest runs rxe with
// "Max inline data: 0[B]", as it sets an inline size only for devices it knows).
#include <coverbs/coverbs.hpp>

#include <coverbs_support/json_output.hpp>
#include <coverbs_support/statistics.hpp>
#include "cli.hpp"
#include "stamp_clock.hpp"

#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
using bench::stamp_clock;

namespace {

struct config {
  std::string test = "lat";
  std::size_t size = 0;  // 0: the test's default (lat 2, rate 8)
  int iters = 1000;
  int depth = 128;
  int rx_depth = 512;
  int duration_ms = 3000;
  std::size_t inline_bytes = 0;
  std::string device;
  bool json = false;
};

constexpr const char* usage_text = "[--test lat|rate (default lat)] [--size BYTES] [--iters N] [--depth N] "
                                   "[--rx-depth N] [--duration-ms N] [--inline BYTES] [--device NAME] [--json]";

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", "bench_datagram"};
  bench::describe(app, usage_text,
                  "Unreliable-datagram (UD) latency and message rate through coverbs, measured as perftest's "
                  "ib_send_lat -c UD and ib_send_bw -c UD measure them; see the source's header for each figure.");
  app.add_option("--test", c.test,
                 "lat: ping-pong, half the round trip; rate: --depth datagrams in flight for --duration-ms, "
                 "messages/s received (default lat)")
      ->check(command_line::one_of({"lat", "rate"}));
  app.add_option("--size", c.size,
                 "payload bytes per datagram, at most the path MTU (rxe: 1024); default 2 for lat (at least 2), "
                 "8 for rate")
      ->transform(command_line::size(1, 4096));
  app.add_option("--iters", c.iters, "lat: round trips measured (default 1000)")
      ->transform(command_line::count(2, 100'000'000));
  app.add_option("--depth", c.depth, "rate: sends kept in flight, like perftest's -t (default 128)")
      ->transform(command_line::count(1, 8192));
  app.add_option("--rx-depth", c.rx_depth, "rate: receives the server keeps posted, like perftest's -r (default 512)")
      ->transform(command_line::count(1, 16384));
  app.add_option("--duration-ms", c.duration_ms, "rate: how long the client sends (default 3000)")
      ->transform(command_line::count(100, 600'000));
  app.add_option("--inline", c.inline_bytes,
                 "datagram_options::max_inline_data of both queue pairs: sends up to this size are copied into "
                 "the work request; default 0, as perftest runs rxe (coverbs' own default is 64)")
      ->transform(command_line::size(0, 4096));
  app.add_option("--device", c.device, "RDMA device name, as ibv_devices lists it (default: the first)");
  app.add_flag("--json", c.json, "print one JSON object of the figures instead of a line of text");
  bench::parse(app, argc, argv);
  const bool lat = c.test == "lat";
  for (const auto& [flag, only_rate] : {std::pair{"--iters", false}, std::pair{"--depth", true},
                                        std::pair{"--rx-depth", true}, std::pair{"--duration-ms", true}})
    if (app.count(flag) && only_rate == lat)
      bench::usage_error(app, std::string(flag) + " applies to --test " + (only_rate ? "rate" : "lat") +
                                  ": drop it or change --test");
  if (c.size == 0) c.size = lat ? 2 : 8;
  if (lat && c.size < 2)
    bench::usage_error(app, "--size 1: lat takes at least 2 bytes, as ib_send_lat does; use --size 2 or more");
  return c;
}

/// One side: its own device context (like a perftest process), loop, busy-polled completion queue, datagram
/// queue pair and registered buffer (the first `size` bytes: what it sends; then a slot per receive).
struct side {
  asio::io_context io{1};
  cv::device dev;
  cv::protection_domain pd;
  cv::completion_queue cq;
  cv::datagram_queue_pair qp;
  std::vector<std::byte> bytes;
  cv::memory_region mr;
  cv::address_handle to_peer;
  cv::datagram_destination peer;

  side(const config& c, std::size_t receives)
      : dev(cv::device::open(c.device)), pd(dev), cq(io, dev, cq_options(c)), qp(pd, cq, qp_options(c, receives)),
        bytes(c.size * (1 + receives)), mr(pd, bytes, cv::access::local_write) {
    if (c.size > qp.max_datagram_size())
      throw std::invalid_argument("--size " + std::to_string(c.size) + " is above the path MTU of " + dev.name() +
                                  " (" + std::to_string(qp.max_datagram_size()) +
                                  " bytes, the longest datagram): use at most that");
  }

  /// Aims this side's sends at `other`'s queue pair, through an address handle from its GID.
  void aim_at(const side& other) {
    to_peer = cv::address_handle(pd, other.qp.local_gid().value, other.qp.port());
    peer = {&to_peer, other.qp.qp_num(), other.qp.qkey()};
  }

  static cv::completion_queue_options cq_options(const config& c) {
    cv::completion_queue_options o;
    o.depth = 2 * static_cast<std::uint32_t>(std::max(c.depth, c.rx_depth)) + 64;
    o.spin = cv::completion_queue_options::spin_forever;
    return o;
  }
  static cv::datagram_options qp_options(const config& c, std::size_t receives) {
    cv::datagram_options o;
    o.max_send_wr = static_cast<std::uint32_t>(c.depth + 16);
    o.max_recv_wr = static_cast<std::uint32_t>(receives);
    // perftest runs rxe with "Max inline data: 0[B]" (its -I sets another): compare like with like.
    o.max_inline_data = static_cast<std::uint32_t>(c.inline_bytes);
    return o;
  }
  /// What this side sends: the buffer's first `size` bytes.
  cv::registered_span out(std::size_t size) const { return cv::span_of(mr, 0, size); }
  /// Receive slot `k` (of `receives`).
  cv::registered_span slot(std::size_t size, std::size_t k) const { return cv::span_of(mr, size * (1 + k), size); }
};

void fail_on(cv::error_code ec, const char* what) {
  if (ec) throw cv::system_error(ec, what);
}

/// Runs `s.io` on a thread of its own, keeping the first exception it throws.
struct loop_thread {
  std::exception_ptr error;
  std::thread thread;
  explicit loop_thread(side& s)
      : thread([this, &s] {
          try {
            s.io.run();
          } catch (...) {
            error = std::current_exception();
          }
        }) {}
  void join_and_rethrow() {
    thread.join();
    if (error) std::rethrow_exception(error);
  }
};

/// Ping-pong into receives posted ahead (perftest pre-posts its receives the same way); the median of half
/// of each round trip, in microseconds.
std::vector<double> latency(side& client, side& server, const config& c) {
  constexpr int ahead = 8;
  const std::size_t n = c.size;
  std::vector<std::uint64_t> stamps;
  stamps.reserve(static_cast<std::size_t>(c.iters) + 1);
  stamp_clock clock;
  int answered = 0, pongs = 0;
  std::function<void(int)> server_recv = [&](int k) {
    server.qp.async_recv(server.slot(n, k), [&, k](cv::error_code ec, cv::received_datagram) {
      fail_on(ec, "lat: server receive");
      if (++answered + ahead <= c.iters) server_recv(k);  // re-posted before the answer leaves
      server.qp.async_send_to(server.peer, server.out(n),
                              [](cv::error_code e, std::size_t) { fail_on(e, "lat: server send"); });
    });
  };
  std::function<void()> ping = [&] {
    stamps.push_back(stamp_clock::now());
    client.qp.async_send_to(client.peer, client.out(n),
                            [](cv::error_code e, std::size_t) { fail_on(e, "lat: client send"); });
  };
  std::function<void(int)> client_recv = [&](int k) {
    client.qp.async_recv(client.slot(n, k), [&, k](cv::error_code ec, cv::received_datagram) {
      fail_on(ec, "lat: client receive");
      if (++pongs + ahead <= c.iters) client_recv(k);
      if (pongs < c.iters)
        ping();
      else
        stamps.push_back(stamp_clock::now());
    });
  };
  for (int k = 0; k < std::min(ahead, c.iters); ++k) {
    server_recv(k);
    client_recv(k);
  }
  loop_thread t(server);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server's receives are posted
  ping();
  client.io.run();
  t.join_and_rethrow();
  const double scale = clock.us_per_tick();
  std::vector<double> out;
  for (std::size_t i = 0; i + 1 < stamps.size(); ++i)
    out.push_back(static_cast<double>(stamps[i + 1] - stamps[i]) * scale / 2);
  return out;
}

struct rate_result {
  std::uint64_t sent = 0, received = 0;
  double send_seconds = 0, receive_seconds = 0;
};

/// The client keeps `depth` sends in flight for the duration; the server keeps `rx_depth` receives posted.
rate_result rate(side& client, side& server, const config& c) {
  const std::size_t n = c.size;
  std::uint64_t received = 0, last_arrival = 0;  // the server's count, and its stamp of the latest arrival
  std::function<void(int)> server_recv = [&](int k) {
    server.qp.async_recv(server.slot(n, k), [&, k](cv::error_code ec, cv::received_datagram) {
      if (ec) return;  // flushed when the server's queue pair goes at the end
      last_arrival = stamp_clock::now();
      ++received;
      server_recv(k);
    });
  };
  for (int k = 0; k < c.rx_depth; ++k)
    server_recv(k);
  // The server's loop runs until stopped: its posted receives keep it busy-polling.
  auto guard = asio::make_work_guard(server.io);
  loop_thread t(server);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server's receives are posted

  stamp_clock clock;
  rate_result r;
  std::uint64_t completed = 0, last_completion = 0;
  const auto t0 = stamp_clock::now();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(c.duration_ms);
  bool sending = true;
  std::function<void()> send_next = [&] {
    ++r.sent;
    client.qp.async_send_to(client.peer, client.out(n), [&](cv::error_code ec, std::size_t) {
      fail_on(ec, "rate: send");
      ++completed;
      last_completion = stamp_clock::now();
      // The clock is read once per 64 completions: in the emulated guest a read costs microseconds.
      if (sending && completed % 64 == 0 && std::chrono::steady_clock::now() >= deadline) sending = false;
      if (sending) send_next();
    });
  };
  for (int i = 0; i < c.depth; ++i)
    send_next();
  client.io.run();
  // What is still on its way arrives within a moment (on one host, microseconds); then the server stops.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  guard.reset();
  server.io.stop();
  t.join_and_rethrow();
  const double us = clock.us_per_tick();
  r.received = received;  // read after the server's thread ended
  r.send_seconds = static_cast<double>(last_completion - t0) * us * 1e-6;
  r.receive_seconds = static_cast<double>(last_arrival > t0 ? last_arrival - t0 : 0) * us * 1e-6;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  try {
    const bool lat = c.test == "lat";
    const std::size_t receives = lat ? 8 : static_cast<std::size_t>(c.rx_depth);
    side client(c, receives), server(c, receives);
    client.aim_at(server);
    server.aim_at(client);
    const auto r3 = [](double x) { return json_output::rounded(x, 3); };
    json_output::json::object o{{"test", c.test},
                                {"device", client.dev.name()},
                                {"mode", "spin"},
                                {"bytes", c.size},
                                {"max_inline_data", c.inline_bytes},
                                {"max_inline_data_granted", client.qp.max_inline_data()},
                                {"max_datagram_size", client.qp.max_datagram_size()}};
    if (lat) {
      const statistics::summary st = statistics::summarize(latency(client, server, c));
      o["iterations"] = c.iters;
      o["t_min_us"] = r3(st.min);
      o["t_typical_us"] = r3(st.median);
      o["t_p99_us"] = r3(st.p99);
      if (c.json)
        json_output::print(o);
      else
        std::printf("UD lat  %6zu B %8d iters  t_min %8.2f us  t_typical %8.2f us  p99 %8.2f us\n", c.size, c.iters,
                    st.min, st.median, st.p99);
    } else {
      const rate_result r = rate(client, server, c);
      const double received_rate = r.receive_seconds > 0 ? static_cast<double>(r.received) / r.receive_seconds : 0;
      const double sent_rate = r.send_seconds > 0 ? static_cast<double>(r.sent) / r.send_seconds : 0;
      const cv::completion_queue_stats cs = client.cq.stats();
      o["depth"] = c.depth;
      o["rx_depth"] = c.rx_depth;
      o["duration_ms"] = c.duration_ms;
      o["sent"] = r.sent;
      o["received"] = r.received;
      o["dropped"] = r.sent - std::min(r.sent, r.received);
      o["seconds"] = r3(r.receive_seconds);
      o["msg_per_s"] = json_output::rounded(received_rate, 1);
      o["sent_msg_per_s"] = json_output::rounded(sent_rate, 1);
      o["send_doorbells"] = cs.send_doorbells;
      o["send_requests"] = cs.send_requests;
      if (cs.send_doorbells)
        o["requests_per_doorbell"] = r3(static_cast<double>(cs.send_requests) / static_cast<double>(cs.send_doorbells));
      if (c.json)
        json_output::print(o);
      else
        std::printf("UD rate %6zu B, %d in flight, %d ms: %.1f received/s (%llu), %.1f sent/s (%llu), %llu dropped\n",
                    c.size, c.depth, c.duration_ms, received_rate, static_cast<unsigned long long>(r.received),
                    sent_rate, static_cast<unsigned long long>(r.sent),
                    static_cast<unsigned long long>(r.sent - std::min(r.sent, r.received)));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_datagram: %s\n", e.what());
    return 1;
  }
  return 0;
}
