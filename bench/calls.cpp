// bench_calls: the message layer (message_endpoint.hpp, bulk.hpp) beside what it is built on, on one device:
// call latency beside a send/receive ping-pong, the call rate (callers on one loop, callees on another, or both on
// one), and a bulk call's payload moved by
// the peer's RDMA read beside plain reads of the same size.
//
//   bench_calls [--device NAME] [--test pingpong|call_lat|interleaved|call_rate|bulk|read] [--size BYTES] [--iters N]
//               [--connections N] [--depth N] [--duration-ms N] [--mode spin|events] [--loops 1|2] [--json]
//
// Two sides, each with its own device context, completion queue, queue pairs and registered memory (like two
// processes), connected with connect_pair. With --loops 2 (the default of the latency tests and of call_rate) each
// side has its own loop, the client's on the main thread and the server's on a second one, as perftest's and UCX's
// two processes; with --loops 1 (the default of bulk and read) one loop on the main thread carries both sides'
// completion queues and endpoints. Both latency tests run over one
// connection with the same queue-pair options (inline up to 64 B, coverbs' default):
//   pingpong   the client sends --size bytes, the server answers with a send of --size bytes from its receive
//              completion, the client sends the next from its own (receives posted ahead on both sides).
//   call_lat   the client's async_call of --size bytes, one in flight; the server's async_receive_request and
//              async_reply of --size bytes; the client calls again from the reply's handler.
// Their figure is the round trip: the time between consecutive replies on the client (cycle counter), median
// and percentiles over --iters, the first tenth left out as warm-up.
//   interleaved  both in one process, over two connections (the first a ping-pong's, the second a pair of
//              message endpoints): --iters pairs of round trips, each pair one ping-pong round trip and one call
//              (which goes first alternating), each timed from its send or async_call to its reply's handler.
//              rtt_median_us is the calls', pingpong_rtt_median_us the ping-pongs' (first tenth left out), and
//              ratio_to_pingpong their quotient: what the message layer adds to a round trip, measured at the
//              same moments of the machine (a slow phase of the emulator slows every process alike for seconds,
//              which moves a ratio of two launches and not this one).
//   call_rate  --connections pairs of message endpoints; the client keeps --depth calls of --size bytes in
//              flight on each, each reply's handler starting the next, for --duration-ms; the
//              server answers every request with --size bytes. calls_per_s = calls / wall time from the first
//              call until the last reply; msg_per_s = 2 × calls_per_s (a request and a reply each).
//   bulk       one connection; the client keeps --depth bulk calls in flight (async_bulk_call: a type-2 window
//              over its own --size bytes of a registered region, remote_read, leased from a window_pool), each
//              request 8 bytes behind the descriptor; the server reads the whole region (async_bulk_read) into
//              its registered memory and replies with 8 bytes. bytes_per_second = --iters × --size / wall time.
//   read       the same connection and memory without the message layer: the server keeps --depth RDMA reads of
//              --size bytes of the client's region in flight, --iters in all.
// A loop shared by two sides in events mode sleeps until either completion queue has work; in the emulated guest
// a thread's wake-up can take milliseconds on a busy host, which a round trip between two loops pays twice.
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include "stamp_clock.hpp"
#include <coverbs_support/json_output.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using clock_type = std::chrono::steady_clock;

struct config {
  std::string device;
  std::string test = "call_lat";
  std::size_t size = 8;
  int iters = 5000;
  int connections = 8;
  int depth = 32;
  int duration_ms = 1000;
  std::string mode = "spin";
  int loops = 0;  // 0: the test's default
  bool json = false;
};

