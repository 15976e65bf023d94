// bench_reg_mr: synchronous ibv_reg_mr + ibv_dereg_mr latency by size, through coverbs::memory_region
// and through raw verbs in the same run.
//
//   bench_reg_mr [--device NAME] [--sizes 4K,64K,1M,...] [--iters N] [--json]
//
// Sizes take K/M/G suffixes (powers of 1024). Each size registers a fresh, touched buffer N times
// (default 20) and reports the median and p99 of registration and deregistration in microseconds.
#include <coverbs/coverbs.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
  std::size_t mul = 1;
  if (*end == 'K' || *end == 'k')
    mul = 1u << 10, ++end;
  else if (*end == 'M' || *end == 'm')
    mul = 1u << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    mul = 1u << 30, ++end;
  if (end == s.c_str() || *end != '\0' || n == 0) {
    std::fprintf(stderr, "bench_reg_mr: bad size '%s' (use e.g. 4K, 1M, 512M)\n", s.c_str());
    std::exit(2);
  }
  return n * mul;
}

struct stats {
  double median = 0, p99 = 0;
};

stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))];
  };
  return {at(0.5), at(0.99)};
}

double us_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string name;
  std::vector<std::size_t> sizes;
  int iters = 20;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      name = argv[++i];
    else if (a == "--iters" && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json")
      json = true;
    else if (a == "--sizes" && i + 1 < argc) {
      std::string list = argv[++i];
      for (std::size_t p = 0; p <= list.size();) {
        const std::size_t q = std::min(list.find(',', p), list.size());
        sizes.push_back(parse_size(list.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_reg_mr [--device NAME] [--sizes 4K,1M,...] [--iters N] [--json]\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};

  try {
    coverbs::device dev = coverbs::device::open(name);
    coverbs::protection_domain pd(dev);
    const auto rights = coverbs::access::local_write | coverbs::access::remote_read | coverbs::access::remote_write;
    if (json)
      std::printf("{\"device\": \"%s\", \"iters\": %d, \"results\": [", dev.name().c_str(), iters);
    else
      std::printf("%12s %14s %14s %14s %14s %14s\n", "bytes", "reg_p50_us", "reg_p99_us", "dereg_p50_us",
                  "raw_reg_p50_us", "raw_dereg_p50");
    bool first = true;
    for (std::size_t size : sizes) {
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
      const stats r = summarize(reg), d = summarize(dereg), rr = summarize(raw_reg), rd = summarize(raw_dereg);
      if (json)
        std::printf("%s\n  {\"bytes\": %zu, \"reg_p50_us\": %.2f, \"reg_p99_us\": %.2f, \"dereg_p50_us\": %.2f, "
                    "\"raw_reg_p50_us\": %.2f, \"raw_dereg_p50_us\": %.2f}",
                    first ? "" : ",", size, r.median, r.p99, d.median, rr.median, rd.median);
      else
        std::printf("%12zu %14.2f %14.2f %14.2f %14.2f %14.2f\n", size, r.median, r.p99, d.median, rr.median,
                    rd.median);
      first = false;
    }
    if (json) std::printf("\n]}\n");
  } catch (const coverbs::system_error& e) {
    std::fprintf(stderr, "bench_reg_mr: %s\n", e.what());
    return 1;
  }
  return 0;
}
