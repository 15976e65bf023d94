#pragma once
// Sizes on the command lines of the coverbs tool, the benchmarks and the examples: one parser (whole bytes,
// or a K, M, G or T suffix meaning a power of 1024), always bounded, and the errors to print when memory of
// the size asked for cannot be had. Header-only, no coverbs dependency.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace size_argument {

/// Parses "4096", "4K", "16M", "1G", "2T" (also "4KiB" and "4KB"; the unit in either case) and checks it
/// lies in [min, max]. Nothing for anything else: a sign ("-1" is not 2^64-1), spaces, other units, or a
/// value that overflows 64 bits.
inline std::optional<std::uint64_t> parse(std::string_view text, std::uint64_t min, std::uint64_t max) {
  const std::size_t digits = text.find_first_not_of("0123456789");
  const std::string_view number = text.substr(0, digits);
  std::string_view unit = digits == std::string_view::npos ? std::string_view{} : text.substr(digits);
  if (number.empty()) return std::nullopt;
  unsigned shift = 0;
  if (!unit.empty()) {
    const char u = static_cast<char>(unit.front() | 0x20); // lower case
    shift = u == 'k' ? 10 : u == 'm' ? 20 : u == 'g' ? 30 : u == 't' ? 40 : 0;
    if (!shift) return std::nullopt;
    unit.remove_prefix(1);
    if (unit == "i" || unit == "iB" || unit == "ib" || unit == "B" || unit == "b") unit = {};
    if (!unit.empty()) return std::nullopt;
  }
  std::uint64_t n = 0;
  for (const char c : number) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (n > (UINT64_MAX - d) / 10) return std::nullopt; // more than 64 bits
    n = n * 10 + d;
  }
  if (n > (max >> shift)) return std::nullopt; // also catches the shift overflowing
  const std::uint64_t bytes = n << shift;
  if (bytes < min || bytes > max) return std::nullopt;
  return bytes;
}

/// `bytes` as written on a command line: "64G" or "1536K" where a unit divides it, else "4097".
inline std::string text(std::uint64_t bytes) {
  for (const auto& [shift, unit] : {std::pair{40u, "T"}, std::pair{30u, "G"}, std::pair{20u, "M"}, std::pair{10u, "K"}})
    if (bytes != 0 && bytes % (std::uint64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
  return std::to_string(bytes);
}

/// `bytes` for a person: "64 GiB", "1.5 GiB", "512 B".
inline std::string human(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (u < 4 && v >= 1024)
    v /= 1024, ++u;
  char out[32];
  if (v == static_cast<double>(static_cast<std::uint64_t>(v)))
    std::snprintf(out, sizeof out, "%llu %s", static_cast<unsigned long long>(v), units[u]);
  else
    std::snprintf(out, sizeof out, "%.1f %s", v, units[u]);
  return out;
}

/// Why `got` was refused, to follow the option's name: "takes a size from 4K to 64G: bytes, or with a K, M
/// or G suffix (powers of 1024), e.g. 4096, 64K, 16M, 1G (got '-1')". The suffixes named are those a size
/// within the range can carry, the examples those within the range (the bounds themselves when none is).
inline std::string expected(std::string_view got, std::uint64_t min, std::uint64_t max) {
  static constexpr const char* letters[] = {"K", "M", "G", "T"};
  std::vector<std::string> suffixes;
  for (int k = 0; k < 4 && (std::uint64_t{1} << (10 * (k + 1))) <= max; ++k)
    suffixes.push_back(letters[k]);
  static constexpr std::pair<std::uint64_t, const char*> samples[] = {
      {4096, "4096"}, {64ull << 10, "64K"}, {16ull << 20, "16M"}, {1ull << 30, "1G"}};
  std::string examples;
  for (const auto& [bytes, said] : samples)
    if (bytes >= min && bytes <= max) examples += (examples.empty() ? "" : ", ") + std::string(said);
  if (examples.empty()) examples = min == max ? text(min) : text(min) + ", " + text(max);
  std::string with;
  for (std::size_t i = 0; i < suffixes.size(); ++i)
    with += (i == 0 ? "" : i + 1 == suffixes.size() ? " or " : ", ") + suffixes[i];
  return "takes a size from " + text(min) + " to " + text(max) + ": bytes" +
         (with.empty() ? std::string() : ", or with a " + with + " suffix (powers of 1024)") + ", e.g. " + examples +
         " (got '" + std::string(got) + "')";
}

/// Physical memory of this machine, in bytes (0 when unknown).
inline std::uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

/// The limits an allocation of `bytes` runs into: "this machine has 3.8 GiB of memory; RLIMIT_AS is 2 GiB".
inline std::string limits() {
  std::string out = "this machine has " + human(physical_memory()) + " of physical memory";
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    out += ", and the address space of this process is limited to " + human(as.rlim_cur) + " (RLIMIT_AS, ulimit -v)";
  return out;
}

/// The message for memory that cannot be had: "cannot allocate 64 GiB for the pool (--pool-size 64G): this
/// machine has 3.8 GiB of physical memory; choose a smaller --pool-size".
inline std::string cannot_allocate(std::string_view what, std::uint64_t bytes, std::string_view flag,
                                   std::uint64_t flag_value) {
  return "cannot allocate " + human(bytes) + " for " + std::string(what) + " (" + std::string(flag) + " " +
         text(flag_value) + "): " + limits() + "; choose a smaller " + std::string(flag);
}

/// Registered memory is pinned, so it must fit in physical memory, and in the address space this process
/// may have (RLIMIT_AS): the `cannot_allocate` message when `bytes` does not, else nothing. Checked before
/// allocating (an overcommitted allocation could succeed and the process be killed when it touches the pages).
inline std::optional<std::string> exceeds_memory(std::string_view what, std::uint64_t bytes, std::string_view flag,
                                                 std::uint64_t flag_value) {
  const std::uint64_t ram = physical_memory();
  rlimit as{};
  const bool limited = ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
  if ((ram == 0 || bytes <= ram) && (!limited || bytes <= as.rlim_cur)) return std::nullopt;
  return cannot_allocate(what, bytes, flag, flag_value);
}

} // namespace size_argument
