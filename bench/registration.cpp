// bench_registration: what asynchronous registration, the cache and the pool buy, in one run.
//
//   bench_registration [--device NAME] [--max-size 512M] [--stall-size 256M] [--workers batch|idle|normal] [--json]
//
// Figures (medians unless named otherwise):
//   reg_us_by_size               synchronous ibv_reg_mr of touched memory, 4 KiB .. --max-size
//   async_unblock_us_512mib      time the caller's loop is busy initiating reg_mr of --max-size bytes
//   async_total_us_512mib        time until that registration completes on the loop
//   loop_stall_p99_ms_sync       p99 lateness of a 1 ms timer while --stall-size registrations run back to
//   loop_stall_p99_ms_async      back on the same loop (sync) or through the workers (async)
//   cache_hit_ns                 registration_cache::lookup of a contained range (mean)
//   cache_miss_us_1mib           async_acquire of an uncached 1 MiB range, until completion
//   pool_alloc_ns                buffer_pool::try_allocate + return of a 4 KiB buffer (mean)
//   reg_2mib_aligned_vs_4kib_speedup  reg time of 64 MiB 4 KiB-aligned without THP / 2 MiB-aligned with THP
#include <coverbs/buffer_pool.hpp>
#include <coverbs/device.hpp>
#include <coverbs/registration_cache.hpp>
#include <coverbs/registration_service.hpp>

#include "cli.hpp"
#include <coverbs_support/json_output.hpp>
#include <coverbs_support/progress.hpp>
#include <coverbs_support/statistics.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;
using coverbs::error_code;
constexpr auto rights = coverbs::access::local_write | coverbs::access::remote_read | coverbs::access::remote_write;
constexpr std::size_t mib = std::size_t{1} << 20;

double us_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}

/// Touched anonymous memory; `offset` bytes past a 2 MiB boundary; THP asked for or refused.
struct arena {
  std::byte* base = nullptr;
  std::size_t total = 0;
  std::span<std::byte> span;
  arena(std::size_t size, std::size_t offset, bool thp) : total(size + 4 * mib) {
    void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::runtime_error(size_argument::cannot_allocate("the registered arena", total, "--max-size", size) +
                               " (mmap: " + std::strerror(errno) + ")");
    base = static_cast<std::byte*>(p);
    auto at = (reinterpret_cast<std::uintptr_t>(p) + 2 * mib - 1) & ~(2 * mib - 1);
    span = {reinterpret_cast<std::byte*>(at + offset), size};
    ::madvise(span.data(), size, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(span.data(), 1, size);
  }
  ~arena() { ::munmap(base, total); }
};

std::vector<double> time_sync_reg(coverbs::protection_domain& pd, std::span<std::byte> s, int iters) {
  std::vector<double> v;
  for (int i = 0; i < iters; ++i) {
    const auto t = clock_type::now();
    coverbs::memory_region mr(pd, s, rights);
    v.push_back(us_since(t));
  }
  return v;
}

/// p99 lateness (ms) of a 1 ms timer while `work` keeps the loop busy until it sets `done`.
template <typename Work>
double loop_stall_p99_ms(asio::io_context& io, Work work) {
  std::vector<double> late;
  bool done = false;
  asio::steady_timer timer(io);
  std::function<void()> arm = [&] {
    timer.expires_after(std::chrono::milliseconds(1));
    timer.async_wait([&](error_code) {
      late.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - timer.expiry()).count());
      if (!done) arm();
    });
  };
  arm();
  work(done);
  io.restart();
  io.run();
  return statistics::percentile(late, 99);
}

std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  const auto a = s.find('['), b = s.find(']');
  return a != std::string::npos && b != std::string::npos ? s.substr(a + 1, b - a - 1) : "unknown";
}

} // namespace

