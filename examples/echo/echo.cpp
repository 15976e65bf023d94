// echo: an rdma_cm echo server and its client in one program.
//
// The server accepts connections (coverbs::listener::async_accept). By default it runs one coroutine per
// connection: it keeps receives posted in blocks of a registered buffer pool and sends every message back from
// the block it landed in. With --srq every connection's queue pair is attached to one shared receive queue
// (coverbs::shared_receive_queue) whose receives are the pool's blocks, and one coroutine serves them all: each
// message reports the queue pair it came to, is echoed on that connection, and its block goes back to the SRQ.
// The client sends messages of many sizes (1 byte .. 64 KiB, inline and not), keeps several in flight, and
// verifies every byte of every echo. `--self-test` runs the server and several clients in one process, on one
// io_context.
//
// The protocol: the server greets each connection with an empty message carrying immediate data `greeting`
// once it is ready to serve it; the client waits for it, then sends its messages, and every message comes
// back unchanged. An SRQ server needs the greeting: a message's completion (completion queue) and the accept's
// RDMA_CM_EVENT_ESTABLISHED (the listener's event channel) reach the loop in either order, so without it a
// client's first message could arrive for a queue pair the server does not know yet.
#include <coverbs/coverbs.hpp>

#include "common/command_line.hpp"
#include "common/completions.hpp"
#include "common/device_watch.hpp"
#include "common/metrics_port.hpp"
#include "common/peer.hpp"
#include "common/run.hpp"

#include <coverbs_support/timings.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using example::clock;
using example::tuple;

constexpr const char* usage_text =
    "echo: an rdma_cm echo server and its client in one program (a coverbs example).\n"
    "\n"
    "  echo --self-test [--clients K] [--messages N] [--srq [--srq-depth D]] [--address ADDR]\n"
    "      [--metrics-port N]\n"
    "      the server and K clients (default 4) in one process and one io_context, on ADDR (default\n"
    "      10.77.0.1, the Soft-RoCE guest's rxe0); exit status 0 only if every echoed byte was verified.\n"
    "  echo --listen ADDR PORT [--connections N] [--srq [--srq-depth D]]\n"
    "      serve clients on ADDR:PORT (a numeric address of an RDMA device); exit once N connections\n"
    "      have ended (default 0: serve until SIGINT or SIGTERM, which end it with its report; exit status\n"
    "      0 if every connection it served ended well).\n"
    "  echo --connect ADDR PORT [--messages N]\n"
    "      send N messages (default 400) of 1 .. 65536 bytes, 8 in flight, and verify every echoed byte\n"
    "      (a refused connection is tried again for 10 s, so client and server may start together).\n"
    "\n"
    "The server's receives:\n"
    "  default  each connection keeps 16 receives of its own posted (16 x 64 KiB registered per connection,\n"
    "           1 MiB); the server serves 32 connections at most.\n"
    "  --srq    every connection's queue pair is attached to one shared receive queue of D receives\n"
    "           (D x 64 KiB registered in all); one coroutine echoes every message on the connection it came\n"
    "           to and posts its block again. D (--srq-depth) is by default 8 x K with --self-test, every\n"
    "           message the clients keep in flight (a smaller D is refused), and 256 with --listen (clients\n"
    "           whose messages find no receive posted are retried by their queue pairs: receiver not ready).\n"
    "Every wait on the peer is bounded: a client gives up a server silent for 20 s, a server gives up a\n"
    "client silent for 20 s, and a disconnect waits 20 s at most for its answer (1 s once the port is\n"
    "down: no answer can come). The device's events are read (coverbs::device_events): a port going down\n"
    "ends the connections on it at once, reported as the port's error (errc::port_error), and the server\n"
    "goes on serving.\n"
    "--metrics-port N (any role): serve coverbs' metrics at http://127.0.0.1:N/metrics (Prometheus text; read\n"
    "them with curl or `coverbs stats HOST:N`); counting is on while it is given.\n"
    "Limits: --clients 1..32 (1..64 with --srq), --messages 1..1000000, --connections 0..1000000,\n"
    "--srq-depth 1..512.\n"
    "What the server holds: one protection domain and one completion queue for every connection; its depth\n"
    "is 8192 (64 per connection) without --srq, and D + 8 per connection with --srq (the SRQ's D once, then\n"
    "each connection's 8 sends: D + 8 x K with --self-test; D + 8 x 64 with --listen, which serves 64\n"
    "connections at once: one more is refused until one ends). File descriptors: one per server connection\n"
    "(its rdma_cm event channel), two per client (event channel and completion channel) and about ten more,\n"
    "so --self-test --srq --clients 64 needs about 200 (ulimit -n is often 1024). Each self-test client\n"
    "registers 2 MiB of its own.\n"
    "Run it where verbs work; without an RDMA device, in the Soft-RoCE guest, from the project folder:\n"
    "  tools/rxe-vm -- build/examples/echo --self-test\n"
    "  tools/rxe-vm -- build/examples/echo --self-test --srq --clients 64\n"
    "  tools/rxe-vm -- sh -c 'build/examples/echo --listen 10.77.0.1 7471 --connections 1 & s=$!;\n"
    "                         build/examples/echo --connect 10.77.0.1 7471 && wait $s'\n";

