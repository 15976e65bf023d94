#include "registration_commands.hpp"
#include <coverbs_support/command_line.hpp>
#include <coverbs_support/json_output.hpp>
#include <coverbs_support/statistics.hpp>

#include <coverbs/buffer_pool.hpp>
#include <coverbs/coverbs.hpp>
#include <coverbs/registration_cache.hpp>
#include <coverbs/registration_service.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace coverbs::cli {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr auto rights = access::local_write | access::remote_read | access::remote_write;

/// Sizes on the command line: 1 byte to 64 GiB (the memory is touched and registered, so it must fit in
/// physical memory too: see `fits`).
constexpr std::uint64_t max_size = std::uint64_t{64} << 30;

/// `--size A..B` (or one size A): both ends a size (command_line::size), from small to large.
CLI::Validator size_range() {
  return {[](std::string& text) -> std::string {
            const auto dots = text.find("..");
            const std::string lo = text.substr(0, dots), hi = dots == std::string::npos ? lo : text.substr(dots + 2);
            for (const std::string& end : {lo, hi})
              if (!size_argument::parse(end, 1, max_size)) return size_argument::expected(end, 1, max_size);
            if (*size_argument::parse(lo, 1, max_size) > *size_argument::parse(hi, 1, max_size))
              return "the range must go from small to large, e.g. 4K..1G (got '" + text + "')";
            return {};
          },
          "A..B", "size_range"};
}

/// A percentile: a number in (0, 100].
CLI::Validator percentile_value() {
  return {[](std::string& text) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(text.c_str(), &end);
            if (text.empty() || *end || !(x > 0 && x <= 100))
              return "takes numbers in (0, 100] separated by commas, e.g. 50,99,99.9 (got '" + text + "')";
            return {};
          },
          "P", "percentile"};
}

/// Refuses (before any device is opened) a size that cannot be pinned on this machine.
void fits(std::size_t bytes, const char* what, const char* option) {
  if (const auto why = size_argument::exceeds_memory(what, bytes, option, bytes)) throw std::runtime_error(*why);
}

std::string human(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0)
    bytes /= 1024, ++u;
  return std::to_string(bytes) + " " + units[u];
}

double us_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}

/// Anonymous, touched memory (registration then measures pinning, not page faults).
struct mapping {
  std::byte* p = nullptr;
  std::size_t n = 0;
  explicit mapping(std::size_t size) : n(size) {
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
      throw std::runtime_error("cannot map " + human(size) + " of memory (" + std::strerror(errno) +
                               "): choose a smaller --size");
    p = static_cast<std::byte*>(m);
    std::memset(p, 1, size);
  }
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() { ::munmap(p, n); }
  std::span<std::byte> span(std::size_t size) const { return {p, size}; }
};

/// "[#####     ] 3/10 64 MiB" on stderr, redrawn in place on a terminal.
void progress(std::size_t done, std::size_t total, const std::string& what) {
  constexpr int width = 30;
  const int filled = static_cast<int>(width * done / std::max<std::size_t>(total, 1));
  const bool tty = ::isatty(STDERR_FILENO);
  std::fprintf(stderr, "%s[%.*s%*s] %zu/%zu %s%s", tty ? "\r" : "", filled, "##############################",
               width - filled, "", done, total, what.c_str(), tty ? "   " : "\n");
  if (tty && done == total) std::fprintf(stderr, "\n");
}

} // namespace

const char* const reg_latency_usage =
    "usage: coverbs reg-latency [--size 4K..1G] [--percentiles 50,99,99.9] [--iters N] [--device NAME] [--json]\n"
    "  registration latency by size: synchronous ibv_reg_mr, through the worker pool, a registration-cache\n"
    "  hit, a pool allocation; sizes from A to B step by x4 (1 byte to 64G, within physical memory)\n";
const char* const stress_usage = "usage: coverbs stress [--size 1G] [--count N] [--threads T] [--device NAME]\n"
                                 "  register and deregister the same memory from T threads, N registrations in all;\n"
                                 "  failures by errno (--size: 1 byte to 64G, within physical memory)\n";

