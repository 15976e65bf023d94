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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <pthread.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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

/// A scraper's TCP connection to 127.0.0.1:`port` (a plain socket: what the test asks of it is what the peer does).
class scraper_connection {
public:
  explicit scraper_connection(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0);
  }
  ~scraper_connection() { ::close(fd_); }
  scraper_connection(const scraper_connection&) = delete;
  scraper_connection& operator=(const scraper_connection&) = delete;

  /// Sends `GET /metrics` as HTTP/1.1 asking to keep the connection, and reads the whole response (its
  /// Content-Length). Returns the response's head (status line and headers).
  std::string scrape_keeping_alive() {
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n";
    REQUIRE(::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
    std::string in;
    std::size_t head_end = std::string::npos;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos)
      REQUIRE(receive_some(in) > 0);
    const std::string head = in.substr(0, head_end);
    const std::smatch length = [&] {
      std::smatch m;
      std::regex_search(head, m, std::regex("Content-Length: *([0-9]+)", std::regex::icase));
      return m;
    }();
    REQUIRE(!length.empty());
    const std::size_t total = head_end + 4 + std::stoul(length[1].str());
    while (in.size() < total)
      REQUIRE(receive_some(in) > 0);
    return head;
  }

  /// Waits up to `limit` for the peer to close the connection: true when a read returns end of file (or
  /// ECONNRESET, a close with unread data), false when the connection is still open after `limit`. Data
  /// that arrives meanwhile is read and dropped.
  bool closed_by_peer_within(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready == 0) return false;
      if (ready < 0) continue;  // EINTR
      std::string dropped;
      const ssize_t n = receive_some(dropped);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
  }

private:
  ssize_t receive_some(std::string& into) {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) into.append(buf, static_cast<std::size_t>(n));
    return n;
  }
  int fd_;
};

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
  // This thread's row: labelled with its name and kernel thread id.
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  const std::string mine = std::string("coverbs_thread_operations_completed_total{thread=\"") + name + "\",tid=\"" +
                           std::to_string(gettid()) + "\",kind=\"write\"}";
  INFO(mine);
  CHECK(sample(after, mine) - std::max(0.0, sample(before, mine)) == 7);
  CHECK(after.find("coverbs_thread_polls_total{thread=\"") != std::string::npos);
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

TEST_CASE("destroying the exporter closes the scrapers' connections, kept alive, idle or queued", "[metrics]") {
  std::optional<metrics::prometheus_exporter> exporter(std::in_place, 0, "127.0.0.1");
  const std::uint16_t port = exporter->port();
  REQUIRE(port != 0);
  // Two scrapers that scraped once and keep their HTTP/1.1 connections, and four that connected and sent
  // nothing: more connections than the server has threads, so some wait in its queue (before the fix, the
  // fifth and sixth were never closed; the destructor took 1.9 s).
  std::vector<std::unique_ptr<scraper_connection>> scrapers;
  for (int i = 0; i < 2; ++i) {
    scrapers.push_back(std::make_unique<scraper_connection>(port));
    CHECK(scrapers.back()->scrape_keeping_alive().rfind("HTTP/1.1 200", 0) == 0);
  }
  for (int i = 0; i < 4; ++i)
    scrapers.push_back(std::make_unique<scraper_connection>(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server accepts them meanwhile
  const auto start = std::chrono::steady_clock::now();
  exporter.reset();
  const auto took = std::chrono::steady_clock::now() - start;
  std::printf("prometheus_exporter destroyed in %lld ms with %zu scrapers connected\n",
              (long long)std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), scrapers.size());
  // Generous bounds: what is asserted is that each connection is closed, not how fast.
  CHECK(took < std::chrono::seconds(10));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (std::size_t i = 0; i < scrapers.size(); ++i) {
    INFO("scraper " << i << " (0 and 1 scraped, the others sent nothing)");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    CHECK(scrapers[i]->closed_by_peer_within(std::max(left, std::chrono::milliseconds(1))));
  }
}
