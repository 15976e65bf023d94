// coverbs — command-line tool.
//
//   coverbs devices [--json]    list RDMA devices with their memory-window types and limits
//   coverbs devices --windows   bind and invalidate a window of each type on each device (a self-test through
//                               two connected queue pairs), then print the memory-window counters
//   coverbs reg-latency ...     registration latency percentiles: sync, async, cache, pool (see --help)
//   coverbs stress ...          registration stress from several threads, failures by errno (see --help)
//   coverbs stats HOST:PORT     a running program's metrics (its /metrics), grouped (see --help)
//   coverbs --help
#include <coverbs/coverbs.hpp>

#include <coverbs_support/command_line.hpp>
#include <coverbs_support/json_output.hpp>
#include "registration_commands.hpp"
#include "stats_command.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

const char* const usage =
    "usage: coverbs devices [--json | --windows]\n"
    "       coverbs reg-latency [--size 4K..1G] [--percentiles 50,99,99.9] [--iters N] [--device NAME] [--json]\n"
    "       coverbs stress [--size 1G] [--count N] [--threads T] [--device NAME]\n"
    "       coverbs stats HOST:PORT [--path /metrics] [--raw]\n"
    "  devices             list RDMA devices: memory-window types, limits, default GID of port 1\n"
    "  devices --windows   self-test a bind, rebind and invalidation of each window type on each\n"
    "                      device, then print the memory-window counters of this process\n"
    "  reg-latency         registration latency by size: synchronous ibv_reg_mr, through the worker\n"
    "                      pool, a registration-cache hit, a pool allocation\n"
    "  stress              register and deregister from several threads; failures by errno\n"
    "  stats               a running program's metrics over HTTP (Prometheus text), grouped\n";

const char* const devices_usage =
    "usage: coverbs devices [--json | --windows]\n"
    "  devices             list RDMA devices: memory-window types, limits, default GID of port 1\n"
    "  devices --json      the same list as a JSON array, one object per device\n"
    "  devices --windows   self-test a bind, rebind and invalidation of each window type on each\n"
    "                      device, then print the memory-window counters of this process\n";

int devices(bool json) {
  json_output::json::array out;
  for (const coverbs::device_info& info : coverbs::list_devices()) {
    coverbs::device dev = coverbs::device::open(info.name);
    const coverbs::device_caps& c = dev.caps();
    const coverbs::port_attributes port = dev.query_port(1);
    std::string gid = "-";
    if (port.active()) gid = dev.default_gid(1).value.to_string();
    if (json) {
      out.push_back({{"name", info.name},
                     {"mw_types", coverbs::mw_types_string(c)},
                     {"max_mw", c.max_mw},
                     {"max_mr", c.max_mr},
                     {"atomics", coverbs::to_string(c.atomics)},
                     {"odp", c.odp},
                     {"rereg_mr", c.rereg_mr},
                     {"port1_active", port.active()},
                     {"default_gid", gid}});
    } else {
      std::printf("%-10s mw %-14s max_mw %-8u max_mr %-8u atomics %-6s odp %-3s rereg %-3s port1 %-6s gid %s\n",
                  info.name.c_str(), coverbs::mw_types_string(c).c_str(), c.max_mw, c.max_mr,
                  coverbs::to_string(c.atomics), c.odp ? "yes" : "no", c.rereg_mr ? "yes" : "no",
                  port.active() ? "active" : "down", gid.c_str());
    }
  }
  if (json) json_output::print(out);
  return 0;
}