namespace {

struct reg_latency_options {
  std::size_t lo = 4096, hi = std::size_t{1} << 30;
  std::vector<double> percentiles{50, 99, 99.9};
  unsigned long iters = 0;
  std::string name;
  bool json = false;
};

struct stress_options {
  std::size_t size = std::size_t{1} << 30;
  unsigned long count = 100, threads = 4;
  std::string name;
};

int reg_latency(const reg_latency_options& o);
int stress(const stress_options& o);

/// Runs `command` and turns what it throws into a message on stderr: "coverbs NAME: ...", exit status 1.
template <class Command>
int report_errors(const char* name, Command command) try {
  return command();
} catch (const std::runtime_error& e) {
  std::fprintf(stderr, "coverbs %s: %s\n", name, e.what());
  return 1;
} catch (const std::bad_alloc&) {
  std::fprintf(stderr, "coverbs %s: out of memory: %s; choose a smaller --size\n", name,
               size_argument::limits().c_str());
  return 1;
}

} // namespace

std::function<int()> add_reg_latency(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("reg-latency");
  command_line::describe(*sub, reg_latency_usage);
  auto o = std::make_shared<reg_latency_options>();
  sub->add_option_function<std::string>("--size", [o](const std::string& v) {
       const auto dots = v.find("..");
       o->lo = *size_argument::parse(v.substr(0, dots), 1, max_size);
       o->hi = dots == std::string::npos ? o->lo : *size_argument::parse(v.substr(dots + 2), 1, max_size);
     })->check(size_range());
  sub->add_option("--percentiles", o->percentiles)->delimiter(',')->check(percentile_value());
  sub->add_option("--iters", o->iters)->transform(command_line::count(1, 100000));
  sub->add_option("--device", o->name);
  sub->add_flag("--json", o->json);
  return [o] { return report_errors("reg-latency", [&] { return reg_latency(*o); }); };
}

std::function<int()> add_stress(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("stress");
  command_line::describe(*sub, stress_usage);
  auto o = std::make_shared<stress_options>();
  sub->add_option("--size", o->size)->transform(command_line::size(1, max_size));
  sub->add_option("--count", o->count)->transform(command_line::count(1, 100000000));
  sub->add_option("--threads", o->threads)->transform(command_line::count(1, 1024));
  sub->add_option("--device", o->name);
  return [o] { return report_errors("stress", [&] { return stress(*o); }); };
}

namespace {

int reg_latency(const reg_latency_options& o) {
  const auto [lo, hi, percentiles, iters, name, json] = o;
  fits(hi, "the memory to register", "--size");

  device dev = device::open(name);
  protection_domain pd(dev);
  boost::asio::io_context io;
  registration_service service(io.get_executor(), {.threads = 2});
  registration_cache cache(service, {.max_entries = 64, .max_bytes_pinned = std::size_t{4} << 30, .monitor = false});
  std::vector<std::size_t> sizes;
  for (std::size_t s = lo; s < hi; s = s > hi / 4 ? hi : s * 4) // never past hi: no overflow
    sizes.push_back(s);
  sizes.push_back(hi);
  pool_options po;
  po.size_classes = {4096, 65536, std::size_t{1} << 20};
  buffer_pool pool(service, pd, po);
  mapping memory(hi);
  const bool long_sweep = hi >= (std::size_t{64} << 20);

  json_output::json::array rows; // --json: one object per size and mode
  if (!json) {
    std::printf("%-10s %-6s", "size", "mode");
    for (double p : percentiles) {
      char label[32];
      std::snprintf(label, sizeof label, "p%g_us", p);
      std::printf(" %12s", label);
    }
    std::printf("\n");
  }
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::size_t size = sizes[k];
    if (long_sweep) progress(k, sizes.size(), human(size));
    const unsigned long n = iters                              ? iters
                            : size >= (std::size_t{256} << 20) ? 5
                            : size >= (std::size_t{16} << 20)  ? 20
                                                               : 100;
    std::map<std::string, std::vector<double>> samples;
    for (unsigned long i = 0; i < n; ++i) {
      auto t = clock_type::now();
      {
        memory_region mr(pd, memory.span(size), rights);
        samples["sync"].push_back(us_since(t));
      }
      t = clock_type::now();
      memory_region got;
      reg_mr(service, pd, memory.span(size), rights, [&](error_code ec, memory_region r) {
        throw_on_error(ec, "reg_mr");
        samples["async"].push_back(us_since(t));
        got = std::move(r);
      });
      io.restart();
      io.run();
    }
    std::optional<shared_region> warm;
    cache.async_acquire(pd, memory.span(size), rights, [&](error_code ec, shared_region r) {
      throw_on_error(ec, "registration_cache::async_acquire");
      warm = std::move(r);
    });
    io.restart();
    io.run();
    for (unsigned long i = 0; i < n; ++i) {
      const auto t = clock_type::now();
      if (!cache.lookup(pd, memory.span(size), rights)) throw std::runtime_error("the cache lost an entry in use");
      samples["cache"].push_back(us_since(t));
      if (size <= po.size_classes.back()) {
        const auto t2 = clock_type::now();
        auto b = pool.try_allocate(size);
        samples["pool"].push_back(us_since(t2));
        if (!b) throw std::runtime_error("the pool ran dry");
      }
    }
    cache.invalidate(memory.span(size));
    for (const char* mode : {"sync", "async", "cache", "pool"}) {
      const auto& v = samples[mode];
      if (v.empty()) continue;
      if (json) {
        json_output::json::object row{{"bytes", size}, {"mode", mode}, {"samples", v.size()}};
        for (double p : percentiles) {
          char key[32];
          std::snprintf(key, sizeof key, "p%g_us", p);
          row[key] = json_output::rounded(statistics::percentile(v, p), 3);
        }
        rows.push_back(std::move(row));
      } else {
        std::printf("%-10s %-6s", human(size).c_str(), mode);
        for (double p : percentiles)
          std::printf(" %12.3f", statistics::percentile(v, p));
        std::printf("\n");
      }
    }
    std::fflush(stdout);
  }
  if (long_sweep) progress(sizes.size(), sizes.size(), "done");
  if (json) json_output::print(rows);
  return 0;
}

