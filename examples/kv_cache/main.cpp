// kv_cache: a key-value cache whose values move by RDMA (a coverbs example). The command line and the self-test
// around server.cpp and client.cpp; what they speak is in kv_cache.hpp.
#include "kv_cache/kv_cache.hpp"

#include "common/command_line.hpp"
#include "common/run.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdio>
#include <optional>

namespace {

namespace asio = boost::asio;

constexpr const char* usage_text =
    "kv_cache: a key-value cache on sessions whose values move by RDMA, and its clients (a coverbs example).\n"
    "\n"
    "  kv_cache --self-test [--clients C] [--value-size N] [--address ADDR]\n"
    "      the server and C clients (default 4, at once) in one process, on ADDR (default 10.77.0.1, the\n"
    "      Soft-RoCE guest's rxe0), values of N bytes (default 256K; the message slots are 1 KiB).\n"
    "  kv_cache --listen ADDR PORT [--sessions S]\n"
    "      serve on ADDR:PORT until SIGINT or SIGTERM, or until S sessions have ended (each client makes 2).\n"
    "  kv_cache --connect ADDR PORT [--id I] [--value-size N]\n"
    "      one client, whose key is key-I.\n"
    "\n"
    "Each client puts its value (a bulk call: the server reads it through the client's window, whose key dies\n"
    "when the call completes), gets it (the server leases a window over the value to this client alone and\n"
    "answers with its key) and reads it by RDMA, then puts a new value under the same key: the server evicts the\n"
    "old one by invalidating every window over it before it answers. The client's read with the old key must\n"
    "fail (rem_access_err); it connects again, gets the key anew and must read the new value.\n"
    "Run it where verbs work; without an RDMA device, in the Soft-RoCE guest, from the project folder:\n"
    "  tools/rxe-vm -- build/examples/kv_cache --self-test\n";

int run(const example::command_line& cmd, unsigned clients, std::size_t value_size, unsigned id, unsigned sessions) {
  asio::io_context io;
  example::task_group tasks;
  std::optional<coverbs::listener> listener = cmd.listen(io.get_executor());
  example::command_line where = cmd;
  int sessions_ended = 0;
  asio::cancellation_signal stop;
  if (cmd.serving()) {
    where.port = listener->local_port();
    std::printf("kv_cache server on %s:%u\n", where.address.c_str(), where.port);
    auto on_end = [&](const coverbs::session_report& r) {
      if (r.peer.empty()) {  // a failed accept: no session
        std::printf("  %s\n", r.diagnostic.c_str());
        return;
      }
      ++sessions_ended;
      std::printf("  session of %s ended: %s\n", r.peer.c_str(), r.reason ? r.reason.message().c_str() : "returned");
    };
    asio::co_spawn(io, kv::serve(*listener, on_end),
                   asio::bind_cancellation_slot(stop.slot(), [](std::exception_ptr) {}));
  }
  const unsigned n = cmd.self_test() ? clients : cmd.connecting() ? 1 : 0;
  for (unsigned i = 0; i < n; ++i)
    tasks.spawn(io, kv::run_client(where.address, where.port, cmd.self_test() ? i : id, value_size), "kv_cache client");
  // Named: a coroutine lambda's captures live in the lambda object, which must outlive the coroutine (a
  // temporary one would be gone after the spawn).
  const int ends = cmd.self_test() ? static_cast<int>(2 * n) : static_cast<int>(sessions);
  auto stop_when_done = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(io);
    while (tasks.finished + 1 < tasks.started || sessions_ended < ends) {
      t.expires_after(std::chrono::milliseconds(20));
      co_await t.async_wait(asio::use_awaitable);
    }
    stop.emit(asio::cancellation_type::terminal);
  };
  auto serve_forever = [&]() -> asio::awaitable<void> {
    asio::steady_timer forever(io, asio::steady_timer::time_point::max());
    co_await forever.async_wait(asio::use_awaitable);
  };
  // The server stops once every client is done and each of its 2 sessions ended (a server: once S ended).
  if (cmd.self_test() || sessions > 0) tasks.spawn(io, stop_when_done(), "kv_cache sessions");
  if (cmd.mode == example::role::listen && sessions == 0) tasks.spawn(io, serve_forever(), "kv_cache server");
  const example::run_result outcome = example::run_tasks(io, tasks, cmd, std::chrono::seconds(60));
  std::printf("  clients          : %u, %u failed\n  value size       : %zu bytes\n", n,
              static_cast<unsigned>(tasks.failed), value_size);
  const char* what = cmd.self_test() ? "kv_cache self-test" : cmd.serving() ? "kv_cache server" : "kv_cache client";
  return example::verdict(what, tasks.failed == 0, outcome);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t clients = 4, value_size = 256 * 1024, id = 0, sessions = 0;
  return example::run_main(
      argc, argv, "kv_cache", usage_text,
      {{"--clients", &clients, 1, 64, example::in_self_test},
       {"--value-size", &value_size, 1, kv::max_value, example::in_self_test | example::in_connect, true},
       {"--id", &id, 0, 1000000, example::in_connect},
       {"--sessions", &sessions, 1, 1000000, example::in_listen}},
      [&](const example::command_line& cmd) {
        return run(cmd, static_cast<unsigned>(clients), value_size, static_cast<unsigned>(id),
                   static_cast<unsigned>(sessions));
      });
}
