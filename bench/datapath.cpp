// bench_datapath: latency and bandwidth of RDMA write, read and send through coverbs, measured the way
// perftest measures them, so the figures sit side by side with ib_write_lat, ib_read_lat, ib_send_lat
// and ib_write_bw in the same run.
//
//   bench_datapath [--test write_lat|read_lat|send_lat|write_bw|read_bw|send_bw] (default write_lat)
//                  [--size BYTES] [--iters N] [--tx-depth N] [--mode spin|events|adaptive]
//                  [--way default|use_awaitable|handler|raw|interleaved] [--cq-mod N] [--device NAME] [--json]
//
// Two threads, each with its own io_context, completion queue and RC queue pair, connected to each other
// on one device (like perftest's server and client processes):
//   write_lat  ping-pong of RDMA writes; each side spins on the last byte of its buffer, then writes back.
//              Reports half the round trip (perftest's t_typical is the median of the same).
//   read_lat   the client reads `size` bytes repeatedly; reports the full read time.
//   send_lat   ping-pong of sends into pre-posted receives; half the round trip.
//   *_bw       the client keeps `tx-depth` operations in flight; reports bytes/s and message rate.
// --mode: spin (busy-polling CQ, like perftest's default), events (sleep on the completion channel, like
// perftest -e), adaptive (spin 50 us, then sleep).
// --way: how read_lat runs each read: awaited with the default token (deferred) or use_awaitable, with a
// completion handler that starts the next read, or raw: ibv_post_send and a busy ibv_poll_cq on the same
// queue pair and completion queue, no coverbs on the path — this process's floor, to hold against
// ib_read_lat's (what separates the two processes) and against coverbs' (what the runtime adds) — or
// interleaved: each iteration one raw read and one co_await'ed read (default token) on the same queue pair,
// which goes first alternating, so both see the same moments of the machine; t_* are the awaited reads',
// raw_t_* the raw ones', and ratio_to_raw = t_typical / raw_t_typical: the runtime's share of a read that a
// slow phase of the emulator (it slows every process alike for seconds) cannot move.
// --way raw also runs write_bw and read_bw as raw verbs in this process (ibv_post_send and ibv_poll_cq on
// the same queue pair, kept `tx-depth` deep as ib_write_bw does): what separates this process's bandwidth
// from perftest's, and coverbs' from this process's. --cq-mod N (raw bandwidth only, like perftest's -Q)
// signals every Nth work request instead of each; coverbs signals each, as ib_write_bw -Q 1 does.
#include <coverbs/coverbs.hpp>

#include <coverbs_support/json_output.hpp>
#include <coverbs_support/statistics.hpp>
#include "cli.hpp"
#include "stamp_clock.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
using clock_type = std::chrono::steady_clock;
using asio::awaitable;