int stress(const stress_options& o) {
  const auto [size, count, threads, name] = o;
  fits(size, "the memory to register", "--size");
  device dev = device::open(name);
  protection_domain pd(dev);
  mapping memory(size); // every thread registers the same memory: one region per registration
  std::atomic<unsigned long> next{0};
  std::mutex mutex;
  std::map<std::string, unsigned long> failures;
  std::vector<double> latencies;
  const auto start = clock_type::now();
  // Progress, a line per phase on stderr (stdout keeps the report).
  std::fprintf(stderr, "coverbs stress: registering %s %lu times from %lu threads\n", human(size).c_str(), count,
               threads);
  boost::asio::thread_pool pool(threads); // one registering task per thread of the pool
  for (unsigned long t = 0; t < threads; ++t)
    boost::asio::post(pool, [&] {
      std::vector<double> mine;
      std::map<std::string, unsigned long> failed;
      while (next.fetch_add(1) < count) {
        error_code ec;
        const auto t0 = clock_type::now();
        memory_region mr(pd, memory.span(size), rights, ec);
        if (ec) {
          const int err = ec.category() == boost::system::system_category() ? ec.value() : 0;
          const char* errno_name = err ? ::strerrorname_np(err) : nullptr;
          ++failed[(errno_name ? std::string(errno_name)
                               : ec.category().name() + std::string(":") + std::to_string(ec.value())) +
                   " (" + ec.message() + ")"];
          continue;
        }
        mine.push_back(us_since(t0));
      }
      std::lock_guard lock(mutex);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
      for (const auto& [k, v] : failed)
        failures[k] += v;
    });
  pool.join();
  const double seconds = us_since(start) / 1e6;
  std::fprintf(stderr, "coverbs stress: %lu registrations done in %.1f s\n", count, seconds);
  unsigned long failed = 0;
  for (const auto& [k, v] : failures)
    failed += v;
  std::printf("stress: %lu registrations of %s on %s from %lu threads in %.2f s\n", count, human(size).c_str(),
              dev.name().c_str(), threads, seconds);
  std::printf("  succeeded %zu, failed %lu", latencies.size(), failed);
  if (!latencies.empty()) {
    const statistics::summary st = statistics::summarize(latencies);
    std::printf("; register p50 %.1f us, p99 %.1f us, max %.1f us; %.2f GiB/s pinned", st.median, st.p99, st.max,
                static_cast<double>(latencies.size()) * static_cast<double>(size) / seconds / (1 << 30));
  }
  std::printf("\n");
  for (const auto& [k, v] : failures)
    std::printf("  %8lu  %s\n", v, k.c_str());
  return failed ? 1 : 0;
}

} // namespace

} // namespace coverbs::cli
