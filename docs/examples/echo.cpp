// echo: an rdma_cm echo server and its client in one program.
//
// The server accepts connections (coverbs::listener::async_accept) and runs one coroutine per connection: it
// keeps receives posted in blocks of a registered buffer pool and sends every message back from the block it
// landed in. The client sends messages of many sizes (1 byte .. 64 KiB, inline and not), keeps several in
// flight, and verifies every byte of every echo. `--self-test` runs the server and several clients in one
// process, on one io_context.
#include <coverbs/coverbs.hpp>

#include "example_support.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdio>
#include <optional>
#include <string>
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
    "  echo --self-test [--clients K] [--messages N] [--address ADDR]\n"
    "      the server and K clients (default 4) in one process and one io_context, on ADDR (default\n"
    "      10.77.0.1, the Soft-RoCE guest's rxe0); exit status 0 only if every echoed byte was verified.\n"
    "  echo --listen ADDR PORT [--connections N]\n"
    "      serve clients on ADDR:PORT (a numeric address of an RDMA device); exit once N connections\n"
    "      have ended (default 0: serve until killed).\n"
    "  echo --connect ADDR PORT [--messages N]\n"
    "      send N messages (default 400) of 1 .. 65536 bytes, 8 in flight, and verify every echoed byte\n"
    "      (a refused connection is tried again for 10 s, so client and server may start together).\n"
    "\n"
    "Limits: --clients 1..32, --messages 1..1000000, --connections 0..1000000.\n"
    "Run it where verbs work; without an RDMA device, in the Soft-RoCE guest, from the project folder:\n"
    "  tools/rxe-vm -- build/docs/echo --self-test\n"
    "  tools/rxe-vm -- sh -c 'build/docs/echo --listen 10.77.0.1 7471 --connections 1 & s=$!;\n"
    "                         build/docs/echo --connect 10.77.0.1 7471 && wait $s'\n";

constexpr std::size_t max_message = 65536;               // bytes; the pool's block size
constexpr std::size_t client_window = 8;                 // messages a client keeps in flight
constexpr std::size_t server_depth = 2 * client_window;  // receives a server connection keeps posted
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

/// Blocks of 64 KiB in 2 MiB arenas (32 blocks each), one registered up front.
cv::pool_options pool_options(std::size_t max_arenas) {
  cv::pool_options o;
  o.size_classes = {max_message};
  o.arena_size = std::size_t{2} << 20;
  o.max_arenas = max_arenas;
  o.rights = cv::access::local_write;
  return o;
}

// --- server ---

struct server_counters {
  std::size_t accepted = 0, ended = 0, failed_accepts = 0, unexpected_ends = 0;
  std::size_t messages = 0, bytes = 0;
};

/// The server's shared resources: every connection's queue pair lives in one protection domain and on one
/// completion queue, so the pool's blocks serve all of them.
struct echo_server {
  cv::listener& listener;
  cv::protection_domain pd;
  cv::completion_queue cq;
  cv::buffer_pool pool;
  cv::connection_options options;
  server_counters counters;

  echo_server(cv::listener& l, cv::registration_service& service, asio::io_context& io)
      : listener(l), pd(l.get_device()), cq(io, l.get_device(), {.depth = 8192}), pool(service, pd, pool_options(64)) {
    options.qp = qp_options();
    options.pd = &pd;
    options.cq = &cq;
  }
};

/// One connection: receive into a block, send it back from there, post the receive again.
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
  cv::error_code end;
  for (;;) {
    const example::completion<cv::received> c = co_await arrivals.next();
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
  co_await conn.async_disconnect(tuple);  // completes at once when the peer closed first
  co_await arrivals.drain();              // the blocks stay ours until every receive is retired
  s.counters.messages += messages;
  s.counters.bytes += bytes;
  ++s.counters.ended;
  if (why != cv::errc::connection_reset) {
    ++s.counters.unexpected_ends;
    std::fprintf(stderr, "echo server: connection from %s ended by %s (%s)\n", peer.c_str(), end.message().c_str(),
                 why.message().c_str());
  }
  std::printf("  server: %s done, %zu messages, %zu bytes echoed\n", peer.c_str(), messages, bytes);
}

/// Accepts `limit` connections (0: forever), each served by its own coroutine. Only the listener's end stops
/// it: what peers do never does (the listener skips requesters that give up or never finish the handshake,
/// and a failure of this side, e.g. out of queue pairs, is retried after a pause).
awaitable<void> accept_connections(echo_server& s, std::size_t limit, example::task_group& tasks) {
  asio::steady_timer pause(s.listener.get_executor());
  while (limit == 0 || s.counters.accepted < limit) {
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
    tasks.spawn(s.listener.get_executor(), serve(s, std::move(conn)), "echo server");
  }
}

// --- client ---

struct client_result {
  cv::error_code error;
  std::size_t sent = 0, verified = 0, bytes_verified = 0, mismatched = 0;
  example::timings connect, round_trip;
};