/// Binds, rebinds (rights change) and invalidates one window of `type` through `qp`; "ok" or the error.
std::string self_test(boost::asio::io_context& io, coverbs::protection_domain& pd, coverbs::queue_pair& qp,
                      coverbs::memory_region& mr, coverbs::window_type type) {
  coverbs::error_code ec;
  coverbs::memory_window w(pd, type, ec);
  if (ec) return ec.message();
  coverbs::error_code result;
  bool done = false;
  coverbs::bind_mw(qp, w, mr, {}, coverbs::access::remote_read, [&](coverbs::error_code e, coverbs::remote_key) {
    if (e) return result = e, void(done = true);
    coverbs::rebind_mw(qp, w, mr, {}, coverbs::access::remote_write, [&](coverbs::error_code e2, coverbs::remote_key) {
      if (e2) return result = e2, void(done = true);
      coverbs::invalidate(qp, w, [&](coverbs::error_code e3) { result = e3, done = true; });
    });
  });
  io.restart();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done && std::chrono::steady_clock::now() < deadline)
    io.run_for(std::chrono::milliseconds(50));
  if (!done) return "timed out";
  return result ? result.message() : "ok";
}

int windows() {
  for (const coverbs::device_info& info : coverbs::list_devices()) {
    coverbs::device dev = coverbs::device::open(info.name);
    const coverbs::device_caps& c = dev.caps();
    std::printf("%-10s mw %-14s max_mw %u\n", info.name.c_str(), coverbs::mw_types_string(c).c_str(), c.max_mw);
    if (!dev.query_port(1).active()) {
      std::printf("  self-test skipped: port 1 is not active\n");
      continue;
    }
    boost::asio::io_context io;
    coverbs::protection_domain pd(dev);
    coverbs::completion_queue cq(io, dev);
    coverbs::queue_pair a(pd, cq, {.max_send_wr = 8, .max_recv_wr = 8}),
        b(pd, cq, {.max_send_wr = 8, .max_recv_wr = 8});
    coverbs::connect_pair(a, b);
    std::vector<std::byte> bytes(4096);
    coverbs::memory_region mr(pd, bytes,
                              coverbs::access::local_write | coverbs::access::remote_read |
                                  coverbs::access::remote_write | coverbs::access::mw_bind);
    const std::pair<coverbs::window_type, const char*> types[] = {{coverbs::window_type::type1, "type1"},
                                                                  {coverbs::window_type::type2, "type2"}};
    for (const auto& [type, name] : types)
      std::printf("  self-test %s bind+rebind+invalidate: %s\n", name, self_test(io, pd, a, mr, type).c_str());
  }
  const coverbs::window_counters s = coverbs::window_statistics();
  std::printf("counters (this process): windows_allocated %llu windows_bound %llu binds %llu binds_failed %llu "
              "invalidations %llu remote_invalidations %llu foreign_invalidations %llu windows_replaced %llu "
              "leases_granted %llu leases_expired %llu leases_revoked %llu\n",
              (unsigned long long)s.windows_allocated, (unsigned long long)s.windows_bound, (unsigned long long)s.binds,
              (unsigned long long)s.binds_failed, (unsigned long long)s.invalidations,
              (unsigned long long)s.remote_invalidations, (unsigned long long)s.foreign_invalidations,
              (unsigned long long)s.windows_replaced, (unsigned long long)s.leases_granted,
              (unsigned long long)s.leases_expired, (unsigned long long)s.leases_revoked);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"", "coverbs"};
  command_line::describe(app, usage);
  app.require_subcommand(0, 1);
  CLI::App* list = app.add_subcommand("devices");
  command_line::describe(*list, devices_usage);
  bool json = false, self_test = false;
  list->add_flag("--json", json);
  list->add_flag("--windows", self_test)->excludes(list->get_option("--json"));
  const auto reg_latency = coverbs::cli::add_reg_latency(app);
  const auto stress = coverbs::cli::add_stress(app);
  const auto stats = coverbs::cli::add_stats(app);
  if (const auto status = command_line::parse(app, argc, argv)) return *status;
  if (app.get_subcommands().empty()) return command_line::bad("coverbs", "say what to run: devices, reg-latency, stress or stats");
  try {
    if (app.got_subcommand("reg-latency")) return reg_latency();
    if (app.got_subcommand("stress")) return stress();
    if (app.got_subcommand("stats")) return stats();
    return self_test ? windows() : devices(json);
  } catch (const coverbs::system_error& e) {
    std::fprintf(stderr, "coverbs: %s\n", e.what());
    return 1;
  }
}
