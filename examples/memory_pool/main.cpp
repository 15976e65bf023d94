// memory_pool_server: the storage scenario — one large memory region over a memory pool, a type-2 memory
// window per client and right, compaction that revokes every key, and clients that recover from it.
//
//   memory_pool_server --listen ADDR PORT [--pool-size BYTES] [--slot-size BYTES] [--tenants-per-connection N]
//                      [--hold-seconds S] [--json]
//   memory_pool_server --connect ADDR PORT [--clients N] [--ops N] [--size BYTES] [--after-compaction] [--json]
//   memory_pool_server --connect ADDR PORT --admin compact [--waiting N] | --admin status | --admin shutdown
//   memory_pool_server --connect ADDR PORT --grab N
//
// Server: registers the pool (one memory region with local_write | remote_read | remote_write | mw_bind)
// and listens through rdma_cm. The pool is two halves of slots; each client ("tenant", named by a 64-bit
// id it picks) owns one slot of the current half. A tenant's keys are two leases from a window_pool,
// bound through that client's own connection (a type-2 key works only through the queue pair that bound
// it): a remote_write window it writes through and a remote_read window it reads back through.
// Compaction revokes every window (each key is dead when its revocation completes), copies the live
// slots, packed, into the other half, flips halves and binds fresh windows for every healthy connection.
//
// A tenant belongs to the connection that asked for it; one connection may hold at most
// --tenants-per-connection of them (default 1; past it get_keys is refused with `tenant_limit`). When a
// connection ends — bye-less disconnect, a queue-pair error, a peer killed (its kernel disconnects its
// rdma_cm id: RDMA_CM_EVENT_DISCONNECTED flushes the receives of the session's message endpoint, where the
// server always awaits the next request, also while it answers one) — the server notices at once,
// even while that connection waits for a compaction, revokes its windows, and releases its tenants: each
// slot is held --hold-seconds (default 30) for a reconnect presenting the same id (how a client recovers
// from a revoked key, below), then freed; a new tenant that finds no free slot takes the one held longest
// at once. A connection that presents an id another live connection holds takes the tenant over (the id,
// 64 random bits, is the client's credential); the other connection's windows are revoked first. (A peer
// whose host vanishes without a disconnect is noticed only when the server next sends to it: no keepalive.)
// A request sent as a send-with-invalidate of a key the connection was not granted fails the server's receive
// (errc::foreign_remote_invalidation, counted in coverbs::window_statistics()): never served, it ends that
// session alone, with that reason.
//
// Client: each session connects, asks for its keys, writes --ops blocks of --size bytes through the write
// window and reads each back through the read window, comparing the bytes. With --after-compaction it
// then waits for the next compaction (saying so on stderr; it gives up after --timeout) and carries on
// with the keys it has, as a client racing with compaction would: its RDMA write through the revoked key
// fails with wc_errc::rem_access_err, which moves its queue pair (and the server's end) to the error
// state. It recovers by asking again: it reconnects, gets fresh keys, reads back what it wrote before the
// compaction (now in the other half) and writes and verifies once more. An admin connection (any client
// may send the same control messages) starts a compaction — once N sessions wait for one; the server
// refuses an N above its slot count at once —, asks for the slots free and held, or shuts the server down.
// --grab N asks keys for N fresh ids on one connection, prints how many it got and holds them (until a
// compaction, --timeout, or being killed): a check of --tenants-per-connection.
//
// Control messages are `message`s, the calls of a coverbs session over the same connection (the server on
// async_serve: async_receive_request and async_reply; the clients' async_call); the data moves with RDMA
// write and read only. Every process prints its statistics at the end (one JSON line with --json).
// Exit status: 0 when everything held, 1 when something failed, 2 for a bad command line.
//
// Standalone, in the Soft-RoCE guest (rdma_cm on rxe0's address 10.77.0.1; --help prints this too):
//   tools/rxe-vm -- sh -c 'S=build/examples/memory_pool_server A="10.77.0.1 7471"
//     $S --listen $A &
//     $S --connect $A --clients 2 --after-compaction & c=$!
//     $S --connect $A --admin compact --waiting 2; wait $c
//     $S --connect $A --admin shutdown; wait'
//
// The files: protocol.hpp (the control messages), server.hpp with server.cpp (sessions), tenants.cpp and
// compaction.cpp; client.hpp with link.cpp (a session with the server), client.cpp (the sessions) and
// admin.cpp (--admin, --grab); samples.hpp (the reports' latencies); main.cpp (this command line).
#include "client.hpp"
#include "server.hpp"