namespace {

struct config {
  std::string test = "write_lat";
  std::size_t size = 2;
  int iters = 1000;
  int tx_depth = 128;
  std::string mode = "spin";
  std::string device;
  bool json = false;
  std::string way = "default";
  int cq_mod = 1;
  std::size_t inline_bytes = 0;
};

constexpr const char* usage_text =
    "[--test write_lat|read_lat|send_lat|write_bw|read_bw|send_bw (default write_lat)] [--size BYTES] [--iters N] "
    "[--tx-depth N] [--mode spin|events|adaptive] "
    "[--way default|use_awaitable|handler|raw|interleaved] [--cq-mod N] [--inline BYTES] [--device NAME] [--json]";

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", "bench_datapath"};
  bench::describe(
      app, usage_text,
      "RDMA write, read and send latency and bandwidth through coverbs, measured as perftest measures them.");
  app.add_option("--test", c.test,
                 "write_lat, send_lat: ping-pong, half the round trip; read_lat: each read's full time; *_bw: "
                 "--tx-depth operations in flight, bytes/s and message rate (default write_lat)")
      ->check(command_line::one_of({"write_lat", "read_lat", "send_lat", "write_bw", "read_bw", "send_bw"}));
  app.add_option("--size", c.size,
                 "bytes per operation: 4096, 64K, 1M (default 2; write_lat and send_lat take at least 2, the "
                 "byte each side spins on)")
      ->transform(command_line::size(1, 1ull << 30));
  app.add_option("--iters", c.iters, "operations measured (default 1000)")->transform(command_line::count(2, 100'000'000));
  app.add_option("--tx-depth", c.tx_depth,
                 "*_bw: operations kept in flight, like perftest's -t (default 128); it also sizes both queues")
      ->transform(command_line::count(1, 8192));
  app.add_option("--mode", c.mode,
                 "how coverbs waits for a completion: spin (busy-polls, like perftest's default), events (sleeps "
                 "on the completion channel, like perftest -e), adaptive (spins 50 us, then sleeps); default spin")
      ->check(command_line::one_of({"spin", "events", "adaptive"}));
  app.add_option(
         "--way", c.way,
         "read_lat: await each read with the default token (deferred) or use_awaitable, complete it "
         "with a handler, post and poll it as raw verbs on the same queue pair (no coverbs), or alternate a raw "
         "and an awaited read each iteration (interleaved; reports both and their ratio); write_bw and read_bw: "
         "raw (the same queue pair kept --tx-depth deep with raw verbs)")
      ->check(command_line::one_of({"default", "use_awaitable", "handler", "raw", "interleaved"}));
  app.add_option("--cq-mod", c.cq_mod,
                 "with --way raw on write_bw or read_bw: signal every Nth work request (perftest's -Q); "
                 "default 1, each signaled as coverbs does")
      ->transform(command_line::count(1, 8192));
  app.add_option("--inline", c.inline_bytes,
                 "queue_pair_options::max_inline_data of both queue pairs: sends and writes up to this size are "
                 "copied into the work request (IBV_SEND_INLINE); default 0, as perftest runs rxe (coverbs' own "
                 "default is 64, UCX's rc_verbs TX_MIN_INLINE 64); the device caps it (rxe at 512 bytes): above the "
                 "cap the queue "
                 "pairs are refused with device_limit_exceeded, naming the largest size the device takes")
      ->transform(command_line::size(0, 4096));
  app.add_option("--device", c.device, "RDMA device name, as ibv_devices lists it (default: the first)");
  app.add_flag("--json", c.json, "print one JSON object of the figures instead of a line of text");
  bench::parse(app, argc, argv);
  const bool one_sided_bw = c.test == "write_bw" || c.test == "read_bw";
  if (c.way != "default" && c.test != "read_lat" && !(c.way == "raw" && one_sided_bw))
    bench::usage_error(app, "--way " + c.way + " applies to --test " +
                                (c.way == "raw" ? "read_lat, write_bw and read_bw" : "read_lat only") +
                                (c.way == "raw" ? "" : " (the other tests run coverbs' one way)") +
                                ": drop it or change --test");
  if (c.cq_mod != 1 && !(c.way == "raw" && one_sided_bw))
    bench::usage_error(app, std::string("--cq-mod applies to --way raw with --test write_bw or read_bw (coverbs "
                                        "signals every work request): drop it or ") +
                                (c.way != "raw" ? "add --way raw" : "use --test write_bw or read_bw"));
  if (c.inline_bytes && (c.test.starts_with("read") || c.way == "raw"))
    bench::usage_error(app, "--inline applies to the writes and sends coverbs posts (--test write_lat, send_lat, "
                            "write_bw or send_bw, without --way raw): " +
                                std::string(c.way == "raw" ? "drop --inline or --way raw (the raw loop posts "
                                                             "without IBV_SEND_INLINE)"
                                                           : "drop it or change --test"));
  if (c.cq_mod > c.tx_depth)
    bench::usage_error(app, "--cq-mod " + std::to_string(c.cq_mod) + " is above --tx-depth " +
                                std::to_string(c.tx_depth) +
                                ": the send queue would fill before a work request is signaled; use at most "
                                "--tx-depth");
  if (c.test.ends_with("_lat") && c.size < 2 && c.test != "read_lat") c.size = 2;
  return c;
}

