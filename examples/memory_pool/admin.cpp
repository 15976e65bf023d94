// The memory pool's admin roles: an --admin request and its printed reply, and --grab N (keys for N fresh
// tenant ids on one connection, held until a compaction or --timeout).
#include "admin.hpp"
#include "link.hpp"

#include <coverbs_support/json_output.hpp>
#include <coverbs_support/timings.hpp>

#include <cinttypes>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <vector>

namespace memory_pool {

using clock_type = example::clock;
using statistics::us_since;

void print_admin_failure(const client_config& c, const std::string& why) {
  if (c.json)
    json_output::print(json::object{{"role", "admin"}, {"command", c.admin}, {"status", why}});
  else
    std::fprintf(stderr, "memory_pool_server: %s: %s\n", c.admin.c_str(), why.c_str());
}

awaitable<bool> admin(const client_config& c, client_stats& st) {
  std::unique_ptr<link> l;
  bool ok = false;
  try {
    l = co_await open_link(c, st);
    const command op = c.admin == "compact"  ? command::compact
                       : c.admin == "status" ? command::status
                                             : command::shutdown;
    const auto t0 = clock_type::now();
    const message request{.op = op, .count = c.waiting};
    const message reply = co_await call(*l, request, st);
    const double us = us_since(t0);
    json::object j{{"role", "admin"}, {"command", c.admin}, {"status", "ok"}, {"generation", reply.generation}};
    if (op == command::compact) {
      j["waiting"] = c.waiting;
      j["revoked"] = reply.revoked;
      j["granted"] = reply.granted;
      j["moved_bytes"] = reply.moved_bytes;
      j["compaction_us"] = reply.took_us;
    }
    if (op == command::status) {
      j["slots"] = reply.count;
      j["free_slots"] = reply.free_slots;
      j["held_slots"] = reply.held_slots;
    }
    j["request_us"] = tenth(us);
    const std::string line =
        c.json ? json_output::text(j)
        : op == command::compact
            ? "compaction " + std::to_string(reply.generation) + ": revoked " + std::to_string(reply.revoked) +
                  " windows, copied " + std::to_string(reply.moved_bytes) + " bytes, granted " +
                  std::to_string(reply.granted) + " fresh windows in " + std::to_string(reply.took_us) + " us"
        : op == command::status
            ? std::to_string(reply.count) + " slots: " + std::to_string(reply.free_slots) + " free, " +
                  std::to_string(reply.held_slots) + " held for a reconnect (their connection ended without bye)"
            : "server is shutting down";
    ok = true;
    std::printf("%s\n", line.c_str());
  } catch (const std::exception& e) {
    print_admin_failure(c, e.what());
  }
  if (l) co_await close_link(*l);
  co_return ok;
}

std::uint64_t fresh_tenant_id(std::random_device& seed) {
  return (static_cast<std::uint64_t>(seed()) << 32 | seed()) | 1;
}

awaitable<void> grab(const client_config& c, client_stats& st, bool& ok) {
  std::unique_ptr<link> l;
  try {
    l = co_await open_link(c, st);
    std::random_device seed;
    std::uint64_t granted = 0, over_limit = 0;
    std::map<std::string, std::uint64_t> other;
    for (std::uint32_t i = 0; i < c.grab; ++i) {
      const message reply =
          co_await exchange(*l, message{.op = command::get_keys, .tenant = fresh_tenant_id(seed)}, st);
      if (reply.status == refusal::none)
        ++granted;
      else if (reply.status == refusal::tenant_limit)
        ++over_limit;
      else
        ++other[to_string(reply.status)];
    }
    std::vector<std::string> others;
    for (const auto& [why, n] : other)
      others.push_back(std::to_string(n) + " x " + why);
    if (c.json) {
      json_output::print(json::object{{"role", "grab"},
                                      {"asked", c.grab},
                                      {"granted", granted},
                                      {"over_limit", over_limit},
                                      {"other_refusals", json::array(others.begin(), others.end())}});
    } else {
      std::printf("grab: asked keys for %u tenant ids on one connection: %" PRIu64 " granted, %" PRIu64
                  " refused over the server's --tenants-per-connection\n",
                  c.grab, granted, over_limit);
      for (const auto& o : others)
        std::printf("  refused %s\n", o.c_str());
    }
    std::fflush(stdout);
    ok = other.empty();
    co_await exchange(*l, message{.op = command::wait_compaction}, st);  // holds them
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_pool_server: grab: %s\n", e.what());
  }
  if (l) co_await close_link(*l);
}

}  // namespace memory_pool