constexpr std::size_t max_message = 65536;               // bytes; the pool's block size
constexpr std::size_t blocks_per_arena = (std::size_t{2} << 20) / max_message;  // 32
constexpr std::size_t client_window = 8;                 // messages a client keeps in flight
constexpr std::size_t server_depth = 2 * client_window;  // receives a server connection keeps posted (no SRQ)
constexpr std::uint64_t max_clients = 32;                // connections a server without SRQ serves at once
// ... with --srq. More would fit the completion queue, but connecting them at once is slow: with 128 in the
// Soft-RoCE guest, 34 connects timed out (10 s, connect_options::connect_timeout).
constexpr std::uint64_t max_clients_srq = 64;
constexpr std::uint64_t max_srq_depth = max_clients_srq * client_window;  // 512 receives, 32 MiB
constexpr std::uint64_t listen_srq_depth = 256;          // --listen --srq without --srq-depth
constexpr std::uint32_t srq_send_wr = client_window;     // a connection's echoes in flight with --srq
constexpr std::uint32_t greeting = 0x6563686f;           // "echo": the immediate data of the server's greeting
// Message k of client c has size message_sizes[(k + c) % 12]: inline (<= 64 bytes) and not, around
// page and MTU boundaries, up to a whole block.
constexpr std::size_t message_sizes[] = {1, 8, 63, 64, 65, 512, 1500, 4096, 4097, 9000, 32768, max_message};

std::size_t message_size(unsigned client, std::size_t k) {
  return message_sizes[(k + client) % std::size(message_sizes)];
}
/// Byte `j` of message `k` of `client`: differs between messages, so a misplaced echo is caught too.
std::byte message_byte(unsigned client, std::size_t k, std::size_t j) {
  return static_cast<std::byte>((client * 89 + k * 131 + j * 7 + (j >> 8) * 13) & 0xff);
}

cv::queue_pair_options qp_options() {
  cv::queue_pair_options o;
  o.max_send_wr = 32;
  o.max_recv_wr = 32;
  return o;
}

/// An empty span of `block`: what the greeting sends.
cv::registered_span nothing_of(const cv::registered_buffer& block) { return block.span().subspan(0, 0); }

/// Blocks of 64 KiB in 2 MiB arenas (32 blocks each), `initial_arenas` registered up front, the others when
/// needed, `max_arenas` in all.
cv::pool_options pool_options(std::size_t max_arenas, std::size_t initial_arenas = 1) {
  cv::pool_options o;
  o.size_classes = {max_message};
  o.arena_size = std::size_t{2} << 20;
  o.initial_arenas = initial_arenas;
  o.max_arenas = max_arenas;
  o.rights = cv::access::local_write;
  return o;
}

// --- server ---

struct server_counters {
  std::size_t accepted = 0, ended = 0, failed_accepts = 0, unexpected_ends = 0;
  std::size_t messages = 0, bytes = 0;
  // --srq only: messages that arrived for a connection already ended (a client that left without waiting for
  // its echoes), and the fewest receives seen posted when a message arrived.
  std::size_t orphans = 0, fewest_posted = SIZE_MAX;
};

/// How the server is sized (see the usage text).
struct server_config {
  std::uint32_t srq_depth = 0;      ///< receives of the shared receive queue; 0: no SRQ, 16 per connection
  std::uint32_t srq_at_once = 0;    ///< with an SRQ: connections its completion queue holds at once
  std::size_t connections = 0;      ///< connections to serve before the server ends; 0: forever
};

/// One connection of an SRQ server, by the qp_num of its queue pair.
struct srq_peer {
  cv::connection conn;
  std::string peer;         ///< the client's address, for the report
  std::size_t sending = 0;  ///< sends in flight on it (the greeting, echoes); it is closed only with none
  std::size_t messages = 0, bytes = 0;
  cv::error_code end;       ///< the first failed receive or send
  bool closing = false;     ///< its disconnect is in flight; messages to it are no longer echoed
  cv::error_code why;       ///< connection::error() when its closing began (connection_reset: the client left)
  clock::time_point heard;  ///< when it was admitted or its last message arrived
  clock::time_point closing_since;
  std::chrono::milliseconds closing_limit{};  ///< how long its disconnect may wait (example::disconnect_limit)
};

