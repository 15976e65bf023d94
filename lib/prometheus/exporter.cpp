// The Prometheus exporter (coverbs/prometheus_exporter.hpp): a Collectable that converts a fresh
// metrics::read() at each scrape, served by prometheus-cpp's Exposer.
#include <coverbs/error.hpp>
#include <coverbs/prometheus_exporter.hpp>

#include "server_sockets.hpp"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string_view>
#include <utility>

namespace coverbs::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using labels = std::vector<ClientMetric::Label>;

/// wc_errc's names by value (the ibv_wc_status names without IBV_WC_, in lower case).
constexpr const char* wc_names[] = {"success",
                                    "loc_len_err",
                                    "loc_qp_op_err",
                                    "loc_eec_op_err",
                                    "loc_prot_err",
                                    "wr_flush_err",
                                    "mw_bind_err",
                                    "bad_resp_err",
                                    "loc_access_err",
                                    "rem_inv_req_err",
                                    "rem_access_err",
                                    "rem_op_err",
                                    "retry_exc_err",
                                    "rnr_retry_exc_err",
                                    "loc_rdd_viol_err",
                                    "rem_inv_rd_req_err",
                                    "rem_abort_err",
                                    "inv_eecn_err",
                                    "inv_eec_state_err",
                                    "fatal_err",
                                    "resp_timeout_err",
                                    "general_err",
                                    "tm_err",
                                    "tm_rndv_incomplete"};

/// Builds the families, one call per metric.
class families {
public:
  std::vector<MetricFamily> take() { return std::move(out_); }

  void counter(std::string name, std::string help, double value, labels l = {}) {
    family(std::move(name), std::move(help), MetricType::Counter).metric.push_back(with(std::move(l), value, true));
  }
  void gauge(std::string name, std::string help, double value, labels l = {}) {
    family(std::move(name), std::move(help), MetricType::Gauge).metric.push_back(with(std::move(l), value, false));
  }
  void histogram(std::string name, std::string help, const metrics::histogram& h) {
    ClientMetric m;
    m.histogram.sample_sum = static_cast<double>(h.sum);
    std::uint64_t cumulative = 0;  // the buckets' sum is the count: `+Inf` and `_count` always agree
    for (std::size_t i = 0; i < h.buckets.size(); ++i) {
      cumulative += h.buckets[i];
      const std::uint64_t bound = metrics::histogram::upper_bound(i);
      m.histogram.bucket.push_back(
          {cumulative, bound == UINT64_MAX ? std::numeric_limits<double>::infinity() : static_cast<double>(bound)});
    }
    m.histogram.sample_count = cumulative;
    family(std::move(name), std::move(help), MetricType::Histogram).metric.push_back(std::move(m));
  }

private:
  /// The family `name`: the last one when it has that name (the metrics of a family are added together).
  MetricFamily& family(std::string name, std::string help, MetricType type) {
    if (out_.empty() || out_.back().name != name) out_.push_back({std::move(name), std::move(help), type, {}});
    return out_.back();
  }
  static ClientMetric with(labels l, double value, bool is_counter) {
    ClientMetric m;
    m.label = std::move(l);
    (is_counter ? m.counter.value : m.gauge.value) = value;
    return m;
  }
  std::vector<MetricFamily> out_;
};

double d(std::uint64_t v) { return static_cast<double>(v); }

