// The memory pool's client sessions, the scenario of main.cpp's comment: each connects, gets its keys,
// writes and reads back through its windows, and, with --after-compaction, uses its revoked key and
// recovers; then `run_client`, the process around them (or around an admin role), and its report.
#include "client.hpp"
#include "admin.hpp"
#include "link.hpp"

#include <coverbs_support/json_output.hpp>
#include <coverbs_support/timings.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>

namespace memory_pool {

using clock_type = example::clock;
using statistics::us_since;

namespace {

/// The bytes operation `op` of round `round` writes: a pattern no other tenant, round or op repeats.
void fill_pattern(std::span<std::byte> out, std::uint64_t tenant_id, int round, std::size_t op) {
  std::uint64_t x = tenant_id * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(round) * 0x100000001b3ull + op;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
}

/// Reads block `op` back through `read_key` and compares it with what round `round` wrote there.
awaitable<bool> read_and_verify(link& l, const cv::remote_key& read_key, std::uint64_t tenant_id, int round,
                                std::size_t op, client_stats& st) {
  const cv::remote_key block = read_key.slice(op * l.size, l.size);
  auto [ec, n] = co_await l.s.qp().async_read(l.in_data(), block, tuple);
  if (ec) throw step_failed("RDMA read through the read window: " + ec.message());
  st.bytes_read += n;
  fill_pattern(l.out().bytes, tenant_id, round, op);
  const bool same = std::memcmp(l.out().data(), l.in_data().data(), l.size) == 0;
  ++(same ? st.ops_verified : st.verify_failures);
  co_return same;
}

/// `ops` blocks: write each through the write window, read it back through the read window, compare.
awaitable<bool> write_and_verify(link& l, const message& keys, std::uint64_t tenant_id, int round,
                                 const client_config& c, client_stats& st) {
  bool all = true;
  for (std::size_t op = 0; op < c.ops; ++op) {
    fill_pattern(l.out().bytes, tenant_id, round, op);
    const cv::remote_key block = keys.write_key.slice(op * c.size, c.size);
    auto [ec, n] = co_await l.s.qp().async_write(l.out(), block, tuple);
    if (ec) throw step_failed("RDMA write through the write window: " + ec.message());
    st.bytes_written += n;
    const bool same = co_await read_and_verify(l, keys.read_key, tenant_id, round, op, st);
    all = all && same;
  }
  co_return all;
}

awaitable<message> ask_for_keys(link& l, std::uint64_t tenant_id, const client_config& c, client_stats& st) {
  const message request{.op = command::get_keys, .tenant = tenant_id};
  const auto t0 = clock_type::now();
  const message reply = co_await call(l, request, st);
  st.keys_us.add(us_since(t0));
  if (reply.write_key.length < c.ops * c.size || reply.read_key.length < c.ops * c.size)
    throw step_failed("--ops x --size (" + std::to_string(c.ops * c.size) + " bytes) exceeds the server's window (" +
                      std::to_string(reply.write_key.length) + " bytes): lower them or raise --slot-size");
  co_return reply;
}

/// Records what went wrong in session `index`.
void note(client_stats& st, int index, const std::string& what) {
  st.unexpected.push_back("session " + std::to_string(index) + ": " + what);
}

/// After the compaction: writes through the revoked key from `keys` (it must fail with rem_access_err),
/// then recovers — reconnects if the error closed the queue pair, asks for the keys again, reads back
/// round 1 at the slot's new place and writes and verifies round 2. @returns true when all that held.
awaitable<bool> use_revoked_key_and_recover(std::unique_ptr<link>& l, const message& keys, std::uint64_t tenant_id,
                                            int index, const client_config& c, client_stats& st) {
  bool ok = true;
  ++st.expected_errors;
  const auto t0 = clock_type::now();
  auto [stale, n] = co_await l->s.qp().async_write(l->out(), keys.write_key.slice(0, c.size), tuple);
  if (stale == cv::wc_errc::rem_access_err) {
    ++st.expected_errors_seen;
  } else {
    ok = false;
    note(st, index,
         "a write through the revoked key gave '" + (stale ? stale.message() : std::string("success")) +
             "', not rem_access_err");
  }
  if (!l->s.conn().connected() || l->s.qp().error()) {  // a remote access error leaves it in the error state
    co_await close_link(*l);
    l.reset();
    l = co_await open_link(c, st);
    ++st.reconnects;
  }
  const message fresh = co_await ask_for_keys(*l, tenant_id, c, st);
  const bool new_keys = fresh.write_key.rkey != keys.write_key.rkey && fresh.read_key.rkey != keys.read_key.rkey &&
                        fresh.generation > keys.generation;
  st.fresh_keys += new_keys;
  st.moved += fresh.write_key.addr != keys.write_key.addr;
  if (!new_keys) note(st, index, "the keys after the compaction are not fresh");
  bool intact = true;
  for (std::size_t op = 0; op < c.ops; ++op) {
    const bool same = co_await read_and_verify(*l, fresh.read_key, tenant_id, 1, op, st);
    intact = intact && same;
  }
  st.recover_us.add(us_since(t0));
  st.data_intact += intact;
  if (!intact) note(st, index, "data written before the compaction did not survive it");
  const auto t1 = clock_type::now();
  const bool second = co_await write_and_verify(*l, fresh, tenant_id, 2, c, st);
  st.phase2_us.add(us_since(t1));
  if (!second) note(st, index, "data written after recovery read back differently");
  const bool recovered = new_keys && intact && second;
  st.recovered += recovered;
  co_return ok&& recovered;
}

/// More sessions in this process than the server has slots: every session ends, one says why.
struct too_many_sessions : step_failed {
  using step_failed::step_failed;
};

/// The line saying that this client process's sessions wait for a compaction, how to start one, and for how
/// long they wait. It names the process a client, with its pid: in the demo the client processes print to the
/// server's terminal, where a bare "memory_pool_server:" reads as the server waiting.
std::string waiting_note(const client_config& c) {
  return "memory_pool_server client (pid " + std::to_string(::getpid()) + ", " + std::to_string(c.clients) +
         (c.clients == 1 ? " session" : " sessions") +
         "): waiting for a compaction, as the scenario does (the demo's admin starts one; by hand: "
         "memory_pool_server --connect " +
         c.host + " " + std::to_string(c.port) + " --admin compact), for at most " + std::to_string(c.timeout) +
         " s (--timeout)";
}

/// One client session: the scenario from the file comment. Records into `st`; never throws.
awaitable<void> client_session(const client_config& c, std::uint64_t tenant_id, int index, client_stats& st) {
  ++st.sessions;
  std::unique_ptr<link> l;
  try {
    l = co_await open_link(c, st);
    const message status{.op = command::status};
    const std::uint32_t slots = (co_await call(*l, status, st)).count;
    if (static_cast<std::uint64_t>(c.clients) > slots)
      throw too_many_sessions("--clients " + std::to_string(c.clients) + " is more than the server's " +
                              std::to_string(slots) +
                              " slots: lower --clients, or start the server with more slots (raise its "
                              "--pool-size or lower its --slot-size)");
    const message keys = co_await ask_for_keys(*l, tenant_id, c, st);
    const auto t0 = clock_type::now();
    bool ok = co_await write_and_verify(*l, keys, tenant_id, 1, c, st);
    st.phase1_us.add(us_since(t0));
    if (!ok) note(st, index, "data read back through the read window differs from what was written");
    if (c.after_compaction) {
      const message wait{.op = command::wait_compaction};
      if (!std::exchange(st.told_waiting, true)) std::fprintf(stderr, "%s\n", waiting_note(c).c_str());
      co_await call(*l, wait, st);
      // Carry on with the keys from before the compaction, as a client racing with it would.
      const bool recovered = co_await use_revoked_key_and_recover(l, keys, tenant_id, index, c, st);
      ok = ok && recovered;
    }
    const message bye{.op = command::bye, .tenant = tenant_id};
    co_await call(*l, bye, st);
    st.sessions_ok += ok;
  } catch (const too_many_sessions& e) {
    if (index == 0) st.unexpected.push_back(e.what());
  } catch (const std::exception& e) {
    note(st, index, e.what());
  }
  if (l) co_await close_link(*l);
}

void print_client(const client_config& c, const client_stats& st, double wall_us) {
  if (c.json) {
    json_output::print(json::object{{"role", "client"},
                                    {"pid", static_cast<std::uint64_t>(getpid())},
                                    {"sessions", st.sessions},
                                    {"sessions_ok", st.sessions_ok},
                                    {"ops", c.ops},
                                    {"size", c.size},
                                    {"after_compaction", c.after_compaction},
                                    {"connections", st.connections},
                                    {"reconnects", st.reconnects},
                                    {"ops_verified", st.ops_verified},
                                    {"verify_failures", st.verify_failures},
                                    {"bytes_written", st.bytes_written},
                                    {"bytes_read", st.bytes_read},
                                    {"control_bytes", st.control_bytes},
                                    {"expected_errors", st.expected_errors},
                                    {"expected_errors_seen", st.expected_errors_seen},
                                    {"recovered", st.recovered},
                                    {"fresh_keys", st.fresh_keys},
                                    {"data_intact", st.data_intact},
                                    {"moved", st.moved},
                                    {"connect_us", st.connect_us.to_json()},
                                    {"registration_us", st.registration_us.to_json()},
                                    {"keys_us", st.keys_us.to_json()},
                                    {"phase1_us", st.phase1_us.to_json()},
                                    {"recover_us", st.recover_us.to_json()},
                                    {"phase2_us", st.phase2_us.to_json()},
                                    {"wall_us", tenth(wall_us)},
                                    {"unexpected_errors", json::array(st.unexpected.begin(), st.unexpected.end())}});
    return;
  }
  std::printf("memory_pool_server client: %" PRIu64 "/%" PRIu64 " sessions held in %.1f ms\n", st.sessions_ok,
              st.sessions, wall_us / 1000);
  std::printf("  connections        : %" PRIu64 " (%" PRIu64 " after the revoked key broke one)\n", st.connections,
              st.reconnects);
  std::printf("  data               : %" PRIu64 " bytes written, %" PRIu64 " read, %" PRIu64
              " blocks verified, %" PRIu64 " differed\n",
              st.bytes_written, st.bytes_read, st.ops_verified, st.verify_failures);
  if (c.after_compaction)
    std::printf("  after compaction   : revoked key refused %" PRIu64 "/%" PRIu64
                " (rem_access_err, expected); %" PRIu64 " fresh keys, %" PRIu64 " moved, %" PRIu64 " intact, %" PRIu64
                " recovered\n",
                st.expected_errors_seen, st.expected_errors, st.fresh_keys, st.moved, st.data_intact, st.recovered);
  std::printf("  connect (us)       : %s\n", st.connect_us.text().c_str());
  std::printf("  registration (us)  : %s\n", st.registration_us.text().c_str());
  std::printf("  keys round trip(us): %s\n", st.keys_us.text().c_str());
  if (c.after_compaction) std::printf("  recovery (us)      : %s\n", st.recover_us.text().c_str());
  for (const auto& e : st.unexpected)
    std::printf("  error: %s\n", e.c_str());
}

/// Why a client process ran out of time (--timeout): with no connection made yet, what the last connect try
/// got (e.g. "connection refused": nobody listens there), since no reply could come.
std::string timeout_reason(const client_config& c, const client_stats& st) {
  if (st.connections == 0 && st.last_connect)
    return "no connection within " + std::to_string(c.timeout) + " s: connect to " + c.host + ":" +
           std::to_string(c.port) + ": " + st.last_connect.message();
  const std::string limit = "no reply within " + std::to_string(c.timeout) + " s (--timeout SECONDS raises the limit)";
  if (c.admin == "compact" && c.waiting > 0)
    return limit + ": the server compacts once " + std::to_string(c.waiting) + " sessions wait for a compaction";
  if (c.after_compaction)
    return "no compaction within " + std::to_string(c.timeout) +
           " s (start one with --admin compact; --timeout SECONDS raises the limit)";
  return limit;
}

}  // namespace

int run_client(const client_config& config) {
  asio::io_context io;
  client_stats st;
  const auto t0 = clock_type::now();
  // The time limit: past it, the process says why and leaves at once (its coroutines still hold connections,
  // which must not be unwound with the io_context).
  asio::steady_timer limit(io, std::chrono::seconds(config.timeout));
  bool grabbed = false;  // --grab: what it got is out and held what the server allows
  limit.async_wait([&](cv::error_code ec) {
    if (ec) return;
    if (config.grab) {  // it held them for --timeout, as asked
      std::fflush(nullptr);
      std::_Exit(grabbed ? 0 : 1);
    }
    const std::string why = timeout_reason(config, st);
    if (!config.admin.empty()) {
      print_admin_failure(config, why);
    } else {
      st.unexpected.push_back(why);
      if (!config.json) std::fprintf(stderr, "memory_pool_server: %s\n", why.c_str());
      print_client(config, st, us_since(t0));
    }
    std::fflush(nullptr);
    std::_Exit(1);
  });
  if (!config.admin.empty()) {
    bool ok = false;
    asio::co_spawn(io, admin(config, st), [&](std::exception_ptr e, bool r) {
      ok = !e && r;
      limit.cancel();
    });
    io.run();
    return ok ? 0 : 1;
  }
  if (config.grab) {
    asio::co_spawn(io, grab(config, st, grabbed), [&](std::exception_ptr) { limit.cancel(); });
    io.run();
    return grabbed ? 0 : 1;
  }
  std::random_device seed;
  int running = config.clients;
  // The device's events (see open_link): read until every session has ended.
  example::device_watch watch(io.get_executor(), "memory_pool_server");
  st.watch = &watch;
  for (int i = 0; i < config.clients; ++i) {
    asio::co_spawn(io, client_session(config, fresh_tenant_id(seed), i, st), [&](std::exception_ptr e) {
      if (e) st.unexpected.push_back("a session ended with an exception");
      if (--running == 0) {
        limit.cancel();
        watch.close();
      }
    });
  }
  io.run();
  print_client(config, st, us_since(t0));
  const bool held =
      st.sessions_ok == st.sessions && st.unexpected.empty() && st.expected_errors_seen == st.expected_errors;
  return held ? 0 : 1;
}

}  // namespace memory_pool