constexpr const char* usage_text = "[--device NAME] [--test pingpong|call_lat|interleaved|call_rate|bulk|read] "
                                   "[--size BYTES] [--iters N] [--connections N] [--depth N] [--duration-ms N] "
                                   "[--mode spin|events] [--loops 1|2] [--json]";

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", "bench_calls"};
  bench::describe(app, usage_text,
                  "Call latency beside a send/receive ping-pong, the call rate (callers on one loop), and bulk calls beside "
                  "plain RDMA reads; see the source's header for each figure.");
  app.add_option("--device", c.device, "RDMA device name, as ibv_devices lists it (default: the first)");
  app.add_option("--test", c.test, "what to measure (default call_lat)")
      ->check(command_line::one_of({"pingpong", "call_lat", "interleaved", "call_rate", "bulk", "read"}));
  app.add_option("--size", c.size, "bytes of each request and reply, or of each bulk payload and read (default 8)")
      ->transform(command_line::size(1, 1u << 24));
  app.add_option("--iters", c.iters,
                 "round trips (latency; interleaved: of each kind), or bulk calls and reads (default 5000)")
      ->transform(command_line::count(10, 10'000'000));
  app.add_option("--connections", c.connections, "pairs of endpoints for call_rate (default 8)")
      ->transform(command_line::count(1, 64));
  app.add_option("--depth", c.depth, "calls or reads in flight per connection for call_rate, bulk, read (default 32)")
      ->transform(command_line::count(1, 256));
  app.add_option("--duration-ms", c.duration_ms, "how long call_rate issues calls (default 1000)")
      ->transform(command_line::count(100, 600'000));
  app.add_option("--mode", c.mode, "busy polling (spin, default) or completion events on each completion queue")
      ->check(command_line::one_of({"spin", "events"}));
  app.add_option("--loops", c.loops,
                 "1: one loop on one thread carries the client's and the server's endpoints (default for bulk and "
                 "read); 2: the server's loop runs on a second thread (default for pingpong, call_lat, interleaved "
                 "and call_rate)")
      ->transform(command_line::count(1, 2));
  app.add_flag("--json", c.json, "print one JSON object of the figures instead of a line of text");
  bench::parse(app, argc, argv);
  const bool latency = c.test == "pingpong" || c.test == "call_lat" || c.test == "interleaved";
  if (latency) c.connections = c.depth = 1;
  if (c.test == "interleaved") c.connections = 2;  // the ping-pong's and the endpoints'
  if (c.test == "bulk" || c.test == "read") c.connections = 1;
  if (c.loops == 0) c.loops = latency || c.test == "call_rate" ? 2 : 1;
  if ((latency || c.test == "call_rate") && c.size > (1u << 20))
    bench::usage_error(app, "--size above 1 MiB applies to bulk and read only (a message is at most a slot)");
  return c;
}

/// One side: its own device context, completion queue, queue pairs (one per connection) and registered memory
/// (`bytes` of it), and its own loop or the loop of another side (`shared`).
struct side {
  asio::io_context own_io{1};
  asio::io_context& io;
  cv::device dev;
  cv::protection_domain pd;
  cv::completion_queue cq;
  std::vector<std::unique_ptr<cv::queue_pair>> qps;
  std::vector<std::byte> bytes;
  cv::memory_region mr;

  side(const config& c, std::size_t buffer, asio::io_context* shared = nullptr)
      : io(shared ? *shared : own_io), dev(cv::device::open(c.device)), pd(dev), cq(io, dev, cq_options(c)), bytes(buffer),
        mr(pd, bytes,
           cv::access::local_write | cv::access::remote_read | cv::access::remote_write | cv::access::mw_bind) {
    for (int i = 0; i < c.connections; ++i)
      qps.push_back(std::make_unique<cv::queue_pair>(pd, cq, qp_options(c)));
  }

  /// Slots for `depth` calls in flight each way, at least 16 (the credit protocol returns them by halves).
  static std::uint32_t slots(const config& c) { return static_cast<std::uint32_t>(std::max(16, 2 * c.depth)); }
  static cv::completion_queue_options cq_options(const config& c) {
    cv::completion_queue_options o;
    o.depth = c.connections * static_cast<int>(2 * slots(c) + 24) + 64;  // each queue pair's send and receive queue
    o.spin = c.mode == "spin" ? cv::completion_queue_options::spin_forever : std::chrono::nanoseconds(0);
    return o;
  }
  static cv::queue_pair_options qp_options(const config& c) {
    cv::queue_pair_options o;
    o.max_send_wr = slots(c) + 16;  // the sends of the slots, and the bulk calls' binds and reads
    o.max_recv_wr = slots(c) + 8;   // the endpoint's receives and its 4 control receives
    return o;
  }
  cv::registered_span span(std::size_t off, std::size_t n) const { return cv::span_of(mr, off, n); }
  cv::message_options message_options(const config& c) const {
    cv::message_options o;
    o.slot_size = std::max<std::size_t>(c.size, 64);
    if (c.test == "bulk") o.slot_size = 64;  // the descriptor and 8 bytes
    o.recv_slots = o.send_slots = slots(c);
    return o;
  }
};

/// Runs the server's loop on a thread of its own until join(), what it threw rethrown there; nothing where the
/// server's endpoints are on the client's loop.
class server_thread {
public:
  server_thread(side& client, side& server) : s_(server) {
    if (&server.io != &client.io)
      t_ = std::thread([this] {
        try {
          s_.io.run();
        } catch (...) {
          error_ = std::current_exception();
        }
      });
  }
  ~server_thread() {
    if (t_.joinable()) {
      s_.io.stop();
      t_.join();
    }
  }
  void join() {
    if (!t_.joinable()) return;
    s_.io.stop();
    t_.join();
    if (error_) std::rethrow_exception(error_);
  }

private:
  side& s_;
  std::exception_ptr error_;
  std::thread t_;
};

void check(cv::error_code ec, const char* what) {
  if (ec) throw cv::system_error(ec, what);
}

struct result {
  std::vector<double> round_trips_us;  // latency tests (interleaved: the calls')
  double seconds = 0;
  std::uint64_t operations = 0;  // calls, bulk calls or reads
  std::uint64_t bytes = 0;
  std::vector<double> pingpong_round_trips_us{};  // interleaved: the ping-pongs'
};

/// Round trips between consecutive stamps, in microseconds, the first tenth left out.
std::vector<double> round_trips(const std::vector<std::uint64_t>& stamps, const bench::stamp_clock& clock) {
  const double scale = clock.us_per_tick();
  std::vector<double> out;
  for (std::size_t i = stamps.size() / 10; i + 1 < stamps.size(); ++i)
    out.push_back(static_cast<double>(stamps[i + 1] - stamps[i]) * scale);
  return out;
}

/// Runs a latency test: the server's loop on its thread, `first` (the first round trip) once the server's
/// receives are posted, then the client's loop until the test stops it.
void run_latency(side& client, side& server, const std::function<void()>& first) {
  server_thread t(client, server);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server's receives are posted
  first();
  client.io.run();
  t.join();
}

/// The server's side of a ping-pong: a receive of `n` bytes that, once completed, posts the next receive and
/// answers with a send of `n` bytes.
struct echoing {
  cv::queue_pair* qp;
  side* s;
  std::size_t n;
  void start() const { qp->async_recv(s->span(n, n), *this); }
  void operator()(cv::error_code ec, cv::received) const {
    if (ec == asio::error::operation_aborted) return;
    check(ec, "pingpong receive (server)");
    start();
    qp->async_send(s->span(0, n), [](cv::error_code e, std::size_t) { check(e, "pingpong send (server)"); });
  }
};

/// Send/receive ping-pong over raw queue pairs: receives posted ahead, each re-posted from its completion.
result pingpong(side& client, side& server, const config& c) {
  const std::size_t n = c.size;
  constexpr int ahead = 8;
  cv::queue_pair &cq = *client.qps[0], &sq = *server.qps[0];
  std::vector<std::uint64_t> stamps;
  stamps.reserve(static_cast<std::size_t>(c.iters) + 1);
  bench::stamp_clock clock;
  for (int i = 0; i < ahead; ++i)
    echoing{&sq, &server, n}.start();
  int pongs = 0;
  auto ping = [&] {
    stamps.push_back(bench::stamp_clock::now());
    cq.async_send(client.span(0, n), [](cv::error_code e, std::size_t) { check(e, "pingpong send (client)"); });
  };
  std::function<void()> client_recv = [&] {
    cq.async_recv(client.span(n, n), [&](cv::error_code ec, cv::received) {
      if (ec == asio::error::operation_aborted) return;
      check(ec, "pingpong receive (client)");
      if (++pongs + ahead <= c.iters) client_recv();
      if (pongs < c.iters)
        ping();
      else {
        stamps.push_back(bench::stamp_clock::now());
        client.io.stop();
      }
    });
  };
  for (int i = 0; i < std::min(ahead, c.iters); ++i)
    client_recv();
  run_latency(client, server, ping);
  return {round_trips(stamps, clock), 0, static_cast<std::uint64_t>(c.iters), 0};
}

/// The endpoints of every connection: the client's on its loop, the server's on the other.
struct endpoints {
  std::vector<std::unique_ptr<cv::message_endpoint>> client, server;
  endpoints(side& cs, side& ss, const config& c) {
    for (std::size_t i = 0; i < cs.qps.size(); ++i) {
      client.push_back(std::make_unique<cv::message_endpoint>(cs.pd, *cs.qps[i], cs.message_options(c)));
      server.push_back(std::make_unique<cv::message_endpoint>(ss.pd, *ss.qps[i], ss.message_options(c)));
    }
  }
};

/// The server's side of plain calls: answers each request with `reply`, asking for the next one first.
struct answering {
  cv::message_endpoint* ep;
  const std::vector<std::byte>* reply;
  void start() const { ep->async_receive_request(*this); }
  void operator()(cv::error_code ec, cv::inbound_request request) const {
    if (ec == asio::error::operation_aborted) return;
    check(ec, "async_receive_request");
    start();
    ep->async_reply(request, asio::buffer(*reply), [](cv::error_code e) {
      if (e != asio::error::operation_aborted) check(e, "async_reply");
    });
  }
};

/// Calls on every connection, `depth` in flight each, `limit` in all or until `duration` has passed since the first
/// one (the clock read every 16 replies), whichever comes first; the client's loop stops once the last reply came.
/// Each reply's time stamp goes to `stamps` when given.
result calls(side& client, side& server, const config& c, std::uint64_t limit, std::chrono::milliseconds duration,
             std::vector<std::uint64_t>* stamps) {
  endpoints eps(client, server, c);
  const std::vector<std::byte> request(c.size), reply(c.size);
  for (auto& ep : eps.server)
    answering{ep.get(), &reply}.start();
  std::uint64_t started = 0, done = 0;
  bool stopped = false;
  clock_type::time_point start, end, last;
  const auto more = [&] {
    if (!stopped && (started >= limit || (done % 16 == 0 && clock_type::now() >= end))) stopped = true;
    return !stopped;
  };
  std::function<void(cv::message_endpoint&)> call = [&](cv::message_endpoint& ep) {
    ++started;
    ep.async_call(asio::buffer(request), [&](cv::error_code ec, cv::inbound_message answer) {
      check(ec, "async_call");
      if (stamps) stamps->push_back(bench::stamp_clock::now());
      answer.release();
      ++done;
      if (more())
        call(ep);
      else if (done == started) {
        last = clock_type::now();
        client.io.stop();
      }
    });
  };
  server_thread t(client, server);
  start = clock_type::now();
  end = start + duration;
  if (stamps) stamps->push_back(bench::stamp_clock::now());
  for (auto& ep : eps.client)
    for (int i = 0; i < c.depth && more(); ++i)
      call(*ep);
  client.io.run();
  t.join();
  return {{}, std::chrono::duration<double>(last - start).count(), done, 0};
}

result call_lat(side& client, side& server, const config& c) {
  std::vector<std::uint64_t> stamps;
  stamps.reserve(static_cast<std::size_t>(c.iters) + 1);
  bench::stamp_clock clock;
  result r = calls(client, server, c, static_cast<std::uint64_t>(c.iters), std::chrono::hours(24), &stamps);
  r.round_trips_us = round_trips(stamps, clock);
  return r;
}

result call_rate(side& client, side& server, const config& c) {
  return calls(client, server, c, UINT64_MAX, std::chrono::milliseconds(c.duration_ms), nullptr);
}

/// Ping-pong round trips (raw queue pairs, connection 0) and calls (message endpoints, connection 1) in turn.
result interleaved(side& client, side& server, const config& c) {
  const std::size_t n = c.size;
  constexpr int ahead = 8;
  cv::queue_pair &cq = *client.qps[0], &sq = *server.qps[0];
  cv::message_endpoint cep(client.pd, *client.qps[1], client.message_options(c));
  cv::message_endpoint sep(server.pd, *server.qps[1], server.message_options(c));
  const std::vector<std::byte> request(n), reply(n);
  answering{&sep, &reply}.start();
  for (int i = 0; i < ahead; ++i)
    echoing{&sq, &server, n}.start();
  bench::stamp_clock clock;
  std::vector<std::uint64_t> call_ticks, pingpong_ticks;
  call_ticks.reserve(static_cast<std::size_t>(c.iters));
  pingpong_ticks.reserve(static_cast<std::size_t>(c.iters));
  std::uint64_t started = 0;
  int step = 0;
  std::function<void()> next = [&] {
    if (step == 2 * c.iters) return client.io.stop();
    const int k = step++;
    const bool call_first = (k / 2) % 2 == 1, call = (k % 2 == 0) == call_first;
    started = bench::stamp_clock::now();
    if (!call)
      return cq.async_send(client.span(0, n),
                           [](cv::error_code e, std::size_t) { check(e, "interleaved send (client)"); });
    cep.async_call(asio::buffer(request), [&](cv::error_code ec, cv::inbound_message answer) {
      check(ec, "interleaved async_call");
      call_ticks.push_back(bench::stamp_clock::now() - started);
      answer.release();
      next();
    });
  };
  std::function<void()> client_recv = [&] {
    cq.async_recv(client.span(n, n), [&](cv::error_code ec, cv::received) {
      if (ec == asio::error::operation_aborted) return;
      check(ec, "interleaved receive (client)");
      pingpong_ticks.push_back(bench::stamp_clock::now() - started);
      client_recv();
      next();
    });
  };
  for (int i = 0; i < ahead; ++i)
    client_recv();
  run_latency(client, server, next);
  // Each series' round trips in microseconds, the first tenth left out as warm-up.
  const auto us = [&](const std::vector<std::uint64_t>& ticks) {
    std::vector<double> out;
    for (std::size_t i = ticks.size() / 10; i < ticks.size(); ++i)
      out.push_back(static_cast<double>(ticks[i]) * clock.us_per_tick());
    return out;
  };
  result r{us(call_ticks), 0, static_cast<std::uint64_t>(c.iters), 0};
  r.pingpong_round_trips_us = us(pingpong_ticks);
  return r;
}

/// Bulk calls: the client's region (depth × size) exposed by a window per call; the server reads it into its own.
result bulk(side& client, side& server, const config& c) {
  endpoints eps(client, server, c);
  cv::message_endpoint &cep = *eps.client[0], &sep = *eps.server[0];
  cv::window_pool pool(client.pd, {.initial_windows = static_cast<std::size_t>(c.depth)});
  const std::vector<std::byte> note(8);
  std::vector<std::size_t> free_landing;
  for (int i = 0; i < c.depth; ++i)
    free_landing.push_back(static_cast<std::size_t>(i));
  // The server: each request's region read into a free landing place, then an 8-byte reply.
  std::function<void()> serve = [&] {
    sep.async_receive_request([&](cv::error_code ec, cv::inbound_request request) {
      if (ec == asio::error::operation_aborted) return;
      check(ec, "async_receive_request (bulk)");
      serve();
      const cv::bulk_request b = cv::parse_bulk_request(request.bytes());
      const std::size_t at = free_landing.back();
      free_landing.pop_back();
      auto held = std::make_shared<cv::inbound_request>(std::move(request));
      cv::async_bulk_read(sep.get_queue_pair(), b.descriptor, server.span(at * c.size, c.size),
                          [&, at, held](cv::error_code e, std::size_t) {
                            check(e, "async_bulk_read");
                            free_landing.push_back(at);
                            sep.async_reply(*held, asio::buffer(note), [](cv::error_code e2) {
                              if (e2 != asio::error::operation_aborted) check(e2, "async_reply (bulk)");
                            });
                          });
    });
  };
  serve();
  int started = 0, done = 0;
  clock_type::time_point last;
  std::function<void(std::size_t)> call = [&](std::size_t slot) {
    ++started;
    cv::async_bulk_call(cep, pool, client.mr, cv::window_range{slot * c.size, c.size}, cv::access::remote_read,
                        std::span<const std::byte>(note), [&, slot](cv::error_code ec, cv::inbound_message reply) {
                          check(ec, "async_bulk_call");
                          reply.release();
                          ++done;
                          if (started < c.iters)
                            call(slot);
                          else if (done == c.iters) {
                            last = clock_type::now();
                            client.io.stop();
                          }
                        });
  };
  server_thread t(client, server);
  const auto start = clock_type::now();
  for (int i = 0; i < std::min(c.depth, c.iters); ++i)
    call(static_cast<std::size_t>(i));
  client.io.run();
  t.join();
  const auto n = static_cast<std::uint64_t>(c.iters);
  return {{}, std::chrono::duration<double>(last - start).count(), n, n * c.size};
}

/// Plain RDMA reads of the client's region by the server, `depth` in flight, on the server's loop (this thread).
result read(side& client, side& server, const config& c) {
  cv::queue_pair& sq = *server.qps[0];
  const cv::remote_key key = cv::remote_key_of(client.mr);
  int started = 0, done = 0;
  clock_type::time_point last;
  std::function<void(std::size_t)> one = [&](std::size_t slot) {
    ++started;
    sq.async_read(server.span(slot * c.size, c.size), key.slice(slot * c.size, c.size),
                  [&, slot](cv::error_code ec, std::size_t) {
                    check(ec, "async_read");
                    ++done;
                    if (started < c.iters)
                      one(slot);
                    else if (done == c.iters) {
                      last = clock_type::now();
                      server.io.stop();
                    }
                  });
  };
  const auto start = clock_type::now();
  for (int i = 0; i < std::min(c.depth, c.iters); ++i)
    one(static_cast<std::size_t>(i));
  server.io.run();
  const auto n = static_cast<std::uint64_t>(c.iters);
  return {{}, std::chrono::duration<double>(last - start).count(), n, n * c.size};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  const bool bulky = c.test == "bulk" || c.test == "read";
  // Bulk and read: --depth regions of --size on each side; messages: a request and a reply buffer.
  const std::size_t buffer = bulky ? static_cast<std::size_t>(c.depth) * c.size : 2 * c.size;
  bench::check_fits("bench_calls", "the registered memory of both sides", 2 * std::uint64_t{buffer}, "--size", c.size);
  try {
    side client(c, buffer), server(c, buffer, c.loops == 1 ? &client.io : nullptr);
    for (std::size_t i = 0; i < client.qps.size(); ++i)
      cv::connect_pair(*client.qps[i], *server.qps[i]);
    result r;
    if (c.test == "pingpong")
      r = pingpong(client, server, c);
    else if (c.test == "call_lat")
      r = call_lat(client, server, c);
    else if (c.test == "interleaved")
      r = interleaved(client, server, c);
    else if (c.test == "call_rate")
      r = call_rate(client, server, c);
    else if (c.test == "bulk")
      r = bulk(client, server, c);
    else
      r = read(client, server, c);

    const auto r3 = [](double x) { return json_output::rounded(x, 3); };
    json_output::json::object j{{"device", client.dev.name()}, {"test", c.test}, {"size", c.size},
                                {"mode", c.mode}};
    if (!r.round_trips_us.empty()) {
      j["iters"] = c.iters;
      j["rtt_median_us"] = r3(percentile(r.round_trips_us, 0.5));
      j["rtt_p10_us"] = r3(percentile(r.round_trips_us, 0.1));
      j["rtt_p90_us"] = r3(percentile(r.round_trips_us, 0.9));
      j["rtt_samples"] = r.round_trips_us.size();
      if (!r.pingpong_round_trips_us.empty()) {
        const double pingpong = percentile(r.pingpong_round_trips_us, 0.5);
        j["pingpong_rtt_median_us"] = r3(pingpong);
        j["pingpong_rtt_p10_us"] = r3(percentile(r.pingpong_round_trips_us, 0.1));
        j["pingpong_rtt_p90_us"] = r3(percentile(r.pingpong_round_trips_us, 0.9));
        j["ratio_to_pingpong"] = r3(percentile(r.round_trips_us, 0.5) / pingpong);
      }
    } else if (c.test == "call_rate") {
      const double calls_per_s = static_cast<double>(r.operations) / r.seconds;
      j["connections"] = c.connections;
      j["depth"] = c.depth;
      j["loops"] = c.loops;
      j["duration_ms"] = c.duration_ms;
      j["calls"] = r.operations;
      j["seconds"] = r3(r.seconds);
      j["calls_per_s"] = json_output::rounded(calls_per_s, 1);
      j["msg_per_s"] = json_output::rounded(2 * calls_per_s, 1);
    } else {
      j["depth"] = c.depth;
      j["iters"] = c.iters;
      j["seconds"] = r3(r.seconds);
      j["bytes_per_second"] = json_output::rounded(static_cast<double>(r.bytes) / r.seconds, 1);
    }
    if (c.json) {
      json_output::print(j);
    } else {
      std::printf("%s\n", json_output::json::serialize(j).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_calls: %s\n", e.what());
    return 1;
  }
  return 0;
}
