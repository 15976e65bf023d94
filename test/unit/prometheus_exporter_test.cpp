// coverbs/prometheus_exporter.hpp: the snapshot in Prometheus' text format, served over HTTP at /metrics and
// fetched here with a real HTTP client (Boost.Beast), while operations run on the software verbs device.
// The scrape of a running example, parsed by Python's prometheus_client: test/examples/metrics-scrape.
#include <coverbs/prometheus_exporter.hpp>

#include "fixtures/run_all.hpp"
#include "fixtures/soft_pair.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <catch2/catch.hpp>

#include <regex>
#include <set>
#include <string>

namespace cv = coverbs;
namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace metrics = coverbs::metrics;

namespace {

std::string get_metrics(std::uint16_t port) {
  asio::io_context io;
  boost::beast::tcp_stream stream(io);
  asio::ip::tcp::resolver resolver(io);
  stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  http::request<http::empty_body> req{http::verb::get, "/metrics", 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(stream, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  CHECK(res.result() == http::status::ok);
  return res.body();
}

/// The value of the sample `name{labels}` in `text`, or -1.
double sample(const std::string& text, const std::string& name_and_labels) {
  const auto at = text.find("\n" + name_and_labels + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name_and_labels.size() + 2));
}

}  // namespace

TEST_CASE("the exporter serves the counters at /metrics, fresh at every scrape", "[metrics]") {
  metrics::prometheus_exporter exporter(0, "127.0.0.1");
  REQUIRE(exporter.port() != 0);
  CHECK(metrics::enabled());
  const std::string before = get_metrics(exporter.port());
  CHECK(sample(before, "coverbs_metrics_enabled") == 1);
  const double writes = sample(before, "coverbs_operations_completed_total{kind=\"write\"}");
  REQUIRE(writes >= 0);
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 8, 64);
  for (int i = 0; i < 7; ++i)
    rig.a.async_write(rig.local_span(16), rig.remote_key(16), [](cv::error_code, std::size_t) {});
  test::run_all(io);
  const std::string after = get_metrics(exporter.port());
  CHECK(sample(after, "coverbs_operations_completed_total{kind=\"write\"}") == writes + 7);
  CHECK(sample(after, "coverbs_operation_bytes_total{kind=\"write\"}") >=
        sample(before, "coverbs_operation_bytes_total{kind=\"write\"}") + 7 * 16);
  // A histogram with its +Inf bucket, and the families typed.
  CHECK(after.find("coverbs_completions_per_poll_bucket{le=\"+Inf\"}") != std::string::npos);
  CHECK(after.find("# TYPE coverbs_operations_posted_total counter") != std::string::npos);
  CHECK(after.find("# TYPE coverbs_registration_latency_microseconds histogram") != std::string::npos);
  metrics::disable();
}

TEST_CASE("prometheus_text gives every family once, each with its HELP and TYPE", "[metrics]") {
  const std::string text = metrics::prometheus_text(metrics::read());
  std::regex type_line("# TYPE (\\w+) ");
  std::set<std::string> seen;
  for (std::sregex_iterator it(text.begin(), text.end(), type_line), end; it != end; ++it)
    CHECK(seen.insert((*it)[1]).second);
  CHECK(seen.count("coverbs_window_binds_total"));
  CHECK(seen.count("coverbs_disconnects_total"));
}
