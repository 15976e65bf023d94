// coverbs — command-line tool.
//
//   coverbs devices [--json]    list RDMA devices with their memory-window types and limits
//   coverbs --help
#include <coverbs/coverbs.hpp>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

int usage(FILE* to) {
  std::fprintf(to, "usage: coverbs devices [--json]\n"
                   "  devices   list RDMA devices: memory-window types, limits, default GID of port 1\n");
  return to == stdout ? 0 : 2;
}

int devices(bool json) {
  const auto list = coverbs::list_devices();
  if (json) std::printf("[");
  bool first = true;
  for (const coverbs::device_info& info : list) {
    coverbs::device dev = coverbs::device::open(info.name);
    const coverbs::device_caps& c = dev.caps();
    const coverbs::port_attributes port = dev.query_port(1);
    std::string gid = "-";
    if (port.active()) gid = dev.default_gid(1).value.to_string();
    if (json) {
      std::printf("%s\n {\"name\": \"%s\", \"mw_types\": \"%s\", \"max_mw\": %u, \"max_mr\": %u, "
                  "\"atomics\": \"%s\", \"odp\": %s, \"rereg_mr\": %s, \"port1_active\": %s, \"default_gid\": \"%s\"}",
                  first ? "" : ",", info.name.c_str(), coverbs::mw_types_string(c).c_str(), c.max_mw, c.max_mr,
                  coverbs::to_string(c.atomics), c.odp ? "true" : "false", c.rereg_mr ? "true" : "false",
                  port.active() ? "true" : "false", gid.c_str());
    } else {
      std::printf("%-10s mw %-14s max_mw %-8u max_mr %-8u atomics %-6s odp %-3s rereg %-3s port1 %-6s gid %s\n",
                  info.name.c_str(), coverbs::mw_types_string(c).c_str(), c.max_mw, c.max_mr,
                  coverbs::to_string(c.atomics), c.odp ? "yes" : "no", c.rereg_mr ? "yes" : "no",
                  port.active() ? "active" : "down", gid.c_str());
    }
    first = false;
  }
  if (json) std::printf("\n]\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h") return usage(stdout);
  try {
    if (cmd == "devices") {
      if (argc > 3 || (argc == 3 && std::strcmp(argv[2], "--json"))) {
        std::fprintf(stderr, "coverbs devices: unknown argument '%s'\n", argv[argc - 1]);
        return usage(stderr);
      }
      return devices(argc == 3);
    }
  } catch (const coverbs::system_error& e) {
    std::fprintf(stderr, "coverbs: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "coverbs: unknown command '%s'\n", cmd.c_str());
  return usage(stderr);
}