/// What the connections of an SRQ server share besides the protection domain and the completion queue.
/// Declared so that the connections go first, then the SRQ (which aborts the receives still posted: their
/// handlers are posted, and release the loop's work once they have run), then the blocks those receives used.
struct shared_receives {
  std::vector<cv::registered_buffer> blocks;      ///< [j]: the buffer of the SRQ's receive j
  cv::shared_receive_queue srq;
  example::completions<cv::srq_received> events;  ///< everything `serve_srq` waits for, by tag (see there)
  std::map<std::uint32_t, srq_peer> peers;        ///< the connections served now, by queue pair number

  shared_receives(cv::protection_domain& pd, cv::completion_queue& cq, std::uint32_t depth)
      : srq(pd, cq, {.max_wr = depth, .max_sge = 1, .limit = 0}), events(cq.get_executor()) {}
};

/// The server's shared resources: every connection's queue pair lives in one protection domain and on one
/// completion queue, so the pool's blocks serve all of them; with an SRQ, its receives do too.
struct echo_server {
  cv::listener& listener;
  cv::protection_domain pd;
  cv::completion_queue cq;
  cv::buffer_pool pool;
  cv::connection_options options;
  std::optional<shared_receives> shared;  ///< --srq; reset by `serve_srq` when it ends
  example::device_watch& watch;           ///< the listener's device: a port going down fails its connections
  server_counters counters;
  const server_config config;
  const std::size_t limit;                ///< connections to serve; 0: forever

  /// Completion-queue depth (entries): without an SRQ, 8192 (max_send_wr + max_recv_wr = 64 per connection:
  /// 128 connections, more than the 32 served); with one, its receives once plus each connection's sends.
  static int cq_depth(const server_config& c) {
    return c.srq_depth ? static_cast<int>(c.srq_depth + c.srq_at_once * srq_send_wr) : 8192;
  }
  /// The pool: without an SRQ, up to 64 arenas of 32 blocks (16 blocks per connection), one registered up
  /// front. With one, exactly the arenas the SRQ's receives fill, all registered up front: the pool refuses
  /// an allocation (errc::pool_exhausted) while its last arena is still being registered in the background.
  static cv::pool_options pool_sizes(const server_config& c) {
    if (!c.srq_depth) return pool_options(64);
    const std::size_t arenas = (c.srq_depth + blocks_per_arena - 1) / blocks_per_arena;
    return pool_options(arenas, arenas);
  }

  echo_server(cv::listener& l, cv::registration_service& service, asio::io_context& io, const server_config& c,
              example::device_watch& w)
      : listener(l), pd(l.get_device()), cq(io, l.get_device(), {.depth = cq_depth(c)}),
        pool(service, pd, pool_sizes(c)), watch(w), config(c), limit(c.connections) {
    watch.watch(l.get_device());
    options.qp = qp_options();
    options.pd = &pd;
    options.cq = &cq;
    if (c.srq_depth) {
      shared.emplace(pd, cq, c.srq_depth);
      options.qp.srq = &shared->srq;  // the queue pair's receives come from the SRQ, max_recv_wr is ignored
      options.qp.max_send_wr = srq_send_wr;
    }
  }
};

/// Counts a connection that ended after `messages` echoes of `bytes`: `why` is its connection::error() when
/// it ended (connection_reset: the client disconnected, the normal end; empty while rdma_cm still calls it
/// connected), `end` what ended the serving (named by `example::cause`). Only codes that are set are
/// printed: an empty one says "Success", which explains nothing.
void record_end(server_counters& n, const std::string& peer, std::size_t messages, std::size_t bytes,
                const cv::error_code& why, const cv::error_code& end) {
  n.messages += messages;
  n.bytes += bytes;
  ++n.ended;
  if (why != cv::errc::connection_reset) {
    ++n.unexpected_ends;
    const cv::error_code first = end ? end : why;
    std::string text = first ? first.message() : std::string("an unknown cause");
    if (end && why && why != end) text += " (the connection: " + why.message() + ")";
    std::fprintf(stderr, "echo server: connection from %s ended by %s\n", peer.c_str(), text.c_str());
  }
  std::printf("  server: %s done, %zu messages, %zu bytes echoed\n", peer.c_str(), messages, bytes);
}

