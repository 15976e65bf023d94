// bench_reg_mr: synchronous ibv_reg_mr + ibv_dereg_mr latency by size, through coverbs::memory_region
// and through raw verbs in the same run.
//
//   bench_reg_mr [--device NAME] [--sizes 4K,64K,1M,...] [--iters N] [--json]
//
// Sizes take K/M/G suffixes (powers of 1024). Each size registers a fresh, touched buffer N times
// (default 20) and reports the median and p99 of registration and deregistration in microseconds.
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include <coverbs_support/json_output.hpp>
#include <coverbs_support/statistics.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* usage = "[--device NAME] [--sizes 4K,1M,...] [--iters N] [--json]";
  std::string name;
  std::vector<std::uint64_t> sizes;
  int iters = 20;
  bool json = false;
  CLI::App app{"", "bench_reg_mr"};
  bench::describe(app, usage, "ibv_reg_mr and ibv_dereg_mr latency by size, coverbs against raw verbs.");
  app.add_option("--device", name);
  app.add_option("--iters", iters)->transform(command_line::count(1, 1'000'000));
  app.add_option("--sizes", sizes)->delimiter(',')->transform(command_line::size(1, 64ull << 30));
  app.add_flag("--json", json);
  bench::parse(app, argc, argv);
  if (sizes.empty()) sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
  for (const std::uint64_t size : sizes)
    bench::check_fits("bench_reg_mr", "the registered buffer", size, "--sizes", size);
  std::uint64_t allocating = 0;

  try {
    coverbs::device dev = coverbs::device::open(name);
    coverbs::protection_domain pd(dev);
    const auto rights = coverbs::access::local_write | coverbs::access::remote_read | coverbs::access::remote_write;
    json_output::json::array results;
    if (!json)
      std::printf("%12s %14s %14s %14s %14s %14s\n", "bytes", "reg_p50_us", "reg_p99_us", "dereg_p50_us",
                  "raw_reg_p50_us", "raw_dereg_p50");
    for (const std::uint64_t size : sizes) {
      allocating = size;
      std::vector<std::byte> buffer(size, std::byte{1});  // touched, so registration measures pinning only
      std::vector<double> reg, dereg, raw_reg, raw_dereg;
      for (int i = 0; i < iters; ++i) {
        auto t = clock_type::now();
        coverbs::memory_region mr(pd, buffer, rights);
        reg.push_back(us_since(t));
        t = clock_type::now();
        mr.deregister();
        dereg.push_back(us_since(t));

        t = clock_type::now();
        ibv_mr* raw = ibv_reg_mr(pd.native_handle(), buffer.data(), size, coverbs::to_verbs(rights));
        raw_reg.push_back(us_since(t));
        if (!raw) throw coverbs::system_error(coverbs::verbs_null_result(raw), "ibv_reg_mr (raw)");
        t = clock_type::now();
        ibv_dereg_mr(raw);
        raw_dereg.push_back(us_since(t));
      }
      const statistics::summary r = statistics::summarize(reg), d = statistics::summarize(dereg),
                                rr = statistics::summarize(raw_reg), rd = statistics::summarize(raw_dereg);
      const auto r2 = [](double x) { return json_output::rounded(x, 2); };
      if (json)
        results.push_back(json_output::json::object{{"bytes", size},
                                                    {"reg_p50_us", r2(r.median)},
                                                    {"reg_p99_us", r2(r.p99)},
                                                    {"dereg_p50_us", r2(d.median)},
                                                    {"raw_reg_p50_us", r2(rr.median)},
                                                    {"raw_dereg_p50_us", r2(rd.median)}});
      else
        std::printf("%12zu %14.2f %14.2f %14.2f %14.2f %14.2f\n", size, r.median, r.p99, d.median, rr.median,
                    rd.median);
    }
    if (json)
      json_output::print(
          json_output::json::object{{"device", dev.name()}, {"iters", iters}, {"results", std::move(results)}});
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "bench_reg_mr: %s\n",
                 size_argument::cannot_allocate("the registered buffer", allocating, "--sizes", allocating).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_reg_mr: %s\n", e.what());
    return 1;
  }
  return 0;
}