int main(int argc, char** argv) {
  std::string name;
  std::size_t max_size = 512 * mib, stall_size = 256 * mib;
  bool json = false;
  coverbs::worker_scheduling scheduling = coverbs::worker_scheduling::batch;
  std::string scheduling_name = "batch";
  const char* prog = "bench_registration";
  const char* usage = "[--device NAME] [--max-size 512M] [--stall-size 256M] [--workers batch|idle|normal] [--json]";
  CLI::App app{"", prog};
  bench::describe(app, usage,
                  "What asynchronous registration, the cache and the pool buy, in one run; see the source's header "
                  "for each figure.");
  app.add_option("--device", name);
  app.add_option("--max-size", max_size)->transform(command_line::size(4096, std::uint64_t{64} << 30));
  app.add_option("--stall-size", stall_size)->transform(command_line::size(4096, std::uint64_t{64} << 30));
  app.add_flag("--json", json);
  app.add_option("--workers", scheduling_name)->check(command_line::one_of({"normal", "batch", "idle"}));
  bench::parse(app, argc, argv);
  scheduling = scheduling_name == "normal" ? coverbs::worker_scheduling::normal
               : scheduling_name == "idle" ? coverbs::worker_scheduling::idle
                                           : coverbs::worker_scheduling::batch;
  stall_size = std::min(stall_size, max_size);
  bench::check_fits(prog, "the registered arena", max_size + 4 * mib, "--max-size", max_size);
  try {
    coverbs::device dev = coverbs::device::open(name);
    coverbs::protection_domain pd(dev);
    asio::io_context io;
    coverbs::registration_service service(io.get_executor(), {.threads = 2, .scheduling = scheduling});
    arena big(max_size, 0, true);

    progress::phases phase(prog, 7);
    phase.next("synchronous registration by size, 4 KiB to " + size_argument::text(max_size));
    // 1. synchronous registration by size
    std::vector<std::pair<std::size_t, double>> by_size;
    std::vector<std::size_t> sizes{4096, 65536, mib, 4 * mib, 16 * mib, 64 * mib, 256 * mib, 512 * mib};
    std::erase_if(sizes, [&](std::size_t s) { return s >= max_size; });
    sizes.push_back(max_size);
    for (std::size_t size : sizes) {
      const int iters = size >= 256 * mib ? 5 : size >= 16 * mib ? 10 : 30;
      by_size.emplace_back(size, statistics::median(time_sync_reg(pd, big.span.first(size), iters)));
    }

    phase.next("asynchronous registration of " + size_argument::text(max_size) + ", 9 times");
    // 2. asynchronous: how long the loop is busy, and how long until the result is back
    std::vector<double> unblock, total;
    for (int i = 0; i < 2; ++i) // warm up: the workers exist and have taken their scheduling policy
      coverbs::reg_mr(service, pd, big.span.first(4096), rights, [](error_code, coverbs::memory_region) {});
    io.run();
    for (int i = 0; i < 9; ++i) {
      const auto t = clock_type::now();
      coverbs::memory_region mr;
      coverbs::reg_mr(service, pd, big.span, rights, [&](error_code ec, coverbs::memory_region r) {
        if (ec) throw coverbs::system_error(ec, "reg_mr");
        total.push_back(us_since(t));
        mr = std::move(r);
      });
      unblock.push_back(us_since(t));
      io.restart();
      io.run();
    }

    phase.next("loop stalls: 2 x 8 registrations of " + size_argument::text(stall_size));
    // 3. loop stalls: back-to-back registrations of stall_size bytes on the loop vs through the workers
    constexpr int rounds = 8;
    const auto stall = big.span.first(stall_size);
    const double stall_sync = loop_stall_p99_ms(io, [&](bool& done) {
      for (int i = 0; i < rounds; ++i)
        asio::post(io, [&, i] {
          coverbs::memory_region mr(pd, stall, rights); // registers and deregisters on the loop
          if (i == rounds - 1) done = true;
        });
    });
    const double stall_async = loop_stall_p99_ms(io, [&](bool& done) {
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            for (int i = 0; i < rounds; ++i) {
              auto mr = co_await coverbs::reg_mr(service, pd, stall, rights);
              co_await coverbs::dereg(service, std::move(mr));
            }
            done = true;
          },
          asio::detached);
    });

    phase.next("registration cache: 20 misses, 200000 hits");
    // 4. cache
    coverbs::registration_cache cache(service);
    std::vector<double> miss;
    for (int i = 0; i < 20; ++i) {
      const auto range = big.span.subspan(static_cast<std::size_t>(i) * 2 * mib, mib);
      const auto t = clock_type::now();
      coverbs::shared_region r;
      cache.async_acquire(pd, range, rights, [&](error_code ec, coverbs::shared_region got) {
        if (ec) throw coverbs::system_error(ec, "async_acquire");
        miss.push_back(us_since(t));
        r = std::move(got);
      });
      io.restart();
      io.run();
    }
    constexpr int hit_iters = 200000;
    const auto hit_range = big.span.subspan(2 * mib + 4096, 8192);
    auto t = clock_type::now();
    for (int i = 0; i < hit_iters; ++i)
      if (!cache.lookup(pd, hit_range, rights)) throw std::runtime_error("cache lookup missed");
    const double hit_ns = us_since(t) * 1000 / hit_iters;

    phase.next("buffer pool: 200000 allocations");
    // 5. pool
    coverbs::pool_options po;
    po.size_classes = {4096};
    po.arena_size = 8 * mib;
    coverbs::buffer_pool pool(service, pd, po);
    constexpr int pool_iters = 200000;
    t = clock_type::now();
    for (int i = 0; i < pool_iters; ++i)
      if (!pool.try_allocate(4096)) throw std::runtime_error("pool ran dry");
    const double pool_ns = us_since(t) * 1000 / pool_iters;

    phase.next("alignment and transparent huge pages");
    // 6. alignment: 2 MiB-aligned with THP vs 4 KiB-aligned without, and 2 MiB-aligned without THP
    const std::size_t align_size = std::min<std::size_t>(64 * mib, max_size);
    double aligned_thp = 0, aligned_plain = 0, small_pages = 0;
    {
      arena a(align_size, 0, true), b(align_size, 0, false), c(align_size, 4096, false);
      aligned_thp = statistics::median(time_sync_reg(pd, a.span, 15));
      aligned_plain = statistics::median(time_sync_reg(pd, b.span, 15));
      small_pages = statistics::median(time_sync_reg(pd, c.span, 15));
    }

    phase.next("done");
    const double unblock_us = statistics::median(unblock), total_us = statistics::median(total);
    if (json) {
      json_output::json::object by_size_us;
      for (const auto& [size, us] : by_size)
        by_size_us[std::to_string(size)] = json_output::rounded(us, 1);
      const auto r1 = [](double x) { return json_output::rounded(x, 1); };
      json_output::print(json_output::json::object{
          {"device", dev.name()},
          {"workers", scheduling_name},
          {"reg_us_by_size", std::move(by_size_us)},
          {"async_size_bytes", max_size},
          {"async_unblock_us_512mib", json_output::rounded(unblock_us, 2)},
          {"async_total_us_512mib", r1(total_us)},
          {"stall_size_bytes", stall_size},
          {"loop_stall_p99_ms_sync", json_output::rounded(stall_sync, 3)},
          {"loop_stall_p99_ms_async", json_output::rounded(stall_async, 3)},
          {"cache_hit_ns", r1(hit_ns)},
          {"cache_miss_us_1mib", r1(statistics::median(miss))},
          {"pool_alloc_ns", r1(pool_ns)},
          {"align_size_bytes", align_size},
          {"thp", thp_mode()},
          {"reg_us_2mib_aligned_thp", r1(aligned_thp)},
          {"reg_us_2mib_aligned_no_thp", r1(aligned_plain)},
          {"reg_us_4kib_aligned_no_thp", r1(small_pages)},
          {"reg_2mib_aligned_vs_4kib_speedup", json_output::rounded(small_pages / aligned_thp, 3)}});
    } else {
      std::printf("%-14s %14s\n", "bytes", "sync_reg_us");
      for (const auto& [size, us] : by_size)
        std::printf("%-14zu %14.1f\n", size, us);
      std::printf("\nasync reg_mr of %zu bytes: loop busy %.2f us, result after %.1f us\n", max_size, unblock_us,
                  total_us);
      std::printf("1 ms timer p99 lateness, %zu-byte registrations back to back: sync %.3f ms, async %.3f ms\n",
                  stall_size, stall_sync, stall_async);
      std::printf("cache hit %.1f ns, cache miss (1 MiB) %.1f us, pool alloc+free %.1f ns\n", hit_ns,
                  statistics::median(miss), pool_ns);
      std::printf("reg of %zu bytes (THP %s): 2 MiB-aligned+THP %.1f us, 2 MiB-aligned no THP %.1f us, "
                  "4 KiB-aligned no THP %.1f us: speedup %.3fx\n",
                  align_size, thp_mode().c_str(), aligned_thp, aligned_plain, small_pages, small_pages / aligned_thp);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_registration: %s\n", e.what());
    return 1;
  }
  return 0;
}