/// One connection with receives of its own: receive into a block, send it back from there, post the receive
/// again.
awaitable<void> serve(echo_server& s, cv::connection conn) {
  const std::string peer = conn.remote_endpoint();
  std::vector<cv::registered_buffer> blocks;
  for (std::size_t i = 0; i < server_depth; ++i) {
    cv::registered_buffer b = co_await s.pool.async_allocate(max_message);
    blocks.push_back(std::move(b));
  }
  example::completions<cv::received> arrivals(conn.get_executor());
  for (std::size_t i = 0; i < server_depth; ++i)
    conn.qp().async_recv(blocks[i].span(), arrivals.handler(i));

  std::size_t messages = 0, bytes = 0;
  cv::error_code end;  // the greeting first: the receives are posted, the client may send
  std::tie(end, std::ignore) = co_await conn.qp().async_send_with_imm(nothing_of(blocks[0]), greeting, tuple);
  while (!end) {
    // A client that says nothing for peer_timeout is given up (the disconnect below flushes the receives).
    const example::completion<cv::received> c = co_await arrivals.next(clock::now() + example::peer_timeout);
    if (c.ec == std::errc::timed_out) {
      std::fprintf(stderr, "echo server: %s sent nothing for %s: giving it up\n", peer.c_str(),
                   example::seconds_text(example::peer_timeout).c_str());
      end = c.ec;
      break;
    }
    if (c.ec) {
      end = c.ec;
      break;
    }
    auto [ec, n] = co_await conn.qp().async_send(blocks[c.tag].span().subspan(0, c.value.bytes), tuple);
    if (ec) {
      end = ec;
      break;
    }
    ++messages;
    bytes += n;
    conn.qp().async_recv(blocks[c.tag].span(), arrivals.handler(c.tag));
  }
  // The normal end: the client disconnected, which flushed our receives (connection_reset).
  const cv::error_code why = conn.error();
  end = example::cause(end, conn);            // e.g. errc::port_error rather than the flush it caused
  co_await example::disconnect_within(conn);  // at once when the peer closed first; bounded when it is gone
  co_await arrivals.drain();                  // the blocks stay ours until every receive is retired
  record_end(s.counters, peer, messages, bytes, why, end);
}

// --- server with one shared receive queue (--srq) ---

/// Tags of `shared_receives::events` for an SRQ of `depth` receives: [0, depth) a message arrived in block
/// tag (or its receive failed); [depth, 2 depth) the echo sent from block tag - depth completed; then a
/// greeting sent, a connection admitted (by `accept_connections`), a disconnect completed, and the ticker.
struct srq_tags {
  std::size_t depth;
  std::size_t sent(std::size_t block) const { return depth + block; }
  std::size_t greeted() const { return 2 * depth; }
  std::size_t admitted() const { return 2 * depth + 1; }
  std::size_t closed() const { return 2 * depth + 2; }
  std::size_t tick() const { return 2 * depth + 3; }
};

/// A completion handler that reports to `events` as `tag`, about the connection of queue pair `qp_num`: for a
/// send, `void(error_code, std::size_t bytes)`; for a disconnect or a timer, `void(error_code)`.
auto report_to(example::completions<cv::srq_received>& events, std::size_t tag, std::uint32_t qp_num = 0) {
  return [h = events.handler(tag), qp_num](cv::error_code ec, auto... bytes) mutable {
    cv::srq_received r;
    r.bytes = (std::size_t{0} + ... + bytes);
    r.qp_num = qp_num;
    h(ec, r);
  };
}

/// Hands an accepted connection to `serve_srq`: it is known by its queue pair's number from now on, before
/// the greeting lets its client send.
void admit(shared_receives& sh, cv::connection conn) {
  const std::uint32_t qp_num = conn.qp().qp_num();
  srq_peer p;
  p.peer = conn.remote_endpoint();
  p.conn = std::move(conn);
  p.heard = clock::now();
  sh.peers.insert_or_assign(qp_num, std::move(p));
  cv::srq_received r;
  r.qp_num = qp_num;
  sh.events.handler(srq_tags{sh.srq.max_wr()}.admitted())(cv::error_code{}, r);
}

