#pragma once
// Argument parsing shared by the bench binaries: numbers and sizes are checked, never clamped, and a bad
// one ends the program with a usage message (exit status 2).
#include "../tools/size_argument.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bench {

[[noreturn]] inline void usage_error(const char* prog, const std::string& why, const char* usage) {
  std::fprintf(stderr, "%s: %s\nusage: %s %s\n", prog, why.c_str(), prog, usage);
  std::exit(2);
}

/// A whole number in [min, max], decimal; "flag takes ..." on anything else.
inline long long parse_count(const char* prog, const char* usage, const std::string& flag, const std::string& text,
                             long long min, long long max) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || errno || *end || v < min || v > max) // no sign, no spaces
    usage_error(prog,
                flag + " takes a whole number from " + std::to_string(min) + " to " + std::to_string(max) + " (got '" +
                    text + "')",
                usage);
  return v;
}

/// A size in bytes with an optional K, M, G or T suffix (powers of 1024), in [min, max]
/// (tools/size_argument.hpp: no sign, no overflow).
inline std::uint64_t parse_size(const char* prog, const char* usage, const std::string& flag, const std::string& text,
                                std::uint64_t min, std::uint64_t max) {
  const auto n = size_argument::parse(text, min, max);
  if (!n) usage_error(prog, size_argument::expected(flag, text, min, max), usage);
  return *n;
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

/// A comma-separated list of sizes.
inline std::vector<std::uint64_t> parse_sizes(const char* prog, const char* usage, const std::string& flag,
                                              const std::string& list, std::uint64_t min, std::uint64_t max) {
  std::vector<std::uint64_t> out;
  for (std::size_t p = 0; p <= list.size();) {
    const std::size_t q = std::min(list.find(',', p), list.size());
    out.push_back(parse_size(prog, usage, flag, list.substr(p, q - p), min, max));
    p = q + 1;
  }
  return out;
}


/// Walks a command line: `next()` moves to each argument (`flag()`), `value()` takes the word after it —
/// a usage error (exit status 2) when there is none — and `count` / `size` check that word.
class args {
public:
  args(const char* prog, const char* usage, int argc, char** argv) : prog_(prog), usage_(usage), argc_(argc), argv_(argv) {}

  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
  }
  const std::string& flag() const noexcept { return flag_; }
  bool is(const char* name) const { return flag_ == name; }
  bool is_help() const { return flag_ == "--help" || flag_ == "-h"; }
  std::string value() {
    if (i_ + 1 >= argc_) fail(flag_ + " needs a value");
    return argv_[++i_];
  }
  long long count(long long min, long long max) { return parse_count(prog_, usage_, flag_, value(), min, max); }
  std::uint64_t size(std::uint64_t min, std::uint64_t max) { return parse_size(prog_, usage_, flag_, value(), min, max); }
  [[noreturn]] void fail(const std::string& why) const { usage_error(prog_, why, usage_); }
  [[noreturn]] void unknown() const { fail("unknown argument '" + flag_ + "'"); }
  /// Prints the usage line and `about`, then exits with status 0 (for --help).
  [[noreturn]] void help(const char* about) const {
    std::printf("usage: %s %s\n%s\n", prog_, usage_, about);
    std::exit(0);
  }

private:
  const char* prog_;
  const char* usage_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

}  // namespace bench
