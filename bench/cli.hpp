#pragma once
// The command line of the bench binaries, parsed by CLI11 (coverbs_support/command_line.hpp): numbers and sizes are
// checked, never clamped, and a bad one ends the program with a message naming the option (exit status 2).
#include <coverbs_support/command_line.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace bench {

/// Makes --help of `app` (a CLI11 application named after the benchmark) print "usage: PROG USAGE" and
/// `about`.
inline void describe(CLI::App& app, const char* usage, const char* about) {
  command_line::describe(app, "usage: " + app.get_name() + " " + usage + "\n" + about + "\n");
}

/// Parses the command line; exits with status 0 after --help and 2 on bad input.
inline void parse(CLI::App& app, int argc, char** argv) {
  if (const auto status = command_line::parse(app, argc, argv)) std::exit(*status);
}

/// Ends the program for a bad combination found after parsing (exit status 2).
[[noreturn]] inline void usage_error(const CLI::App& app, const std::string& why) {
  std::exit(command_line::bad(app.get_name(), why));
}

/// Ends the program (exit status 1) when `bytes` of registered memory for `what` cannot fit in physical
/// memory, before anything is allocated or opened.
inline void check_fits(const char* prog, const char* what, std::uint64_t bytes, const std::string& flag,
                       std::uint64_t flag_value) {
  if (const auto why = size_argument::exceeds_memory(what, bytes, flag, flag_value)) {
    std::fprintf(stderr, "%s: %s\n", prog, why->c_str());
    std::exit(1);
  }
}

}  // namespace bench