void add_data_path(families& f, const data_path_counters& p) {
  const struct {
    const char* name;
    const char* help;
    std::uint64_t op_counters::*field;
  } rows[] = {
      {"coverbs_operations_posted_total", "Work requests handed to the device, by operation kind",
       &op_counters::posted},
      {"coverbs_operations_completed_total", "Operations that completed successfully, by kind",
       &op_counters::completed},
      {"coverbs_operations_failed_total", "Operations that completed with an error, by kind", &op_counters::failed},
      {"coverbs_operation_bytes_total", "Bytes moved by successful operations, by kind", &op_counters::bytes},
  };
  for (const auto& r : rows)
    for (std::size_t k = 0; k < op_kind_count; ++k)
      f.counter(r.name, r.help, d(p.operations[k].*r.field), {{"kind", name(static_cast<op_kind>(k))}});
  const char* errors_help = "Failed operations by error: category wc (ibv_wc_status), coverbs (errc value), other";
  for (std::size_t i = 0; i < p.wc_errors.size(); ++i)
    if (p.wc_errors[i])
      f.counter("coverbs_operation_errors_total", errors_help, d(p.wc_errors[i]),
                {{"category", "wc"}, {"code", i < std::size(wc_names) ? wc_names[i] : std::to_string(i)}});
  for (std::size_t i = 0; i < p.errc_errors.size(); ++i)
    if (p.errc_errors[i])
      f.counter("coverbs_operation_errors_total", errors_help, d(p.errc_errors[i]),
                {{"category", "coverbs"}, {"code", std::to_string(i)}});
  f.counter("coverbs_operation_errors_total", errors_help, d(p.other_errors),
            {{"category", "other"}, {"code", "other"}});
  f.histogram("coverbs_completions_per_poll", "Completions each non-empty ibv_poll_cq returned",
              p.completions_per_poll);
  f.counter("coverbs_empty_polls_total", "ibv_poll_cq calls that found nothing", d(p.empty_polls));
  f.counter("coverbs_capped_turns_total", "Dispatch turns that stopped at max_completions_per_turn or turn_quota",
            d(p.capped_turns));
  f.counter("coverbs_credit_waits_total", "Operations that waited for a work-queue credit", d(p.send_credit_waits),
            {{"queue", "send"}});
  f.counter("coverbs_credit_waits_total", "Operations that waited for a work-queue credit", d(p.recv_credit_waits),
            {{"queue", "recv"}});
  f.counter("coverbs_receives_reposted_total", "Receives a message endpoint posted again after a message",
            d(p.receives_reposted));
}

/// Per thread (an event loop is one): its completed operations by kind (the kinds it completed any of) and its
/// polls, labelled with the thread's name and kernel thread id.
void add_threads(families& f, const std::vector<thread_data_path>& threads) {
  const char* ops_help = "Operations that completed successfully on each thread (event loop), by kind";
  for (const auto& t : threads)
    for (std::size_t k = 0; k < op_kind_count; ++k)
      if (t.data_path.operations[k].completed)
        f.counter("coverbs_thread_operations_completed_total", ops_help, d(t.data_path.operations[k].completed),
                  {{"thread", t.name}, {"tid", std::to_string(t.thread_id)}, {"kind", name(static_cast<op_kind>(k))}});
  const char* polls_help = "ibv_poll_cq calls on each thread (event loop): with completions, or empty";
  for (const auto& t : threads) {
    const labels who{{"thread", t.name}, {"tid", std::to_string(t.thread_id)}};
    labels with = who, empty = who;
    with.push_back({"outcome", "completions"});
    empty.push_back({"outcome", "empty"});
    f.counter("coverbs_thread_polls_total", polls_help, d(t.data_path.completions_per_poll.count), std::move(with));
    f.counter("coverbs_thread_polls_total", polls_help, d(t.data_path.empty_polls), std::move(empty));
  }
}

void add_registration(families& f, const registration_counters& r) {
  f.counter("coverbs_registrations_total", "Successful ibv_reg_mr calls of the registration services", d(r.registered));
  f.counter("coverbs_deregistrations_total", "Successful ibv_dereg_mr calls of the registration services",
            d(r.deregistered));
  f.counter("coverbs_registration_failures_total", "Registration requests that failed", d(r.failed));
  f.counter("coverbs_registration_retries_total", "Registration retries after ENOMEM/EAGAIN", d(r.retries));
  f.counter("coverbs_registered_bytes_total", "Bytes registered by the services' workers", d(r.bytes_registered));
  f.gauge("coverbs_registration_bytes_held", "Bytes the live registration services hold",
          static_cast<double>(r.bytes_held));
  f.histogram("coverbs_registration_latency_microseconds", "How long each worker's ibv_reg_mr took", r.latency_us);
  const char* cache_help = "Registration cache lookups and entries, by event";
  f.counter("coverbs_registration_cache_events_total", cache_help, d(r.cache_hits), {{"event", "hit"}});
  f.counter("coverbs_registration_cache_events_total", cache_help, d(r.cache_misses), {{"event", "miss"}});
  f.counter("coverbs_registration_cache_events_total", cache_help, d(r.cache_evictions), {{"event", "eviction"}});
  f.counter("coverbs_registration_cache_events_total", cache_help, d(r.cache_invalidations),
            {{"event", "invalidation"}});
}

