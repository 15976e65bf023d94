#pragma once
// The command line every example shares: a role (--self-test, --listen ADDR PORT or --connect ADDR PORT)
// plus numeric options and flags, each with the roles it belongs to; the checks of an address, a port and
// an option's role; the device a listener is bound to; and `run_main`, the body of an example's `main`.
// Sizes, counts and --help go through coverbs_support/command_line.hpp.
#include "common/prelude.hpp"

#include <coverbs/cm.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <coverbs_support/command_line.hpp>
#include <coverbs_support/size_argument.hpp>

#include <arpa/inet.h>
#include <net/if.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace example {

/// What the program does: everything in one process, or one side of it.
enum class role { self_test, listen, connect };

/// Roles an option belongs to (a mask of `role`s).
enum role_set : unsigned {
  in_self_test = 1u << static_cast<unsigned>(role::self_test),
  in_listen = 1u << static_cast<unsigned>(role::listen),
  in_connect = 1u << static_cast<unsigned>(role::connect),
  in_any_role = in_self_test | in_listen | in_connect,
};

/// The option that picks role `r`: "--self-test", "--listen" or "--connect".
inline const char* role_option(role r) {
  return r == role::self_test ? "--self-test" : r == role::listen ? "--listen" : "--connect";
}

/// The device a listener on `address` is bound to, where a server makes its protection domain and completion
/// queue. @throws std::runtime_error saying what to listen on when it has none: a listener on a loopback or
/// wildcard address (127.0.0.1, 0.0.0.0, ::) is not tied to one device.
inline coverbs::device& listening_device(coverbs::listener& l, const std::string& address) {
  if (!l.get_device())
    throw std::runtime_error("'" + address +
                             "' is not the address of one RDMA device: listen on the address of an RDMA device's "
                             "network interface (e.g. 10.77.0.1 in the Soft-RoCE guest); loopback and wildcard "
                             "addresses are not tied to one device, and this example shares one protection domain "
                             "between its connections");
  return l.get_device();
}

struct command_line {
  role mode = role::self_test;
  std::string address = "10.77.0.1";  ///< numeric IPv4/IPv6: the Soft-RoCE guest's rxe0 by default
  std::uint16_t port = 0;             ///< 0 in self-test mode: the listener picks one

  bool self_test() const noexcept { return mode == role::self_test; }
  /// This process runs the server (--listen, --self-test).
  bool serving() const noexcept { return mode != role::connect; }
  /// This process runs clients (--connect, --self-test).
  bool connecting() const noexcept { return mode != role::listen; }
  /// The listener for a serving role: on `address` and `port` (0 in self-test mode: any free port).
  /// @throws std::runtime_error when it has no device (see `listening_device`).
  std::optional<coverbs::listener> listen(const asio::any_io_executor& ex) const {
    std::optional<coverbs::listener> l;
    if (serving()) listening_device(l.emplace(ex, address, port), address);
    return l;
  }
};

/// A `--name N` option holding a whole number in [min, max], given with the roles in `roles`.
struct numeric_option {
  std::string_view name;
  std::uint64_t* value;
  std::uint64_t min, max;
  unsigned roles = in_any_role;
  bool bytes = false;  ///< a size: K, M and G (binary) suffixes allowed
};

/// A `--name` flag (no value), given with the roles in `roles`.
struct flag_option {
  std::string_view name;
  bool* value;
  unsigned roles = in_any_role;
};

namespace detail {

/// A numeric IPv4 or IPv6 address; an IPv6 one may name its interface ("fe80::1%veth0"), which a
/// link-local address needs.
inline bool numeric_address(const std::string& text) {
  unsigned char bytes[16];
  if (inet_pton(AF_INET, text.c_str(), bytes) == 1 || inet_pton(AF_INET6, text.c_str(), bytes) == 1) return true;
  const auto percent = text.find('%');
  if (percent == std::string::npos || percent + 1 == text.size()) return false;
  return inet_pton(AF_INET6, text.substr(0, percent).c_str(), bytes) == 1 &&
         if_nametoindex(text.substr(percent + 1).c_str()) != 0;
}

/// "--listen or --self-test".
inline std::string roles_text(unsigned roles) {
  std::string out;
  for (role r : {role::self_test, role::listen, role::connect})
    if (roles & (1u << static_cast<unsigned>(r))) out += (out.empty() ? "" : " or ") + std::string(role_option(r));
  return out;
}

}  // namespace detail

/// Adds option `o` to `app`: a whole number, or a size with `o.bytes` (coverbs_support/command_line.hpp validators).
inline CLI::Option* add_numeric(CLI::App& app, const numeric_option& o) {
  const std::string name(o.name);
  if (o.bytes) return app.add_option(name, *o.value)->transform(::command_line::size(o.min, o.max));
  return app.add_option(name, *o.value)->transform(::command_line::count(o.min, o.max));
}

