// device_tour: open an RDMA device, print what it can do, register memory and report the keys.
//
//   device_tour [--device NAME] [--size BYTES]
//
// Run it where verbs work: on a host with an RDMA device, or in the Soft-RoCE guest:
//   tools/rxe-vm -- build/examples/device_tour
#include <coverbs/coverbs.hpp>

#include <coverbs_support/command_line.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void print_caps(const coverbs::device& dev) {
  const coverbs::device_caps& c = dev.caps();
  std::printf("device %s (fw %s, vendor 0x%x part %u)\n", dev.name().c_str(), c.fw_ver.c_str(), c.vendor_id,
              c.vendor_part_id);
  std::printf("  memory windows : %s (max_mw %u)\n", coverbs::mw_types_string(c).c_str(), c.max_mw);
  std::printf("  regions        : max_mr %u, max_mr_size %llu bytes, rereg_mr %s\n", c.max_mr,
              static_cast<unsigned long long>(c.max_mr_size), c.rereg_mr ? "supported" : "not supported (dereg + reg)");
  std::printf("  atomics        : %s\n", coverbs::to_string(c.atomics));
  std::printf("  on-demand pages: %s\n", c.odp ? "yes" : "no");
  std::printf("  queues         : max_qp %u, max_qp_wr %u, max_sge %u, max_cq %u, max_cqe %u\n", c.max_qp, c.max_qp_wr,
              c.max_sge, c.max_cq, c.max_cqe);
  for (std::uint8_t port = 1; port <= c.phys_port_cnt; ++port) {
    const coverbs::port_attributes p = dev.query_port(port);
    std::printf("  port %u         : %s, %s, active MTU %u\n", port, p.active() ? "active" : "down",
                p.is_ethernet() ? "Ethernet (RoCE)" : "InfiniBand", p.active_mtu_bytes());
    if (!p.active()) continue;
    for (const coverbs::gid_entry& g : dev.query_gids(port))
      std::printf("    gid[%u] %-28s %s\n", g.index, g.value.to_string().c_str(), coverbs::to_string(g.type));
    const coverbs::gid_entry def = dev.default_gid(port);
    std::printf("    default gid   : index %u (%s)\n", def.index, def.value.to_string().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string name;
  std::size_t size = 64u << 20;
  CLI::App app{"", argc > 0 ? argv[0] : "device_tour"};
  command_line::describe(app, "usage: " + app.get_name() +
                                  " [--device NAME] [--size BYTES]   (BYTES: 1 .. 16 GiB, default 64 MiB)\n");
  app.add_option("--device", name);
  app.add_option("--size", size)->transform(command_line::size(1, 16ull << 30));
  if (const auto status = command_line::parse(app, argc, argv)) return *status;
  if (const auto why = size_argument::exceeds_memory("the buffer to register", size, "--size", size)) {
    std::fprintf(stderr, "device_tour: %s\n", why->c_str());
    return 1;
  }
  try {
    coverbs::device dev = coverbs::device::open(name);
    print_caps(dev);

    coverbs::protection_domain pd(dev);
    std::vector<std::byte> buffer(size);
    const auto rights = coverbs::access::local_write | coverbs::access::remote_read | coverbs::access::remote_write |
                        coverbs::access::mw_bind;
    const auto t0 = std::chrono::steady_clock::now();
    coverbs::memory_region mr(pd, buffer, rights);
    const auto t1 = std::chrono::steady_clock::now();
    std::printf("registered %zu bytes at %p: lkey 0x%x rkey 0x%x access %s in %.1f us\n", mr.size(),
                static_cast<void*>(mr.data()), mr.lkey(), mr.rkey(), coverbs::to_string(mr.rights()).c_str(),
                std::chrono::duration<double, std::micro>(t1 - t0).count());
    mr.deregister();
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("deregistered in %.1f us\n", std::chrono::duration<double, std::micro>(t2 - t1).count());

    // The error layer at work: remote_write without local_write is refused by the verb (EINVAL).
    coverbs::error_code ec;
    coverbs::memory_region bad(pd, buffer, coverbs::access::remote_write, ec);
    std::printf("remote_write without local_write: %s (%s), as expected\n", ec ? "refused" : "ACCEPTED",
                ec.message().c_str());
    return ec == boost::system::errc::invalid_argument ? 0 : 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "device_tour: %s\n",
                 size_argument::cannot_allocate("the buffer to register", size, "--size", size).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "device_tour: %s\n", e.what());
    return 1;
  }
}
