// coverbs stats HOST:PORT: fetches a program's /metrics (coverbs::metrics::prometheus_exporter, or any
// Prometheus text exposition) with an HTTP GET (Boost.Beast) and prints coverbs' families grouped: the
// operations as a table by kind, then the completion queues, errors, registrations, windows and connections.
#include "stats_command.hpp"

#include <coverbs_support/command_line.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace coverbs::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

const char* const stats_usage =
    "usage: coverbs stats HOST:PORT [--path /metrics] [--raw]\n"
    "  stats HOST:PORT   fetch a running program's metrics (an example's --metrics-port, or\n"
    "                    coverbs::metrics::prometheus_exporter) and print them grouped: operations\n"
    "                    by kind (posted, completed, failed, bytes), errors, completion queues,\n"
    "                    registrations, windows, connections\n"
    "  --raw             print the Prometheus text as fetched\n";

struct stats_options {
  std::string target;
  std::string path = "/metrics";
  bool raw = false;
};

/// One sample: its labels as written between the braces ("kind=\"send\"") and its value.
struct sample {
  std::string labels;
  double value = 0;
};
using samples = std::map<std::string, std::vector<sample>>;  // by metric name (a histogram's _bucket, _sum...)

/// GET http://host:port/path within 10 s in all (resolution, connection, request, answer): a server that accepts
/// and never answers fails with "timed out" instead of holding the command forever.
std::string fetch(const std::string& host, const std::string& port, const std::string& path) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  asio::ip::tcp::resolver resolver(io);
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "coverbs-stats");
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  beast::error_code failed;
  std::string step = "resolve";
  // The tcp_stream's expiry bounds its asynchronous operations only: every step is one of those.
  stream.expires_after(std::chrono::seconds(10));
  resolver.async_resolve(host, port, [&](beast::error_code ec, asio::ip::tcp::resolver::results_type found) {
    if (ec) return void(failed = ec);
    step = "connect";
    stream.async_connect(found, [&](beast::error_code ec, const asio::ip::tcp::endpoint&) {
      if (ec) return void(failed = ec);
      step = "send the request";
      http::async_write(stream, req, [&](beast::error_code ec, std::size_t) {
        if (ec) return void(failed = ec);
        step = "read the answer";
        http::async_read(stream, buffer, res, [&](beast::error_code ec, std::size_t) { failed = ec; });
      });
    });
  });
  io.run_for(std::chrono::seconds(12));  // the resolver is not bounded by the stream's expiry
  if (!io.stopped() && !failed) failed = beast::error::timeout;
  if (failed)
    throw std::runtime_error("GET http://" + host + ":" + port + path + ": " + step + ": " + failed.message());
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  if (res.result() != http::status::ok)
    throw std::runtime_error("GET http://" + host + ":" + port + path + " answered " +
                             std::to_string(res.result_int()) + " " + std::string(res.reason()));
  return res.body();
}

/// The samples of a text exposition (comments skipped; a name, optional {labels}, a value).
samples parse(const std::string& text) {
  samples out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::string name, labels;
    std::size_t at = line.find_first_of("{ ");
    if (at == std::string::npos) continue;
    name = line.substr(0, at);
    if (line[at] == '{') {
      const std::size_t close = line.find('}', at);
      if (close == std::string::npos) continue;
      labels = line.substr(at + 1, close - at - 1);
      at = close + 1;
    }
    try {
      out[name].push_back({labels, std::stod(line.substr(at))});
    } catch (const std::exception&) {
      // not a number (NaN spelled otherwise): skipped
    }
  }
  return out;
}

/// The value of `name` with exactly `labels`, or 0.
double value_of(const samples& s, const std::string& name, const std::string& labels = "") {
  const auto it = s.find(name);
  if (it == s.end()) return 0;
  for (const sample& x : it->second)
    if (x.labels == labels) return x.value;
  return 0;
}

/// "name=\"value\"" pairs' values joined: kind="send",x="y" -> send,y.
std::string label_values(const std::string& labels) {
  std::string out;
  for (std::size_t at = 0; (at = labels.find('"', at)) != std::string::npos;) {
    const std::size_t end = labels.find('"', at + 1);
    if (end == std::string::npos) break;
    if (!out.empty()) out += ' ';
    out += labels.substr(at + 1, end - at - 1);
    at = end + 1;
  }
  return out;
}

void print_labelled(const samples& s, const char* title, const std::string& name) {
  const auto it = s.find(name);
  if (it == s.end()) return;
  std::printf("  %-28s", title);
  for (const sample& x : it->second)
    std::printf(" %s %.0f", label_values(x.labels).c_str(), x.value);
  std::printf("\n");
}

void print_value(const samples& s, const char* title, const std::string& name) {
  if (s.count(name)) std::printf("  %-28s %.0f\n", title, value_of(s, name));
}

void print_histogram(const samples& s, const char* title, const std::string& name, const char* unit) {
  const double count = value_of(s, name + "_count"), sum = value_of(s, name + "_sum");
  if (!s.count(name + "_count")) return;
  std::printf("  %-28s %.0f, mean %.1f %s\n", title, count, count > 0 ? sum / count : 0.0, unit);
}

/// The value of label `key` in `labels` (kind="send",tid="7" -> "7" for tid), or "".
std::string label(const std::string& labels, const std::string& key) {
  const std::string start = key + "=\"";
  for (std::size_t at = 0; (at = labels.find(start, at)) != std::string::npos; at += start.size())
    if (at == 0 || labels[at - 1] == ',') {
      const std::size_t from = at + start.size(), end = labels.find('"', from);
      return end == std::string::npos ? "" : labels.substr(from, end - from);
    }
  return "";
}