/// Every connection of an SRQ server, in one coroutine: it takes each event of `shared_receives::events` in
/// turn — a message (echoed on the connection it came to, `srq_received::qp_num`, from the block it landed
/// in), an echo sent (its block posted to the SRQ again), a connection admitted (greeted), a tick (ended
/// connections closed), a disconnect completed (the connection destroyed) — and ends once `s.limit`
/// connections have ended (never when 0). Nothing in it waits for one connection: a client that stops
/// acknowledging holds up only its own sends.
///
/// Replenishing: one for one. A block goes back to the SRQ as soon as the send of its echo completes, so the
/// receives posted fall below `--srq-depth` only by the messages being echoed at that moment (the report gives
/// the fewest seen). The low watermark (`set_limit` and `async_wait_limit`, read through a `device_events`
/// object) suits a server that hands its buffers on and refills the SRQ in batches; this one needs none.
///
/// Ends of connections: an SRQ-attached queue pair has no receives of its own for the client's disconnect to
/// flush, so nothing completes when a connection ends. The ticker looks at every connection's
/// connection::error() every 100 ms and closes those that ended (or failed) and have no send in flight.
awaitable<void> serve_srq(echo_server& s) {
  shared_receives& sh = *s.shared;
  cv::shared_receive_queue& srq = sh.srq;
  for (std::uint32_t j = 0; j < srq.max_wr(); ++j) {
    cv::registered_buffer b = co_await s.pool.async_allocate(max_message);
    sh.blocks.push_back(std::move(b));
  }
  const srq_tags tag{srq.max_wr()};
  auto post = [&](std::size_t j) { srq.async_recv(sh.blocks[j].span(), sh.events.handler(j)); };
  for (std::size_t j = 0; j < sh.blocks.size(); ++j)
    post(j);
  asio::steady_timer ticker(srq.get_executor());
  auto arm = [&] {
    ticker.expires_after(std::chrono::milliseconds(100));
    ticker.async_wait(report_to(sh.events, tag.tick()));
  };
  arm();

  for (;;) {
    const example::completion<cv::srq_received> c = co_await sh.events.next();
    // The connection the event is about; none for the ticker, or for a message to a connection already
    // retired (a client that left without waiting for its echoes).
    const auto found = c.tag == tag.tick() ? sh.peers.end() : sh.peers.find(c.value.qp_num);
    srq_peer* p = found == sh.peers.end() ? nullptr : &found->second;
    if (p && c.ec && !p->end && c.tag != tag.closed()) p->end = c.ec;
    if (c.tag < tag.depth) {  // a message, or a receive its failing queue pair had taken (wr_flush_err)
      s.counters.fewest_posted = std::min(s.counters.fewest_posted, srq.posted());
      if (c.ec || !p || p->closing) {
        if (!c.ec) ++s.counters.orphans;
        post(c.tag);
        continue;
      }
      p->heard = clock::now();
      ++p->sending;  // beyond srq_send_wr in flight, sends wait for a credit
      p->conn.qp().async_send(sh.blocks[c.tag].span().subspan(0, c.value.bytes),
                              report_to(sh.events, tag.sent(c.tag), c.value.qp_num));
    } else if (c.tag < tag.greeted()) {  // an echo was sent: its block goes back to the SRQ
      if (p) {
        --p->sending;
        p->messages += c.ec ? 0 : 1;
        p->bytes += c.ec ? 0 : c.value.bytes;
      }
      post(c.tag - tag.depth);
    } else if (c.tag == tag.greeted()) {
      if (p) --p->sending;
    } else if (c.tag == tag.admitted()) {
      if (!p || p->closing) continue;  // its client left at once
      ++p->sending;
      p->conn.qp().async_send_with_imm(nothing_of(sh.blocks[0]), greeting,
                                       report_to(sh.events, tag.greeted(), c.value.qp_num));
    } else if (c.tag == tag.closed()) {  // the connection is down: it goes, its queue pair with it
      if (!p) continue;
      srq_peer gone = std::move(sh.peers.extract(found).mapped());
      record_end(s.counters, gone.peer, gone.messages, gone.bytes, gone.why, gone.end);
    } else {  // the ticker: close the connections that ended, failed or fell silent
      const auto now = clock::now();
      for (auto it = sh.peers.begin(); it != sh.peers.end();) {
        srq_peer& peer = it->second;
        const std::uint32_t qp_num = it->first;
        if (peer.closing && now - peer.closing_since > peer.closing_limit) {
          // Its disconnect got no answer (the client or the port is gone): destroying the connection ends it.
          srq_peer gone = std::move(sh.peers.extract(it++).mapped());
          record_end(s.counters, gone.peer, gone.messages, gone.bytes, gone.why, gone.end);
          continue;
        }
        ++it;
        if (peer.closing) continue;
        // An SRQ-attached queue pair has no receives of its own to flush: its own error (e.g. errc::port_error
        // from a device event) says it failed.
        if (!peer.end && peer.conn.qp().error()) peer.end = peer.conn.qp().error();
        if (!peer.end && now - peer.heard > example::peer_timeout) {
          std::fprintf(stderr, "echo server: %s sent nothing for %s: giving it up\n", peer.peer.c_str(),
                       example::seconds_text(example::peer_timeout).c_str());
          peer.end = std::make_error_code(std::errc::timed_out);
        }
        if (peer.sending > 0 || (!peer.end && peer.conn.connected())) continue;
        peer.closing = true;
        peer.closing_since = now;
        peer.why = peer.conn.error();
        peer.end = example::cause(peer.end, peer.conn);
        peer.closing_limit = example::disconnect_limit(peer.conn, peer.end);
        // Completes at once (posted) when the client closed first, else once the client answers; a client
        // that does not within closing_limit (peer_timeout; 1 s after its port went down) is dropped above.
        // The other connections are served meanwhile.
        peer.conn.async_disconnect(report_to(sh.events, tag.closed(), qp_num));
      }
      if (s.limit != 0 && s.counters.ended == s.limit) break;
      arm();
    }
  }
  // Every connection is gone. The receives still posted hold the loop's work: destroying the SRQ aborts them.
  // (The completion queue still waits on its channel afterwards, so the loop keeps work: `run` runs until the
  // tasks end.)
  s.shared.reset();
}

// --- accepting ---