void add_windows(families& f, const window_counters& w) {
  f.gauge("coverbs_windows_allocated", "Memory windows alive", d(w.windows_allocated));
  f.gauge("coverbs_windows_bound", "Memory windows with a live key", d(w.windows_bound));
  f.counter("coverbs_window_binds_total", "Window binds completed successfully", d(w.binds));
  f.counter("coverbs_window_bind_failures_total", "Window binds refused or failed", d(w.binds_failed));
  f.counter("coverbs_window_invalidations_total", "Window keys invalidated, by whom", d(w.invalidations),
            {{"by", "local"}});
  f.counter("coverbs_window_invalidations_total", "Window keys invalidated, by whom", d(w.remote_invalidations),
            {{"by", "peer"}});
  f.counter("coverbs_remote_invalidations_refused_total",
            "Send-with-invalidates naming a window not bound through their queue pair", d(w.foreign_invalidations));
  f.counter("coverbs_windows_replaced_total", "Windows reallocated to kill a key", d(w.windows_replaced));
  const char* lease_help = "Window leases by event";
  f.counter("coverbs_window_lease_events_total", lease_help, d(w.leases_granted), {{"event", "granted"}});
  f.counter("coverbs_window_lease_events_total", lease_help, d(w.leases_expired), {{"event", "expired"}});
  f.counter("coverbs_window_lease_events_total", lease_help, d(w.leases_revoked), {{"event", "revoked"}});
  f.gauge("coverbs_window_leases_live", "Window leases granted and not yet ended", d(w.leases_live));
}

void add_connections(families& f, const connection_counters& c) {
  const char* help = "Connection requests and connections by outcome";
  const std::pair<const char*, std::uint64_t> outcomes[] = {{"accepted", c.accepted},
                                                            {"refused", c.refused},
                                                            {"half_open_reaped", c.half_open_reaped},
                                                            {"connected", c.connected},
                                                            {"connect_failed", c.connect_failed}};
  for (const auto& [outcome, n] : outcomes)
    f.counter("coverbs_connection_events_total", help, d(n), {{"event", outcome}});
  const char* cause_help = "Established connections that ended, by cause";
  f.counter("coverbs_disconnects_total", cause_help, d(c.disconnected_by_peer), {{"cause", "peer"}});
  f.counter("coverbs_disconnects_total", cause_help, d(c.disconnected_locally), {{"cause", "local"}});
  f.counter("coverbs_disconnects_total", cause_help, d(c.disconnected_on_error), {{"cause", "error"}});
}

std::vector<MetricFamily> to_families(const snapshot& s) {
  families f;
  f.gauge("coverbs_metrics_enabled", "Whether coverbs counts (metrics::enable)", s.enabled ? 1 : 0);
  add_data_path(f, s.data_path);
  add_threads(f, s.threads);
  add_registration(f, s.registration);
  add_windows(f, s.windows);
  add_connections(f, s.connections);
  return f.take();
}

class snapshot_collectable final : public prometheus::Collectable {
public:
  std::vector<MetricFamily> Collect() const override { return to_families(read()); }
};

}  // namespace

std::string prometheus_text(const snapshot& s) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, to_families(s));
  return out.str();
}

struct prometheus_exporter::state {
  prometheus::Exposer exposer;
  std::shared_ptr<snapshot_collectable> collectable = std::make_shared<snapshot_collectable>();
  std::string address;  // as given: what server_sockets looks for
  state(const std::string& bind, const std::string& a) : exposer(bind), address(a) {
    exposer.RegisterCollectable(collectable);
  }
};

prometheus_exporter::prometheus_exporter(std::uint16_t port, const std::string& address)
    : state_([&] {
        // An IPv6 literal goes in brackets ("[::1]:9464"); civetweb's own error names neither address nor port.
        const std::string where =
            (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" + std::to_string(port);
        try {
          return std::make_unique<state>(where, address);
        } catch (const std::exception& e) {
          throw std::runtime_error("coverbs::metrics::prometheus_exporter: cannot listen on " + where +
                                   " (is the port taken, or the address not this host's?): " + e.what());
        }
      }()) {
  enable();
}

prometheus_exporter::~prometheus_exporter() {
  // civetweb alone took 1.9 s here and left a connection its workers had not taken open (server_sockets.hpp):
  // its listener shut down first wakes its master thread, and what it leaves open is closed after it stops.
  detail::server_sockets sockets(state_->address, port());
  state_.reset();
  sockets.close_left_open();
}

std::uint16_t prometheus_exporter::port() const noexcept {
  const auto ports = state_->exposer.GetListeningPorts();
  return ports.empty() ? 0 : static_cast<std::uint16_t>(ports.front());
}

}  // namespace coverbs::metrics