/// One row per thread (event loop) that counted: its completed operations (all kinds) and its polls.
void print_threads(const samples& s) {
  struct row {
    std::string name;
    double completed = 0, polls = 0, empty = 0;
  };
  std::map<long long, row> rows;  // by thread id
  const auto tid_of = [](const sample& x) { return std::atoll(label(x.labels, "tid").c_str()); };
  if (const auto it = s.find("coverbs_thread_operations_completed_total"); it != s.end())
    for (const sample& x : it->second) {
      auto& r = rows[tid_of(x)];
      r.name = label(x.labels, "thread");
      r.completed += x.value;
    }
  if (const auto it = s.find("coverbs_thread_polls_total"); it != s.end())
    for (const sample& x : it->second) {
      auto& r = rows[tid_of(x)];
      r.name = label(x.labels, "thread");
      (label(x.labels, "outcome") == "empty" ? r.empty : r.polls) += x.value;
    }
  if (rows.empty()) return;
  std::printf("threads (event loops) %8s %16s %12s %12s\n", "tid", "completed", "polls", "empty polls");
  for (const auto& [tid, r] : rows)
    std::printf("  %-19s %8lld %16.0f %12.0f %12.0f\n", r.name.c_str(), tid, r.completed, r.polls, r.empty);
}

void print(const samples& s, const std::string& from) {
  std::printf("coverbs metrics of %s (counting %s)\n", from.c_str(),
              value_of(s, "coverbs_metrics_enabled") > 0 ? "on" : "off");
  std::printf("operations      %12s %12s %10s %16s\n", "posted", "completed", "failed", "bytes");
  for (const char* kind : {"send", "recv", "write", "read", "atomic", "bind", "invalidate"}) {
    const std::string l = std::string("kind=\"") + kind + "\"";
    std::printf("  %-13s %12.0f %12.0f %10.0f %16.0f\n", kind, value_of(s, "coverbs_operations_posted_total", l),
                value_of(s, "coverbs_operations_completed_total", l), value_of(s, "coverbs_operations_failed_total", l),
                value_of(s, "coverbs_operation_bytes_total", l));
  }
  print_threads(s);
  std::printf("errors\n");
  print_labelled(s, "by category, code", "coverbs_operation_errors_total");
  std::printf("completion queues\n");
  print_histogram(s, "polls with completions", "coverbs_completions_per_poll", "completions a poll");
  print_value(s, "empty polls", "coverbs_empty_polls_total");
  print_value(s, "turns capped", "coverbs_capped_turns_total");
  print_labelled(s, "credit waits", "coverbs_credit_waits_total");
  print_value(s, "receives reposted", "coverbs_receives_reposted_total");
  std::printf("registrations\n");
  print_value(s, "registered", "coverbs_registrations_total");
  print_value(s, "deregistered", "coverbs_deregistrations_total");
  print_value(s, "failed", "coverbs_registration_failures_total");
  print_value(s, "retries", "coverbs_registration_retries_total");
  print_value(s, "bytes registered", "coverbs_registered_bytes_total");
  print_value(s, "bytes held", "coverbs_registration_bytes_held");
  print_histogram(s, "ibv_reg_mr calls", "coverbs_registration_latency_microseconds", "us");
  print_labelled(s, "cache", "coverbs_registration_cache_events_total");
  std::printf("windows\n");
  print_value(s, "allocated", "coverbs_windows_allocated");
  print_value(s, "bound", "coverbs_windows_bound");
  print_value(s, "binds", "coverbs_window_binds_total");
  print_value(s, "binds failed", "coverbs_window_bind_failures_total");
  print_labelled(s, "invalidations by", "coverbs_window_invalidations_total");
  print_value(s, "remote invalidations refused", "coverbs_remote_invalidations_refused_total");
  print_labelled(s, "leases", "coverbs_window_lease_events_total");
  print_value(s, "leases live", "coverbs_window_leases_live");
  std::printf("connections\n");
  print_labelled(s, "events", "coverbs_connection_events_total");
  print_labelled(s, "disconnects by cause", "coverbs_disconnects_total");
}

int stats(const stats_options& o) {
  const std::size_t colon = o.target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == o.target.size())
    return command_line::bad("coverbs stats", "say where: HOST:PORT (got '" + o.target + "')");
  const std::string host = o.target.substr(0, colon), port = o.target.substr(colon + 1);
  std::string text;
  try {
    text = fetch(host, port, o.path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coverbs stats: cannot fetch http://%s%s: %s\n", o.target.c_str(), o.path.c_str(), e.what());
    return 1;
  }
  if (o.raw) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  const samples s = parse(text);
  if (!s.count("coverbs_metrics_enabled")) {
    std::fprintf(stderr, "coverbs stats: http://%s%s has no coverbs metrics\n", o.target.c_str(), o.path.c_str());
    return 1;
  }
  print(s, o.target);
  return 0;
}

}  // namespace

std::function<int()> add_stats(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("stats");
  command_line::describe(*sub, stats_usage);
  auto o = std::make_shared<stats_options>();
  sub->add_option("target", o->target)->required();
  sub->add_option("--path", o->path);
  sub->add_flag("--raw", o->raw);
  return [o] { return stats(*o); };
}

}  // namespace coverbs::cli