#include "common/command_line.hpp"
#include "common/metrics_port.hpp"

#include <coverbs_support/command_line.hpp>
#include <coverbs_support/size_argument.hpp>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr const char* usage_text =
    "usage: memory_pool_server --listen ADDR PORT [--pool-size BYTES] [--slot-size BYTES] [--ready-file FILE]\n"
    "                          [--tenants-per-connection N] [--hold-seconds S] [--metrics-port N] [--json]\n"
    "       memory_pool_server --connect ADDR PORT [--clients N] [--ops N] [--size BYTES] [--after-compaction]\n"
    "                          [--timeout SECONDS] [--json]\n"
    "       memory_pool_server --connect ADDR PORT --admin compact [--waiting N] | --admin status\n"
    "                          | --admin shutdown [--timeout SECONDS] [--json]\n"
    "       memory_pool_server --connect ADDR PORT --grab N [--timeout SECONDS] [--json]\n"
    "\n"
    "A storage server over one registered memory pool: each client gets a type-2 memory window to\n"
    "write through and one to read through, over a slot of its own; a compaction revokes every\n"
    "window, moves the slots and grants fresh keys; a client that uses a revoked key gets\n"
    "rem_access_err and recovers by reconnecting and asking again.\n"
    "\n"
    "Server\n"
    "  --listen ADDR PORT   serve on ADDR, the numeric address of an RDMA device's interface (10.77.0.1\n"
    "                       in the Soft-RoCE guest), rdma_cm port PORT (0: any free one; see\n"
    "                       --ready-file); --listen PORT --address ADDR says the same\n"
    "  --pool-size BYTES    the registered pool, both halves (default 64M; K, M, G suffixes)\n"
    "  --slot-size BYTES    one tenant's storage (default 1M); slots: pool / 2 / slot (default 32)\n"
    "  --tenants-per-connection N\n"
    "                       tenants (slots) one connection may hold (default 1); asking keys for one\n"
    "                       more id is refused ('tenant limit') until it says bye for one\n"
    "  --hold-seconds S     when a connection ends without bye (disconnect, queue-pair error, client\n"
    "                       killed), its windows are revoked at once and each of its slots is held S\n"
    "                       seconds for a reconnect with the same tenant id, then freed (default 30;\n"
    "                       0: freed at once); a new tenant finding no free slot takes a held one\n"
    "  --ready-file FILE    write the listening port to FILE once ready\n"
    "  Stops on SIGINT / SIGTERM or an admin shutdown, then prints its statistics.\n"
    "Client\n"
    "  --connect ADDR PORT  the server (numeric address; a refused connection is tried again for 10 s,\n"
    "                       so client and server may start together)\n"
    "  --clients N          sessions in this process, each a connection and tenant (default 2); at most\n"
    "                       the server's slots\n"
    "  --ops N              blocks written and read back per round (default 16)\n"
    "  --size BYTES         bytes per block (default 4096); ops x size must fit a slot\n"
    "  --after-compaction   wait for a compaction (--admin compact, from another process), use the\n"
    "                       revoked key (expect rem_access_err), recover: reconnect, fresh keys, old\n"
    "                       data intact, new data verified\n"
    "  --timeout SECONDS    give up after this long in all (default 80)\n"
    "Admin (any client may send these)\n"
    "  --admin compact      compact now, or once --waiting N sessions wait for a compaction (at most\n"
    "                       the pool's slots; the server waits 60 s for them)\n"
    "  --admin status       the server's slots: free, and held for a reconnect\n"
    "  --admin shutdown     end every session; the server prints its statistics and exits\n"
    "  --grab N             ask keys for N fresh tenant ids on one connection, print how many were\n"
    "                       granted, hold them until a compaction or --timeout (a check of the\n"
    "                       server's --tenants-per-connection; exit 0 when it alone refused)\n"
    "Both\n"
    "  --json               print the statistics as one JSON line\n"
    "  --metrics-port N     serve coverbs' metrics at http://127.0.0.1:N/metrics (Prometheus text; read them\n"
    "                       with curl or `coverbs stats HOST:N`); counting is on while it is given\n"
    "\n"
    "Exit status: 0 when every step held, 1 when one failed, 2 for a bad command line.\n"
    "\n"
    "In the Soft-RoCE guest (tools/rxe-vm boots it; rdma_cm works on 10.77.0.1):\n"
    "  tools/rxe-vm -- sh -c 'S=build/examples/memory_pool_server A=\"10.77.0.1 7471\"\n"
    "    $S --listen $A &\n"
    "    $S --connect $A --clients 2 --after-compaction & c=$!\n"
    "    $S --connect $A --admin compact --waiting 2; wait $c\n"
    "    $S --connect $A --admin shutdown; wait'\n"
    "On a host with an RDMA device, use its address for --listen and --connect.\n";

}  // namespace