/// One side: its own device context (like a perftest process), loop, completion queue, queue pair and
/// registered buffer.
struct side {
  asio::io_context io{1};
  cv::device dev;
  cv::protection_domain pd;
  cv::completion_queue cq;
  cv::queue_pair qp;
  std::vector<std::byte> bytes;
  cv::memory_region mr;

  side(const config& c, std::size_t buffer)
      : dev(cv::device::open(c.device)), pd(dev), cq(io, dev, cq_options(c)), qp(pd, cq, qp_options(c)), bytes(buffer),
        mr(pd, bytes, cv::access::local_write | cv::access::remote_write | cv::access::remote_read) {}

  static cv::completion_queue_options cq_options(const config& c) {
    cv::completion_queue_options o;
    o.depth = 2 * (c.tx_depth + 16) + 64;
    o.spin = c.mode == "spin"       ? cv::completion_queue_options::spin_forever
             : c.mode == "adaptive" ? std::chrono::nanoseconds(50'000)
                                    : std::chrono::nanoseconds(0);
    return o;
  }
  static cv::queue_pair_options qp_options(const config& c) {
    cv::queue_pair_options o;
    o.max_send_wr = static_cast<std::uint32_t>(c.tx_depth + 16);
    o.max_recv_wr = static_cast<std::uint32_t>(c.tx_depth + 16);
    // perftest runs rxe with "Max inline data: 0[B]" (its -I sets another): compare like with like.
    o.max_inline_data = static_cast<std::uint32_t>(c.inline_bytes);
    return o;
  }
  cv::registered_span span(std::size_t off, std::size_t n) const { return cv::span_of(mr, off, n); }
  cv::remote_key key() const { return cv::remote_key_of(mr); }
  /// The second half of the buffer receives the peer's writes; its last byte signals arrival.
  volatile std::byte& landing_last(std::size_t size) { return bytes[2 * size - 1]; }
  cv::remote_key landing_key(std::size_t size) const { return key().slice(size, size); }
};

using bench::stamp_clock;

struct result {
  std::vector<double> samples_us;      // latency tests
  std::vector<double> raw_samples_us;  // read_lat --way interleaved: the raw reads'
  double seconds = 0;                  // bandwidth tests
  std::uint64_t bytes = 0, messages = 0;
};

/// Half of each round trip between consecutive stamps, in microseconds.
std::vector<double> half_round_trips(const std::vector<std::uint64_t>& stamps, const stamp_clock& clock) {
  const double scale = clock.us_per_tick();
  std::vector<double> out;
  for (std::size_t i = 0; i + 1 < stamps.size(); ++i)
    out.push_back(static_cast<double>(stamps[i + 1] - stamps[i]) * scale / 2);
  return out;
}

template <class Fn>
void run_in(side& s, Fn coro, std::exception_ptr& error) {
  asio::co_spawn(s.io, coro(), [&](std::exception_ptr e) { error = e; });
  s.io.run();
}

/// Spins until `flag` holds `expect`, letting the loop run (completions, credits) every 4096 checks. Like
/// perftest, which watches the byte without pause: a loop turn costs far more than a check (in the emulated
/// guest ~15 us against a few ns), so yielding often would leave the byte unwatched most of the time.
awaitable<void> spin_until(volatile std::byte& flag, std::byte expect) {
  for (int n = 0; flag != expect; ++n)
    if (n % 4096 == 4095) co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

/// Write ping-pong, as ib_write_lat: the client writes `size` bytes into the server's landing half; the
/// server spins until their last byte changes and writes the same back. Neither side waits for its own
/// write's completion before spinning (completions return send-queue credits in the background).
result write_lat(side& client, side& server, const config& c) {
  result r;
  std::vector<std::uint64_t> stamps(static_cast<std::size_t>(c.iters) + 1);
  std::exception_ptr e1, e2;
  const std::size_t n = c.size;
  stamp_clock clock;
  auto check = [](cv::error_code ec, std::size_t) {
    if (ec) throw cv::system_error(ec, "write_lat");
  };
  auto pong = [&]() -> awaitable<void> {
    for (int i = 0; i < c.iters; ++i) {
      const auto expect = std::byte((i % 255) + 1);
      co_await spin_until(server.landing_last(n), expect);
      server.bytes[n - 1] = expect;
      server.qp.async_write(server.span(0, n), client.landing_key(n), check);
    }
  };
  auto ping = [&]() -> awaitable<void> {
    for (int i = 0; i < c.iters; ++i) {
      const auto expect = std::byte((i % 255) + 1);
      stamps[static_cast<std::size_t>(i)] = stamp_clock::now();
      client.bytes[n - 1] = expect;
      client.qp.async_write(client.span(0, n), server.landing_key(n), check);
      co_await spin_until(client.landing_last(n), expect);
    }
    stamps.back() = stamp_clock::now();
  };
  std::thread t([&] { run_in(server, pong, e2); });
  run_in(client, ping, e1);
  t.join();
  if (e1) std::rethrow_exception(e1);
  if (e2) std::rethrow_exception(e2);
  r.samples_us = half_round_trips(stamps, clock);
  return r;
}

/// One read of `size` bytes on the client's queue pair as raw verbs: posted and busy-polled from its
/// completion queue as ib_read_lat does, no coverbs on the path.
class raw_reader {
public:
  raw_reader(side& client, side& server, std::size_t size)
      : qp_(client.qp.native_handle()), cq_(client.cq.native_handle()) {
    sge_.addr = reinterpret_cast<std::uintptr_t>(client.bytes.data());
    sge_.length = static_cast<std::uint32_t>(size);
    sge_.lkey = client.mr.native_handle()->lkey;
    wr_.sg_list = &sge_;
    wr_.num_sge = 1;
    wr_.opcode = IBV_WR_RDMA_READ;
    wr_.send_flags = IBV_SEND_SIGNALED;
    wr_.wr.rdma.remote_addr = server.key().addr;
    wr_.wr.rdma.rkey = server.key().rkey;
  }
  /// The read's full time in ticks. Only while no coverbs operation is outstanding on the queue pair: the
  /// completion is taken from the completion queue here, before the loop can see it.
  std::uint64_t operator()() {
    const auto t0 = stamp_clock::now();
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(qp_, &wr_, &bad))
      throw cv::system_error(cv::errno_code(rc), "ibv_post_send(READ)");
    ibv_wc wc{};
    int got = 0;
    while ((got = ibv_poll_cq(cq_, 1, &wc)) == 0) {
    }
    if (got < 0 || wc.status != IBV_WC_SUCCESS)
      throw cv::system_error(got < 0 ? cv::errno_code(EIO) : cv::make_error_code(wc.status), "raw read");
    return stamp_clock::now() - t0;
  }

private:
  ibv_qp* qp_;
  ibv_cq* cq_;
  ibv_sge sge_{};
  ibv_send_wr wr_{};
};

/// Read latency: each read's full time, the server passive.
result read_lat(side& client, side& server, const config& c) {
  result r;
  std::exception_ptr e;
  stamp_clock clock;
  std::vector<std::uint64_t> ticks, raw_ticks;
  ticks.reserve(static_cast<std::size_t>(c.iters));
  raw_reader raw(client, server, c.size);
  if (c.way == "raw") {
    for (int i = 0; i < c.iters; ++i)
      ticks.push_back(raw());
  } else if (c.way == "interleaved") {
    raw_ticks.reserve(static_cast<std::size_t>(c.iters));
    auto reader = [&]() -> awaitable<void> {
      for (int i = 0; i < c.iters; ++i) {
        if (i % 2 == 0) raw_ticks.push_back(raw());
        const auto t0 = stamp_clock::now();
        co_await client.qp.async_read(client.span(0, c.size), server.key());
        ticks.push_back(stamp_clock::now() - t0);
        if (i % 2 == 1) raw_ticks.push_back(raw());
      }
    };
    run_in(client, reader, e);
    if (e) std::rethrow_exception(e);
  } else if (c.way == "handler") {
    std::uint64_t t0 = 0;
    std::function<void()> next = [&] {
      t0 = stamp_clock::now();
      client.qp.async_read(client.span(0, c.size), server.key(), [&](cv::error_code ec, std::size_t) {
        if (ec) throw cv::system_error(ec, "read_lat");
        ticks.push_back(stamp_clock::now() - t0);
        if (ticks.size() < static_cast<std::size_t>(c.iters)) next();
      });
    };
    next();
    client.io.run();
  } else {
    auto reader = [&]() -> awaitable<void> {
      for (int i = 0; i < c.iters; ++i) {
        const auto t0 = stamp_clock::now();
        if (c.way == "use_awaitable")
          co_await client.qp.async_read(client.span(0, c.size), server.key(), asio::use_awaitable);
        else
          co_await client.qp.async_read(client.span(0, c.size), server.key());
        ticks.push_back(stamp_clock::now() - t0);
      }
    };
    run_in(client, reader, e);
    if (e) std::rethrow_exception(e);
  }
  const double scale = clock.us_per_tick();
  for (auto t : ticks)
    r.samples_us.push_back(static_cast<double>(t) * scale);
  for (auto t : raw_ticks)
    r.raw_samples_us.push_back(static_cast<double>(t) * scale);
  return r;
}

/// Send ping-pong into receives posted ahead (perftest pre-posts its receives the same way): on each
/// receive completion a side re-posts that receive, and the server answers / the client sends the next ping.
result send_lat(side& client, side& server, const config& c) {
  result r;
  std::vector<std::uint64_t> stamps;
  stamps.reserve(static_cast<std::size_t>(c.iters) + 1);
  stamp_clock clock;
  const std::size_t n = c.size;
  constexpr int ahead = 8;
  auto fail = [](cv::error_code ec) {
    if (ec) throw cv::system_error(ec, "send_lat");
  };
  int answered = 0;
  std::function<void()> server_recv = [&] {
    server.qp.async_recv(server.span(n, n), [&](cv::error_code ec, cv::received) {
      fail(ec);
      if (++answered + ahead <= c.iters) server_recv();
      server.qp.async_send(server.span(0, n), [&](cv::error_code e, std::size_t) { fail(e); });
    });
  };
  for (int i = 0; i < std::min(ahead, c.iters); ++i)
    server_recv();
  std::exception_ptr server_error;
  std::thread t([&] {
    try {
      server.io.run();
    } catch (...) {
      server_error = std::current_exception();
    }
  });
  int pongs = 0;
  std::function<void()> ping = [&] {
    stamps.push_back(stamp_clock::now());
    client.qp.async_send(client.span(0, n), [&](cv::error_code e, std::size_t) { fail(e); });
  };
  std::function<void()> client_recv = [&] {
    client.qp.async_recv(client.span(n, n), [&](cv::error_code ec, cv::received) {
      fail(ec);
      if (++pongs + ahead <= c.iters) client_recv();
      if (pongs < c.iters)
        ping();
      else
        stamps.push_back(stamp_clock::now());
    });
  };
  for (int i = 0; i < std::min(ahead, c.iters); ++i)
    client_recv();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server's receives are posted
  ping();
  client.io.run();
  t.join();
  if (server_error) std::rethrow_exception(server_error);
  r.samples_us = half_round_trips(stamps, clock);
  return r;
}

/// Bandwidth as raw verbs on the client's queue pair, the loop ib_write_bw runs: work requests posted one
/// per ibv_post_send while fewer than `tx_depth` are outstanding, every `cq_mod`-th signaled (and the last),
/// completions polled 16 at a time, each accounting for the `cq_mod` work requests it ends.
result raw_bandwidth(side& client, side& server, const config& c) {
  result r;
  ibv_qp* qp = client.qp.native_handle();
  ibv_cq* cq = client.cq.native_handle();
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(client.bytes.data());
  sge.length = static_cast<std::uint32_t>(c.size);
  sge.lkey = client.mr.native_handle()->lkey;
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = c.test == "write_bw" ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
  wr.wr.rdma.remote_addr = server.key().addr;
  wr.wr.rdma.rkey = server.key().rkey;
  std::int64_t posted = 0, completed = 0;
  const std::int64_t iters = c.iters, depth = c.tx_depth;
  ibv_wc wc[16];
  const auto t0 = clock_type::now();
  while (completed < iters) {
    while (posted < iters && posted - completed < depth) {
      const bool last = posted + 1 == iters;
      wr.send_flags = (posted % c.cq_mod == c.cq_mod - 1 || last) ? IBV_SEND_SIGNALED : 0;
      // wr_id: how many work requests this completion ends (a signaled one ends itself and those before it).
      wr.wr_id = static_cast<std::uint64_t>(last ? posted % c.cq_mod + 1 : c.cq_mod);
      ibv_send_wr* bad = nullptr;
      if (const int rc = ibv_post_send(qp, &wr, &bad))
        throw cv::system_error(cv::errno_code(rc), "ibv_post_send(" + c.test + ")");
      ++posted;
    }
    const int got = ibv_poll_cq(cq, 16, wc);
    if (got < 0) throw cv::system_error(cv::errno_code(EIO), "ibv_poll_cq");
    for (int i = 0; i < got; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) throw cv::system_error(cv::make_error_code(wc[i].status), "raw " + c.test);
      completed += static_cast<std::int64_t>(wc[i].wr_id);
    }
  }
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  r.messages = static_cast<std::uint64_t>(completed);
  r.bytes = r.messages * c.size;
  return r;
}