/// Accepts `s.limit` connections (0: forever), each served by its own coroutine, or with an SRQ handed to
/// `serve_srq`. Only the listener's end stops it: what peers do never does (the listener skips requesters
/// that give up or never finish the handshake, and a failure of this side, e.g. out of queue pairs or of
/// completion-queue entries, is retried after a pause).
awaitable<void> accept_connections(echo_server& s, example::task_group& tasks) {
  asio::steady_timer pause(s.listener.get_executor());
  while (s.limit == 0 || s.counters.accepted < s.limit) {
    auto [ec, conn] = co_await s.listener.async_accept(s.options, tuple);
    if (ec) {
      ++s.counters.failed_accepts;
      std::fprintf(stderr, "echo server: accept failed: %s\n", ec.message().c_str());
      if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;  // listener closed
      pause.expires_after(std::chrono::milliseconds(100));
      co_await pause.async_wait(tuple);
      continue;
    }
    ++s.counters.accepted;
    if (s.config.srq_depth)
      admit(*s.shared, std::move(conn));
    else
      tasks.spawn(s.listener.get_executor(), serve(s, std::move(conn)), "echo server");
  }
}

// --- client ---

struct client_result {
  cv::error_code error;
  std::string step;  ///< what the client was doing when `error` happened
  std::size_t sent = 0, verified = 0, bytes_verified = 0, mismatched = 0;
  statistics::timings connect, round_trip;
};

/// Checks one echo: it belongs to message `k`, came back whole and byte for byte.
void check_echo(const example::completion<cv::received>& c, const std::vector<cv::registered_buffer>& blocks,
                unsigned client, std::size_t k, clock::time_point sent_at, client_result& r) {
  if (c.ec) {
    if (!r.error) {
      r.error = c.ec;
      r.step = "waiting for the echo of message " + std::to_string(k) +
               (c.ec == std::errc::timed_out ? " (none within " + example::seconds_text(example::peer_timeout) + ")"
                                             : std::string());
    }
    return;
  }
  r.round_trip.add(clock::now() - sent_at);
  const std::size_t size = message_size(client, k);
  const std::byte* got = blocks[c.tag].data();
  bool same = c.tag == k % client_window && c.value.bytes == size;
  for (std::size_t j = 0; same && j < size; ++j)
    same = got[j] == message_byte(client, k, j);
  if (!same) {
    ++r.mismatched;
    return;
  }
  ++r.verified;
  r.bytes_verified += size;
}

/// Connects, sends `messages` messages with `client_window` in flight, verifies every echo, disconnects.
awaitable<void> run_client(asio::any_io_executor ex, example::command_line where, unsigned client, std::size_t messages,
                           cv::registration_service& service, example::device_watch& watch, client_result& r) {
  cv::connect_options options;
  options.qp = qp_options();
  const auto start = clock::now();
  auto [ec, conn] = co_await example::connect_patiently(ex, where, options);
  if (ec) {
    r.error = ec;
    r.step = "connecting to " + where.address + ":" + std::to_string(where.port);
    co_return;
  }
  r.connect.add(clock::now() - start);
  watch.watch(conn.get_device());  // a port going down fails this connection at once, as errc::port_error
  cv::buffer_pool pool(service, conn.pd(), pool_options(1));
  std::vector<cv::registered_buffer> blocks;  // [0, client_window): echoes land here; the last one: outgoing
  for (std::size_t i = 0; i <= client_window; ++i) {
    cv::registered_buffer b = co_await pool.async_allocate(max_message);
    blocks.push_back(std::move(b));
  }
  const cv::registered_buffer& outgoing = blocks.back();
  example::completions<cv::received> echoes(ex);
  std::vector<clock::time_point> sent_at(client_window);
  std::size_t next_echo = 0;  // the message whose echo comes next

  // The server's greeting (empty, immediate data `greeting`) says it is ready for this connection's messages.
  conn.qp().async_recv(blocks[0].span(), echoes.handler(0));
  const example::completion<cv::received> hello = co_await echoes.next(clock::now() + example::peer_timeout);
  if (hello.ec) {
    r.error = hello.ec;
    r.step = "waiting for the server's greeting" +
             (hello.ec == std::errc::timed_out
                  ? " (none within " + example::seconds_text(example::peer_timeout) + ": is it an echo server?)"
                  : std::string());
  } else if (hello.value.bytes != 0 || hello.value.imm != greeting) {
    r.error = std::make_error_code(std::errc::protocol_error);
    r.step = "checking the server's greeting (not an echo server of this program)";
  }

  for (std::size_t k = 0; k < messages && !r.error; ++k) {
    const std::size_t slot = k % client_window;
    if (k >= client_window) {  // the slot's previous echo first
      const example::completion<cv::received> c = co_await echoes.next(clock::now() + example::peer_timeout);
      check_echo(c, blocks, client, next_echo, sent_at[next_echo % client_window], r);
      ++next_echo;
    }
    conn.qp().async_recv(blocks[slot].span(), echoes.handler(slot));  // before the send: no RNR wait
    const std::size_t size = message_size(client, k);
    for (std::size_t j = 0; j < size; ++j)
      outgoing.data()[j] = message_byte(client, k, j);
    sent_at[slot] = clock::now();
    auto [sec, n] = co_await conn.qp().async_send(outgoing.span().subspan(0, size), tuple);
    if (sec) {
      r.error = sec;
      r.step = "sending message " + std::to_string(k);
    } else {
      ++r.sent;
    }
  }
  while (!r.error && echoes.pending() > 0) {
    const example::completion<cv::received> c = co_await echoes.next(clock::now() + example::peer_timeout);
    check_echo(c, blocks, client, next_echo, sent_at[next_echo % client_window], r);
    ++next_echo;
  }
  r.error = example::cause(r.error, conn);  // e.g. errc::port_error rather than the flush it caused
  const cv::error_code dec = co_await example::disconnect_within(conn);
  if (dec && !r.error) {
    r.error = dec;
    r.step = "disconnecting";
  }
  co_await echoes.drain();  // after an error: the receives still posted, flushed by the disconnect
}

