#include <coverbs/detail/wr_node.hpp>
#include <coverbs/metrics.hpp>

#include "core/metrics.hpp"
#include "core/thread_counters.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

namespace coverbs {
namespace detail {

namespace {

bool switched_on_by_environment() noexcept {
  const char* v = std::getenv("COVERBS_METRICS");
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace

std::atomic<bool> metrics_switch{switched_on_by_environment()};

namespace {

using metrics::histogram;
using metrics::op_kind_count;

// The per-thread counters, one flat array: the `metric`s, then per operation kind posted / completed /
// failed / bytes, the wc_errc and errc values, and the two histograms (buckets, count, sum).
constexpr std::size_t simple_count = static_cast<std::size_t>(metric::count_);
constexpr std::size_t ops_at = simple_count;
constexpr std::size_t wc_at = ops_at + 4 * op_kind_count;
constexpr std::size_t wc_count = std::tuple_size_v<decltype(metrics::data_path_counters::wc_errors)>;
constexpr std::size_t errc_at = wc_at + wc_count;
constexpr std::size_t errc_count = std::tuple_size_v<decltype(metrics::data_path_counters::errc_errors)>;
constexpr std::size_t histogram_size = histogram::bucket_count + 2;
constexpr std::size_t per_poll_at = errc_at + errc_count;
constexpr std::size_t latency_at = per_poll_at + histogram_size;
constexpr std::size_t counter_count = latency_at + histogram_size;

struct metrics_tag {};
using blocks = thread_counters<metrics_tag, counter_count>;

void add(std::size_t i, std::uint64_t delta = 1) noexcept { blocks::add(i, delta); }

void add_to_histogram(std::size_t at, std::uint64_t value) noexcept {
  const std::size_t bucket =
      value <= 1 ? 0 : std::min<std::size_t>(std::bit_width(value) - 1, histogram::bucket_count - 1);
  blocks::update([&](blocks::counters v) {
    blocks::bump(v, at + bucket);
    blocks::bump(v, at + histogram::bucket_count);
    blocks::bump(v, at + histogram::bucket_count + 1, value);
  });
}

metrics::op_kind kind_of(const wr_node* n) noexcept {
  using metrics::op_kind;
  if (n->is_recv) return op_kind::recv;
  switch (n->wr.send.opcode) {
  case IBV_WR_RDMA_WRITE:
  case IBV_WR_RDMA_WRITE_WITH_IMM: return op_kind::write;
  case IBV_WR_RDMA_READ: return op_kind::read;
  case IBV_WR_ATOMIC_CMP_AND_SWP:
  case IBV_WR_ATOMIC_FETCH_AND_ADD: return op_kind::atomic;
  // A type-1 window's invalidation is a zero-length bind.
  case IBV_WR_BIND_MW: return n->wr.send.bind_mw.bind_info.length == 0 ? op_kind::invalidate : op_kind::bind;
  // rebind_mw's chain: LOCAL_INV, then the bind.
  case IBV_WR_LOCAL_INV: return n->credits == 2 ? op_kind::bind : op_kind::invalidate;
  default: return op_kind::send;
  }
}

std::uint64_t bytes_of(metrics::op_kind kind, const wr_node* n, const ibv_wc* wc) noexcept {
  using metrics::op_kind;
  switch (kind) {
  case op_kind::recv: return wc ? wc->byte_len : 0;
  case op_kind::atomic: return 8;
  case op_kind::bind:
  case op_kind::invalidate: return 0;
  default: return n->sge.length;
  }
}

void fill(metrics::histogram& h, const std::uint64_t* at) noexcept {
  std::copy_n(at, histogram::bucket_count, h.buckets.begin());
  h.count = at[histogram::bucket_count];
  h.sum = at[histogram::bucket_count + 1];
}

/// The enrolled readers, and what withdrawn ones had counted.
struct source_registry {
  std::mutex mutex;
  std::list<metrics_reader> live;
  metrics::snapshot retired;
};
source_registry& sources() {
  static auto* r = new source_registry;  // never destroyed: sources may withdraw during static destruction
  return *r;
}

}  // namespace

void note(metric m, std::uint64_t delta) noexcept { add(static_cast<std::size_t>(m), delta); }

void note_finished(const wr_node* n, const error_code& ec, const ibv_wc* wc, bool posted, queue_counts* own) noexcept {
  const metrics::op_kind kind = kind_of(n);
  const std::size_t row = 4 * static_cast<std::size_t>(kind);  // the kind's posted, completed, failed, bytes
  std::size_t error_at = 0;  // the error's counter, for a failure
  if (ec) {
    const auto value = static_cast<std::size_t>(ec.value());
    error_at = ec.category() == wc_category() && value < wc_count ? wc_at + value
               : ec.category() == coverbs_category()              ? errc_at + std::min(value, errc_count - 1)
                                                                  : static_cast<std::size_t>(metric::other_errors);
  }
  const std::uint64_t bytes = ec ? 0 : bytes_of(kind, n, wc);
  // The same columns in the thread's block (from ops_at) and in the queue's own counts (from 0).
  const auto count = [&](auto&& bump, std::size_t at) {
    if (posted) bump(at + row, 1);
    if (!ec) {
      bump(at + row + 1, 1);
      bump(at + row + 3, bytes);
    } else {
      bump(at + row + 2, 1);
    }
  };
  blocks::update([&](blocks::counters v) {
    count([&](std::size_t i, std::uint64_t d) { blocks::bump(v, i, d); }, ops_at);
    if (ec) blocks::bump(v, error_at);
  });
  if (own) count([&](std::size_t i, std::uint64_t d) { own->bump(i, d); }, 0);
}

void note_credit_wait(bool recv, queue_counts* own) noexcept {
  note(recv ? metric::recv_credit_waits : metric::send_credit_waits);
  if (own) own->bump(recv ? queue_counts::recv_credit_waits : queue_counts::send_credit_waits);
}

metrics::queue_counters queue_counts::read() const noexcept {
  metrics::queue_counters out;
  const auto get = [&](std::size_t i) { return v[i].load(std::memory_order_relaxed); };
  for (std::size_t k = 0; k < op_kind_count; ++k)
    out.operations[k] = {get(4 * k), get(4 * k + 1), get(4 * k + 2), get(4 * k + 3)};
  out.send_credit_waits = get(send_credit_waits);
  out.recv_credit_waits = get(recv_credit_waits);
  return out;
}

void note_poll(int n) noexcept { add_to_histogram(per_poll_at, static_cast<std::uint64_t>(n)); }

void note_registration(std::uint64_t bytes, std::uint64_t microseconds) noexcept {
  note(metric::bytes_registered, bytes);
  add_to_histogram(latency_at, microseconds);
}

std::shared_ptr<void> enroll_metrics(metrics_reader reader) {
  auto& r = sources();
  std::lock_guard lock(r.mutex);
  const auto at = r.live.insert(r.live.end(), std::move(reader));
  return std::shared_ptr<void>(nullptr, [at](void*) {
    auto& r = sources();
    std::lock_guard lock(r.mutex);
    (*at)(r.retired, true);
    r.live.erase(at);
  });
}

/// The data path's counters from one block of counters `c` (a thread's, or every thread's summed).
static void fill_data_path(metrics::data_path_counters& d, const std::uint64_t* c) noexcept {
  const auto get = [&](metric m) { return c[static_cast<std::size_t>(m)]; };
  for (std::size_t k = 0; k < op_kind_count; ++k) {
    const std::uint64_t* row = c + ops_at + 4 * k;
    d.operations[k] = {row[0], row[1], row[2], row[3]};
  }
  std::copy_n(c + wc_at, wc_count, d.wc_errors.begin());
  std::copy_n(c + errc_at, errc_count, d.errc_errors.begin());
  d.other_errors = get(metric::other_errors);
  fill(d.completions_per_poll, c + per_poll_at);
  d.empty_polls = get(metric::empty_polls);
  d.capped_turns = get(metric::capped_turns);
  d.send_credit_waits = get(metric::send_credit_waits);
  d.recv_credit_waits = get(metric::recv_credit_waits);
  d.receives_reposted = get(metric::receives_reposted);
}

void read_core_metrics(metrics::snapshot& out) {
  std::uint64_t c[counter_count];
  blocks::sum_all(c);
  const auto get = [&](metric m) { return c[static_cast<std::size_t>(m)]; };
  fill_data_path(out.data_path, c);
  out.threads.clear();
  blocks::for_each_live([&](const char* name, std::int64_t tid, const std::uint64_t* v) {
    // A thread with no data path of its own (a registration worker counting its ibv_reg_mr calls) is left out.
    const bool data_path = std::any_of(v + ops_at, v + latency_at, [](std::uint64_t x) { return x != 0; }) ||
                           v[static_cast<std::size_t>(metric::empty_polls)] ||
                           v[static_cast<std::size_t>(metric::capped_turns)] ||
                           v[static_cast<std::size_t>(metric::send_credit_waits)] ||
                           v[static_cast<std::size_t>(metric::recv_credit_waits)] ||
                           v[static_cast<std::size_t>(metric::receives_reposted)] ||
                           v[static_cast<std::size_t>(metric::other_errors)];
    if (!data_path) return;
    auto& t = out.threads.emplace_back();
    t.name = name;
    t.thread_id = tid;
    fill_data_path(t.data_path, v);
  });
  std::sort(out.threads.begin(), out.threads.end(), [](const auto& a, const auto& b) { return a.thread_id < b.thread_id; });
  fill(out.registration.latency_us, c + latency_at);
  out.registration.bytes_registered = get(metric::bytes_registered);
  auto& cn = out.connections;
  cn.accepted = get(metric::accepted);
  cn.refused = get(metric::refused);
  cn.half_open_reaped = get(metric::half_open_reaped);
  cn.connected = get(metric::connected);
  cn.connect_failed = get(metric::connect_failed);
  cn.disconnected_by_peer = get(metric::disconnected_by_peer);
  cn.disconnected_locally = get(metric::disconnected_locally);
  cn.disconnected_on_error = get(metric::disconnected_on_error);
  // The registration services' and caches' own statistics.
  auto& r = sources();
  std::lock_guard lock(r.mutex);
  const auto& kept = r.retired.registration;
  auto& reg = out.registration;
  reg.registered = kept.registered;
  reg.deregistered = kept.deregistered;
  reg.failed = kept.failed;
  reg.retries = kept.retries;
  reg.cache_hits = kept.cache_hits;
  reg.cache_misses = kept.cache_misses;
  reg.cache_evictions = kept.cache_evictions;
  reg.cache_invalidations = kept.cache_invalidations;
  reg.bytes_held = 0;
  for (const auto& reader : r.live)
    reader(out, false);
}

}  // namespace detail

namespace metrics {

void enable() noexcept { detail::metrics_switch.store(true, std::memory_order_relaxed); }
void disable() noexcept { detail::metrics_switch.store(false, std::memory_order_relaxed); }
bool enabled() noexcept { return detail::metrics_on(); }

const char* name(op_kind kind) noexcept {
  static constexpr const char* names[op_kind_count] = {"send", "recv", "write", "read", "atomic", "bind", "invalidate"};
  const auto i = static_cast<std::size_t>(kind);
  return i < op_kind_count ? names[i] : "unknown";
}

}  // namespace metrics
}  // namespace coverbs