/// The port of `--listen ADDR PORT` or `--connect ADDR PORT`, from `lowest` to 65535, or why it is bad.
inline std::optional<std::string> parse_port(const std::string& text, std::uint64_t lowest, std::uint16_t& port) {
  const auto n = text.find_first_not_of("0123456789") == std::string::npos ? size_argument::parse(text, lowest, 65535)
                                                                           : std::nullopt;
  if (!n) return "the port must be a number from " + std::to_string(lowest) + " to 65535 (got '" + text + "')";
  port = static_cast<std::uint16_t>(*n);
  return std::nullopt;
}
/// The reason `address` cannot be used, or nothing for a numeric IPv4 or IPv6 address.
inline std::optional<std::string> check_address(const std::string& address) {
  if (detail::numeric_address(address)) return std::nullopt;
  if (address.find('%') != std::string::npos)
    return "'" + address + "' is not a numeric IPv6 address with an interface of this host (e.g. fe80::1%veth0)";
  return "'" + address + "' is not a numeric IPv4 or IPv6 address (rdma_cm connects without name lookup)";
}

/// The reason option `name`, which belongs to `roles`, does not go with role `mode`, or nothing.
inline std::optional<std::string> check_role(std::string_view name, unsigned roles, role mode) {
  if (roles & (1u << static_cast<unsigned>(mode))) return std::nullopt;
  return std::string(name) + " goes with " + detail::roles_text(roles) + ", not with " + role_option(mode);
}

/// Parses `--help`, the role (`--self-test [--address ADDR]`, `--listen ADDR PORT`, `--connect ADDR PORT`),
/// `options` and `flags` with CLI11; an option or flag given with a role it does not belong to is bad input.
/// Prints `usage` for --help, or the reason for bad input.
/// @returns the exit status to leave with now (0 after --help, 2 for bad input), or nothing to go on.
inline std::optional<int> parse_command_line(int argc, char** argv, std::string_view usage, command_line& out,
                                             std::initializer_list<numeric_option> options,
                                             std::initializer_list<flag_option> flags = {}) {
  const std::string prog = argc > 0 ? argv[0] : "example";
  auto bad = [&](const std::string& why) { return std::optional<int>(::command_line::bad(prog, why)); };
  CLI::App app{"", prog};
  ::command_line::describe(
      app, std::string(usage) +
               "Exit status: 0 every check held; 1 a check failed or an error occurred; 2 bad command line.\n");
  bool self_test = false;
  std::vector<std::string> listen, connect;
  app.add_flag("--self-test", self_test);
  app.add_option("--listen", listen)->expected(2);
  app.add_option("--connect", connect)->expected(2);
  app.add_option("--address", out.address);
  std::vector<std::pair<std::string_view, unsigned>> roles{{"--address", in_self_test}};  // options and their roles
  for (const numeric_option& o : options) {
    add_numeric(app, o);
    roles.emplace_back(o.name, o.roles);
  }
  for (const flag_option& f : flags) {
    app.add_flag(std::string(f.name), *f.value);
    roles.emplace_back(f.name, f.roles);
  }
  if (const std::optional<int> status = ::command_line::parse(app, argc, argv)) return status;
  if (self_test + !listen.empty() + !connect.empty() != 1)
    return bad(self_test || !listen.empty() || !connect.empty()
                   ? "give one of --self-test, --listen and --connect"
                   : "say what to run: --self-test, --listen ADDR PORT or --connect ADDR PORT");
  if (!self_test) {
    const std::vector<std::string>& where = listen.empty() ? connect : listen;
    const char* const option = listen.empty() ? "--connect" : "--listen";
    if (where.size() != 2)  // CLI11 hands over what it found; one value is not an address and a port
      return bad(std::string(option) + " takes ADDR PORT, and the " +
                 (where.empty() ? "address and the port are" : "port is") + " missing: e.g. " + option +
                 " 10.77.0.1 7471");
    out.mode = listen.empty() ? role::connect : role::listen;
    out.address = where[0];
    if (const auto why = parse_port(where[1], 1, out.port)) return bad(*why);
  }
  for (const auto& [name, in] : roles)
    if (app.count(std::string(name)))
      if (const auto why = check_role(name, in, out.mode)) return bad(*why);
  if (const auto why = check_address(out.address)) return bad(*why);
  return std::nullopt;
}

/// The body of an example's `main`: parses the command line (as `parse_command_line`), then runs `run(cmd)`.
/// An exception escaping it is printed as `name: what`. @returns the exit status.
template <class Run>
int run_main(int argc, char** argv, const char* name, std::string_view usage,
             std::initializer_list<numeric_option> options, std::initializer_list<flag_option> flags, Run run) {
  command_line cmd;
  if (const std::optional<int> status = parse_command_line(argc, argv, usage, cmd, options, flags)) return *status;
  try {
    return run(cmd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

/// As above, with numeric options only.
template <class Run>
int run_main(int argc, char** argv, const char* name, std::string_view usage,
             std::initializer_list<numeric_option> options, Run run) {
  return run_main(argc, argv, name, usage, options, {}, std::move(run));
}

}  // namespace example