// --- report ---

void print_clients(const std::vector<client_result>& results, std::size_t messages) {
  client_result all;
  for (const client_result& r : results) {
    all.sent += r.sent;
    all.verified += r.verified;
    all.bytes_verified += r.bytes_verified;
    all.mismatched += r.mismatched;
    all.connect.merge(r.connect);
    all.round_trip.merge(r.round_trip);
  }
  std::printf("  connect          : %s\n", all.connect.summary().c_str());
  std::printf("  echo round trip  : %s (8 in flight per connection)\n", all.round_trip.summary().c_str());
  std::printf("  verified         : %zu/%zu messages, %zu bytes, %zu mismatched\n", all.verified,
              messages * results.size(), all.bytes_verified, all.mismatched);
  for (std::size_t i = 0; i < results.size(); ++i)
    if (results[i].error)
      std::printf("  client %zu error   : %s: %s\n", i, results[i].step.c_str(), results[i].error.message().c_str());
}

bool clients_ok(const std::vector<client_result>& results, std::size_t messages) {
  for (const client_result& r : results)
    if (r.error || r.verified != messages || r.mismatched) return false;
  return true;
}

void print_server(const echo_server& s) {
  const cv::pool_stats p = s.pool.stats();
  std::printf("  server           : %zu connection%s accepted, %zu ended (%zu unexpectedly), %zu messages and %zu "
              "bytes echoed\n",
              s.counters.accepted, s.counters.accepted == 1 ? "" : "s", s.counters.ended, s.counters.unexpected_ends,
              s.counters.messages, s.counters.bytes);
  std::printf("  buffer pool      : %zu arenas, %zu bytes registered, %llu blocks handed out\n", p.arenas,
              p.bytes_registered, static_cast<unsigned long long>(p.allocations));
  if (const std::uint32_t depth = s.config.srq_depth) {
    const std::size_t fewest = std::min<std::size_t>(depth, s.counters.fewest_posted);
    std::printf("  shared receives  : one SRQ of %u receives for every connection, completion queue depth %d; at "
                "least %zu posted when a message arrived; %zu messages to connections already ended\n",
                depth, s.cq.depth(), fewest, s.counters.orphans);
  }
  const cv::listener_stats l = s.listener.stats();
  std::printf("  listener         : %llu requests abandoned by their requester, %llu half-open handshakes timed out\n",
              static_cast<unsigned long long>(l.abandoned), static_cast<unsigned long long>(l.timed_out));
}

// --- roles ---

/// Why the server cannot be sized as asked (a message naming the option, the value and the fix), or nothing;
/// `c` is then filled in. `srq_depth` 0: not given.
std::optional<std::string> size_server(const example::command_line& cmd, bool srq, std::uint64_t srq_depth,
                                       std::uint64_t clients, std::uint64_t connections, server_config& c) {
  const std::string k = std::to_string(clients);
  if (!srq && srq_depth != 0)
    return "--srq-depth sizes the shared receive queue of --srq: add --srq, or leave --srq-depth out";
  if (!srq && cmd.self_test() && clients > max_clients)
    return "--clients " + k + " needs --srq: without a shared receive queue every server connection keeps " +
           std::to_string(server_depth) + " receives of 64 KiB of its own and the server serves " +
           std::to_string(max_clients) + " at most; add --srq (up to " + std::to_string(max_clients_srq) +
           " clients) or give --clients " + std::to_string(max_clients) + " or fewer";
  c.connections = cmd.self_test() ? clients : connections;
  if (!srq) return std::nullopt;
  const std::uint64_t in_flight = clients * client_window;  // what the self-test's clients keep in flight
  if (srq_depth == 0) srq_depth = cmd.self_test() ? in_flight : listen_srq_depth;
  if (cmd.self_test() && srq_depth < in_flight) {
    const std::uint64_t fit = srq_depth / client_window;
    return "--srq-depth " + std::to_string(srq_depth) + " holds fewer receives than the " + k + " clients keep in " +
           "flight (" + std::to_string(client_window) + " each: " + std::to_string(in_flight) + "); give --srq-depth " +
           std::to_string(in_flight) + " or more" +
           (fit > 0 ? ", or --clients " + std::to_string(fit) + " or fewer" : std::string());
  }
  c.srq_depth = static_cast<std::uint32_t>(srq_depth);
  c.srq_at_once = static_cast<std::uint32_t>(cmd.self_test() ? clients : max_clients_srq);
  return std::nullopt;
}