/// Bandwidth: `tx_depth` operations in flight until `iters` completed.
result bandwidth(side& client, side& server, const config& c) {
  result r;
  int posted = 0, completed = 0;
  const std::string op = c.test.substr(0, c.test.find('_'));
  std::exception_ptr e_server;
  std::thread server_thread;
  if (op == "send") {
    // The server keeps receives posted, re-posting each as it completes.
    server_thread = std::thread([&] {
      int received = 0;
      std::function<void()> post_one = [&] {
        server.qp.async_recv(server.span(0, c.size), [&](cv::error_code ec, cv::received) {
          if (ec) return;
          if (++received + c.tx_depth <= c.iters) post_one();
        });
      };
      for (int i = 0; i < std::min(c.tx_depth + 8, c.iters); ++i)
        post_one();
      server.io.run();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::function<void()> post_next = [&] {
    ++posted;
    auto done = [&](cv::error_code ec, std::size_t) {
      if (ec) throw cv::system_error(ec, c.test);
      ++completed;
      if (posted < c.iters) post_next();
    };
    if (op == "write")
      client.qp.async_write(client.span(0, c.size), server.key(), done);
    else if (op == "read")
      client.qp.async_read(client.span(0, c.size), server.key(), done);
    else
      client.qp.async_send(client.span(0, c.size), done);
  };
  const auto t0 = clock_type::now();
  for (int i = 0; i < std::min(c.tx_depth, c.iters); ++i)
    post_next();
  client.io.run();
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (server_thread.joinable()) server_thread.join();
  r.messages = static_cast<std::uint64_t>(completed);
  r.bytes = r.messages * c.size;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  // Two sides (as two perftest processes), each registering 2 x --size: all of it pinned.
  bench::check_fits("bench_datapath", "the registered buffers of both sides (4 x --size)", 4 * std::uint64_t{c.size},
                    "--size", c.size);
  try {
    side client(c, 2 * c.size), server(c, 2 * c.size);
    cv::connect_pair(client.qp, server.qp);

    result r;
    if (c.test == "write_lat")
      r = write_lat(client, server, c);
    else if (c.test == "read_lat")
      r = read_lat(client, server, c);
    else if (c.test == "send_lat")
      r = send_lat(client, server, c);
    else if (c.way == "raw")
      r = raw_bandwidth(client, server, c);
    else
      r = bandwidth(client, server, c);

    // How often the client polled its completion queue for each operation, and how many completions it
    // dispatched: where a busy-polled latency goes between the loop and the verbs.
    const cv::completion_queue_stats cs = client.cq.stats();
    // (null for --way raw: that loop polls the completion queue with ibv_poll_cq, past these counters.)
    const auto per_op = [&](std::uint64_t n, int decimals) -> json_output::json::value {
      if (c.way == "raw") return nullptr;
      return json_output::rounded(static_cast<double>(n) / c.iters, decimals);
    };
    const json_output::json::value polls_per_op = per_op(cs.polls, 3), completions_per_op = per_op(cs.completions, 3);
    // The raw loops busy-poll whatever --mode says.
    const std::string mode = c.way == "raw" ? "spin" : c.mode;
    if (c.test.ends_with("_lat")) {
      const statistics::summary st = statistics::summarize(r.samples_us);
      const double typical = st.median, p99 = st.p99, min = st.min;
      const auto r3 = [](double x) { return json_output::rounded(x, 3); };
      json_output::json::object o{{"test", c.test},
                                  {"mode", mode},
                                  {"bytes", c.size},
                                  {"iterations", c.iters},
                                  {"t_min_us", r3(min)},
                                  {"t_typical_us", r3(typical)},
                                  {"t_p99_us", r3(p99)},
                                  {"client_polls_per_op", polls_per_op},
                                  {"client_completions_per_op", completions_per_op}};
      if (c.test == "read_lat") o["way"] = c.way;
      if (c.inline_bytes) o["inline_bytes"] = c.inline_bytes;
      if (!r.raw_samples_us.empty()) {
        const statistics::summary raw = statistics::summarize(r.raw_samples_us);
        o["raw_t_min_us"] = r3(raw.min);
        o["raw_t_typical_us"] = r3(raw.median);
        o["raw_t_p99_us"] = r3(raw.p99);
        o["ratio_to_raw"] = r3(typical / raw.median);
      }
      if (c.json)
        json_output::print(o);
      else
        std::printf("%-9s %-8s %8zu B %8d iters  t_min %8.2f us  t_typical %8.2f us  p99 %8.2f us\n", c.test.c_str(),
                    mode.c_str(), c.size, c.iters, min, typical, p99);
      if (!c.json && !r.raw_samples_us.empty())
        std::printf("%-9s %-8s %8zu B %8d iters  raw verbs, interleaved: t_typical %8.2f us  ratio %.3f\n",
                    c.test.c_str(), mode.c_str(), c.size, c.iters, o["raw_t_typical_us"].as_double(),
                    o["ratio_to_raw"].as_double());
    } else {
      const double bps = static_cast<double>(r.bytes) / r.seconds,
                   mpps = static_cast<double>(r.messages) / r.seconds / 1e6;
      if (c.json)
        json_output::print(json_output::json::object{{"test", c.test},
                                                     {"mode", mode},
                                                     {"bytes", c.size},
                                                     {"iterations", c.iters},
                                                     {"tx_depth", c.tx_depth},
                                                     {"way", c.way},
                                                     {"cq_mod", c.cq_mod},
                                                     {"bytes_per_second", json_output::rounded(bps, 1)},
                                                     {"msg_rate_mpps", json_output::rounded(mpps, 6)},
                                                     {"client_polls_per_op", polls_per_op},
                                                     {"client_completions_per_op", completions_per_op}});
      else
        std::printf("%-9s %-8s %8zu B %8d iters  %10.2f MiB/s  %8.4f Mpps\n", c.test.c_str(), mode.c_str(), c.size,
                    c.iters, bps / 1048576.0, mpps);
    }
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "bench_datapath: %s\n",
                 size_argument::cannot_allocate("the registered buffers of both sides (4 x --size)",
                                                4 * std::uint64_t{c.size}, "--size", c.size)
                     .c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_datapath: %s\n", e.what());
    return 1;
  }
  return 0;
}