/// Checks one echo: it belongs to message `k`, came back whole and byte for byte.
void check_echo(const example::completion<cv::received>& c, const std::vector<cv::registered_buffer>& blocks,
                unsigned client, std::size_t k, clock::time_point sent_at, client_result& r) {
  if (c.ec) {
    if (!r.error) r.error = c.ec;
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
                           cv::registration_service& service, client_result& r) {
  cv::connect_options options;
  options.qp = qp_options();
  const auto start = clock::now();
  auto [ec, conn] = co_await example::connect_patiently(ex, where, options);
  if (ec) {
    r.error = ec;
    co_return;
  }
  r.connect.add(clock::now() - start);
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

  for (std::size_t k = 0; k < messages && !r.error; ++k) {
    const std::size_t slot = k % client_window;
    if (k >= client_window) {  // the slot's previous echo first
      const example::completion<cv::received> c = co_await echoes.next();
      check_echo(c, blocks, client, next_echo, sent_at[next_echo % client_window], r);
      ++next_echo;
    }
    conn.qp().async_recv(blocks[slot].span(), echoes.handler(slot));  // before the send: no RNR wait
    const std::size_t size = message_size(client, k);
    for (std::size_t j = 0; j < size; ++j)
      outgoing.data()[j] = message_byte(client, k, j);
    sent_at[slot] = clock::now();
    auto [sec, n] = co_await conn.qp().async_send(outgoing.span().subspan(0, size), tuple);
    if (sec)
      r.error = sec;
    else
      ++r.sent;
  }
  while (!r.error && echoes.pending() > 0) {
    const example::completion<cv::received> c = co_await echoes.next();
    check_echo(c, blocks, client, next_echo, sent_at[next_echo % client_window], r);
    ++next_echo;
  }
  auto [dec] = co_await conn.async_disconnect(tuple);
  if (dec && !r.error) r.error = dec;
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
    if (results[i].error) std::printf("  client %zu error   : %s\n", i, results[i].error.message().c_str());
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
  const cv::listener_stats l = s.listener.stats();
  std::printf("  listener         : %llu requests abandoned by their requester, %llu half-open handshakes timed out\n",
              static_cast<unsigned long long>(l.abandoned), static_cast<unsigned long long>(l.timed_out));
}

// --- roles ---

/// Every role: the server (--listen, --self-test) and the clients (--connect: one; --self-test: `clients`),
/// on one io_context.
int run(const example::command_line& cmd, unsigned clients, std::size_t messages, std::size_t connections) {
  asio::io_context io;
  cv::registration_service service(io.get_executor());
  example::task_group tasks;
  std::optional<cv::listener> listener = cmd.listen(io.get_executor());
  std::optional<echo_server> server;
  example::command_line where = cmd;
  if (cmd.serving()) {
    server.emplace(*listener, service, io);
    where.port = listener->local_port();
  }
  std::vector<client_result> results(cmd.self_test() ? clients : cmd.connecting() ? 1 : 0);
  const char* what = cmd.self_test() ? "echo self-test" : cmd.serving() ? "echo server" : "echo client";
  if (cmd.serving())
    std::printf("%s on %s:%u (device %s)\n", what, where.address.c_str(), where.port,
                listener->get_device().name().c_str());
  if (cmd.connecting())
    std::printf("%s to %s:%u: %zu client(s) x %zu messages of 1 .. %zu bytes\n", what, where.address.c_str(),
                where.port, results.size(), messages, max_message);
  std::fflush(stdout);

  if (cmd.serving()) tasks.spawn(io, accept_connections(*server, cmd.self_test() ? clients : connections, tasks), what);
  for (std::size_t c = 0; c < results.size(); ++c)
    tasks.spawn(io, run_client(io.get_executor(), where, static_cast<unsigned>(c), messages, service, results[c]),
                what);
  const example::run_result outcome = example::run_tasks(io, tasks, cmd);

  bool ok = tasks.failed == 0 && clients_ok(results, messages);
  if (cmd.connecting()) print_clients(results, messages);
  if (cmd.serving()) {
    print_server(*server);
    const server_counters& n = server->counters;
    ok = ok && n.unexpected_ends == 0 && n.failed_accepts == 0;
    if (cmd.self_test()) ok = ok && n.ended == clients && n.messages == clients * messages;
  }
  return example::verdict(what, ok, outcome);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t clients = 4, messages = 400, connections = 0;
  return example::run_main(argc, argv, "echo", usage_text,
                           {{"--clients", &clients, 1, 32, example::in_self_test},
                            {"--messages", &messages, 1, 1000000, example::in_self_test | example::in_connect},
                            {"--connections", &connections, 0, 1000000, example::in_listen}},
                           [&](const example::command_line& cmd) {
                             return run(cmd, static_cast<unsigned>(clients), messages, connections);
                           });
}