/// Every role: the server (--listen, --self-test) and the clients (--connect: one; --self-test: `clients`),
/// on one io_context.
int run(const example::command_line& cmd, unsigned clients, std::size_t messages, const server_config& sizes) {
  asio::io_context io;
  cv::registration_service service(io.get_executor());
  example::task_group tasks;
  example::device_watch watch(io.get_executor(), "echo");  // the devices' events: a port going down
  std::optional<cv::listener> listener = cmd.listen(io.get_executor());
  std::optional<echo_server> server;
  example::command_line where = cmd;
  if (cmd.serving()) {
    server.emplace(*listener, service, io, sizes, watch);
    where.port = listener->local_port();
  }
  std::vector<client_result> results(cmd.self_test() ? clients : cmd.connecting() ? 1 : 0);
  const char* what = cmd.self_test() ? "echo self-test" : cmd.serving() ? "echo server" : "echo client";
  if (cmd.serving())
    std::printf("%s on %s:%u (device %s)%s\n", what, where.address.c_str(), where.port,
                listener->get_device().name().c_str(),
                sizes.srq_depth ? (", one shared receive queue of " + std::to_string(sizes.srq_depth) + " receives")
                                     .c_str()
                               : "");
  if (cmd.connecting())
    std::printf("%s to %s:%u: %zu client(s) x %zu messages of 1 .. %zu bytes\n", what, where.address.c_str(),
                where.port, results.size(), messages, max_message);
  std::fflush(stdout);

  if (cmd.serving()) tasks.spawn(io, accept_connections(*server, tasks), what);
  if (cmd.serving() && sizes.srq_depth) tasks.spawn(io, serve_srq(*server), what);
  for (std::size_t c = 0; c < results.size(); ++c)
    tasks.spawn(
        io, run_client(io.get_executor(), where, static_cast<unsigned>(c), messages, service, watch, results[c]), what);
  // A self-test's watchdog: 40 s, or 25 ms per message when there are more than 1600 (measured in the guest:
  // about 1.7 ms each).
  const std::chrono::seconds limit(std::max<std::size_t>(40, results.size() * messages / 40));
  // Until the tasks end (an SRQ server that ends leaves its completion queue waiting on its channel, see
  // serve_srq), or SIGINT / SIGTERM: the report is printed whole either way.
  const example::run_result outcome = example::run_tasks(io, tasks, cmd, limit);
  watch.close();

  bool ok = tasks.failed == 0 && clients_ok(results, messages);
  if (cmd.connecting()) print_clients(results, messages);
  if (cmd.serving()) {
    print_server(*server);
    const server_counters& n = server->counters;
    ok = ok && n.unexpected_ends == 0 && n.failed_accepts == 0;
    if (cmd.self_test()) ok = ok && n.ended == clients && n.messages == clients * messages && n.orphans == 0;
  }
  return example::verdict(what, ok, outcome);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t clients = 4, messages = 400, connections = 0, srq_depth = 0, metrics_port = 0;
  bool srq = false;
  constexpr unsigned serving = example::in_self_test | example::in_listen;
  return example::run_main(argc, argv, "echo", usage_text,
                           {{"--clients", &clients, 1, max_clients_srq, example::in_self_test},
                            {"--messages", &messages, 1, 1000000, example::in_self_test | example::in_connect},
                            {"--connections", &connections, 0, 1000000, example::in_listen},
                            {"--srq-depth", &srq_depth, 1, max_srq_depth, serving},
                            {"--metrics-port", &metrics_port, 1, 65535, example::in_any_role}},
                           {{"--srq", &srq, serving}}, [&](const example::command_line& cmd) {
                             server_config sizes;
                             if (const auto why = size_server(cmd, srq, srq_depth, clients, connections, sizes))
                               return ::command_line::bad(argc > 0 ? argv[0] : "echo", *why);
                             const example::metrics_port metrics(metrics_port, "echo");
                             return run(cmd, static_cast<unsigned>(clients), messages, sizes);
                           });
}