int main(int argc, char** argv) {
  using example::in_connect, example::in_listen, example::role;
  using memory_pool::client_config, memory_pool::server_config;
  const std::string prog = argc > 0 ? argv[0] : "memory_pool_server";
  auto bad = [&](const std::string& why) { return ::command_line::bad(prog, why); };
  server_config server;
  client_config client;
  std::optional<role> mode;
  std::string address = server.address;
  bool address_given = false, address_option = false;
  std::uint64_t port = 0, pool_size = server.pool_size, slot_size = server.slot_size, clients = client.clients,
                ops = client.ops, size = client.size, waiting = 0, timeout = client.timeout,
                per_connection = server.tenants_per_connection, hold = static_cast<std::uint64_t>(server.hold.count()),
                grab = 0, metrics_port = 0;
  const example::numeric_option numeric[] = {
      {"--pool-size", &pool_size, 4096, 64ull << 30, in_listen, true},
      {"--slot-size", &slot_size, 64, 1ull << 30, in_listen, true},
      {"--tenants-per-connection", &per_connection, 1, 4096, in_listen},
      {"--hold-seconds", &hold, 0, 3600, in_listen},
      {"--grab", &grab, 1, 4096, in_connect},
      {"--clients", &clients, 1, 64, in_connect},
      {"--ops", &ops, 1, 1u << 20, in_connect},
      {"--size", &size, 1, 1ull << 30, in_connect, true},
      {"--waiting", &waiting, 0, 4096, in_connect},
      {"--timeout", &timeout, 1, 3600, in_connect},
      {"--metrics-port", &metrics_port, 1, 65535, in_listen | in_connect},
  };
  CLI::App app{"", prog};
  ::command_line::describe(app, usage_text);
  std::vector<std::string> listen, connect;
  app.add_option("--listen", listen)->expected(1, 2);  // --listen PORT --address ADDR: the older spelling
  app.add_option("--connect", connect)->expected(2);
  std::vector<std::pair<std::string, unsigned>> roles;  // options and the roles they belong to
  for (const example::numeric_option& o : numeric) {
    example::add_numeric(app, o);
    roles.emplace_back(o.name, o.roles);
  }
  const auto non_empty = CLI::Validator([](std::string& t) { return t.empty() ? "takes a non-empty value" : ""; }, "");
  app.add_option("--address", address)->check(non_empty);
  app.add_option("--ready-file", server.ready_file)->check(non_empty);
  app.add_option("--admin", client.admin)->check(::command_line::one_of({"compact", "status", "shutdown"}));
  app.add_flag("--after-compaction", client.after_compaction);
  app.add_flag("--json", server.json);
  for (const char* name : {"--address", "--ready-file"})
    roles.emplace_back(name, in_listen);
  for (const char* name : {"--admin", "--after-compaction"})
    roles.emplace_back(name, in_connect);
  if (const auto status = ::command_line::parse(app, argc, argv)) return *status;
  client.json = server.json;
  if (!listen.empty() && !connect.empty()) return bad("give one of --listen and --connect");
  if (!listen.empty() || !connect.empty()) {
    mode = listen.empty() ? role::connect : role::listen;
    const std::vector<std::string>& where = listen.empty() ? connect : listen;
    if (where.size() == 2) address = where[0], address_given = true;
    std::uint16_t p = 0;
    if (const auto why = example::parse_port(where.back(), *mode == role::listen ? 0 : 1, p)) return bad(*why);
    port = p;
  }
  address_option = app.count("--address") > 0;
  if (!mode) return bad("say what to run: --listen ADDR PORT or --connect ADDR PORT");
  for (const auto& [name, in] : roles)
    if (app.count(name))
      if (const auto why = example::check_role(name, in, *mode)) return bad(*why);
  if (address_given && address_option) return bad("give the address once: --listen ADDR PORT or --address ADDR");
  if (const auto why = example::check_address(address)) return bad(*why);
  if (!server.ready_file.empty()) {  // refused now: a script waiting for the file would wait forever
    const auto slash = server.ready_file.rfind('/');
    const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : server.ready_file.substr(0, slash);
    if (::access(folder.c_str(), W_OK | X_OK) != 0)
      return bad("--ready-file " + server.ready_file + ": cannot write in folder '" + folder + "' (" +
                 std::strerror(errno) + "); give a file in an existing, writable folder");
  }
  if (*mode == role::listen && pool_size / 2 / slot_size == 0)
    return bad("--pool-size (" + std::to_string(pool_size) + " bytes) must hold at least two slots of --slot-size (" +
               std::to_string(slot_size) + " bytes), one per half: raise --pool-size or lower --slot-size");
  if (!client.admin.empty() && client.after_compaction) return bad("--admin does not mix with --after-compaction");
  if (waiting && client.admin != "compact") return bad("--waiting goes with --admin compact");
  if (grab && (!client.admin.empty() || client.after_compaction))
    return bad("--grab does not mix with --admin or --after-compaction");
  if (*mode == role::listen)
    if (const auto why = size_argument::exceeds_memory("the pool", pool_size, "--pool-size", pool_size)) {
      std::fprintf(stderr, "%s: %s\n", prog.c_str(), why->c_str());
      return 1;
    }
  // Each client session registers an out and an in block of --size: refused here, before connecting,
  // when they cannot fit in memory (rather than a session ending with std::bad_alloc).
  if (*mode == role::connect && client.admin.empty())
    if (const auto why = size_argument::exceeds_memory("the sessions' buffers (--clients x 2 x --size)",
                                                       clients * 2 * size, "--size", size)) {
      std::fprintf(stderr, "%s: %s\n", prog.c_str(), why->c_str());
      return 1;
    }
  std::optional<example::metrics_port> metrics;
  try {
    metrics.emplace(metrics_port, "memory_pool_server");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog.c_str(), e.what());
    return 1;
  }
  if (*mode == role::listen) {
    server.address = address;
    server.port = static_cast<std::uint16_t>(port);
    server.pool_size = pool_size;
    server.slot_size = slot_size;
    server.tenants_per_connection = per_connection;
    server.hold = std::chrono::seconds(hold);
    return memory_pool::run_server(server);
  }
  client.host = address;
  client.port = static_cast<std::uint16_t>(port);
  client.clients = static_cast<int>(clients);
  client.ops = ops;
  client.size = size;
  client.waiting = static_cast<std::uint32_t>(waiting);
  client.timeout = static_cast<unsigned>(timeout);
  client.grab = static_cast<std::uint32_t>(grab);
  return memory_pool::run_client(client);
}
