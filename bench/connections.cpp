// bench_connections: how many rdma_cm connections one process serves, how fast they are set up, how much
// receive memory each one costs with and without a shared receive queue, and the message rate through them.
//
//   bench_connections [--address A] [--max-connections N] [--messages K] [--size BYTES] [--srq-receives M]
//                     [--receives R] [--parallel P] [--phase-timeout-s S] [--skip-no-srq] [--json]
//
// One process, one io_context, one thread: a listener on --address (the guest's 10.77.0.1) and N clients
// connecting to it, for N in 1, 16, 256, 1024, 4096 up to --max-connections (and N itself). At start the
// soft RLIMIT_NOFILE is raised to the hard limit (each connection holds one descriptor per side, its
// rdma_cm event channel: docs/connections.md).
//
// For each N, a fresh set-up ("world"): server connections share one protection domain and completion
// queue and (SRQ pass) one shared_receive_queue of M receives of S bytes, one region of M x S; (no-SRQ
// pass) each server connection posts R receives of S bytes from its own region of R x S. The clients share
// another protection domain and completion queue.
//   connect  the N clients connect with at most P connects in flight (the listener's backlog is P); the
//            time from the first rdma_connect until both sides of all N are established gives
//            connect_per_s_<N> (connect_per_s_no_srq_<N> for the second pass); connect_ms_{p50,p99}_<N>
//            is each client's own connect time.
//   messages every client sends K messages of S bytes (send with immediate data = client << 16 | seq,
//            content a function of both), at most W in flight per client (W = min(8, R, M / N), at least
//            1). The receives are posted before the clock starts. The server checks every message's
//            bytes, that each (client, seq) arrives once and that a client's messages all come to one
//            queue pair, and re-posts the receive. msg_rate_srq_<N> / msg_rate_no_srq_<N> = N x K / the
//            time from the first send until the last is received; verified_{srq,no_srq}_<N> is true when
//            every message was verified.
// Registered receive memory: reg_bytes_per_conn_srq_<N> = M x S / N and reg_bytes_per_conn_no_srq = R x S
// as configured; *_measured_<N> = the sum of the sizes of the regions actually registered for receives / N.
//
// Each phase has a deadline (--phase-timeout-s). When a phase fails (an error, or the deadline), larger N
// are not tried: max_connections is the largest N established and limit_reason says what failed and how
// (the error of the verb or rdma_cm step: EMFILE for the descriptor limit, ENOMEM, a CQ overcommitted...).
// established_at_limit = how many connections that N had established when it failed (-1: none failed).
// When every N passes, limit_reason says no limit was hit up to --max-connections.
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include <coverbs_support/json_output.hpp>
#include <coverbs_support/progress.hpp>
#include <coverbs_support/statistics.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#if defined(COVERBS_HAS_RDMACM)

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using clock_type = std::chrono::steady_clock;
constexpr const char* prog = "bench_connections";

struct config {
  std::string address = "10.77.0.1";
  int max_connections = 1024;
  int messages = 64;
  std::size_t size = 64;
  int srq_receives = 1024;
  int receives = 16;
  int parallel = 64;
  int phase_timeout_s = 300;
  bool skip_no_srq = false;
  bool json = false;
  std::vector<int> counts;  // the N tried, ascending
};

constexpr const char* usage_text =
    "[--address A] [--max-connections N] [--messages K] [--size BYTES] [--srq-receives M] [--receives R] "
    "[--parallel P] [--phase-timeout-s S] [--skip-no-srq] [--json]";

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", prog};
  bench::describe(app, usage_text,
                  "Connections per second (rdma_cm), receive memory registered per connection with and without a "
                  "shared receive queue, and the message rate through 1..N connections; see the source's header.");
  app.add_option("--address", c.address);
  app.add_option("--max-connections", c.max_connections)->transform(command_line::count(1, 65536));
  app.add_option("--messages", c.messages)->transform(command_line::count(1, 65536));
  app.add_option("--size", c.size)->transform(command_line::size(16, 4096));
  app.add_option("--srq-receives", c.srq_receives)->transform(command_line::count(1, 65536));
  app.add_option("--receives", c.receives)->transform(command_line::count(1, 4096));
  app.add_option("--parallel", c.parallel)->transform(command_line::count(1, 4096));
  app.add_option("--phase-timeout-s", c.phase_timeout_s)->transform(command_line::count(1, 3600));
  app.add_flag("--skip-no-srq", c.skip_no_srq);
  app.add_flag("--json", c.json);
  bench::parse(app, argc, argv);
  for (const int n : {1, 16, 256, 1024, 4096, 16384})
    if (n < c.max_connections) c.counts.push_back(n);
  c.counts.push_back(c.max_connections);
  return c;
}

/// Raises the soft descriptor limit to the hard one; returns {soft before, soft now}.
std::pair<rlim_t, rlim_t> raise_nofile() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  const rlim_t before = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) != 0) r.rlim_cur = before;
  return {before, r.rlim_cur};
}

/// The bytes of message `seq` of client `client`: a header naming both, then a pattern of both.
void fill(std::byte* p, std::size_t size, std::uint32_t client, std::uint32_t seq) {
  std::memcpy(p, &client, 4);
  std::memcpy(p + 4, &seq, 4);
  for (std::size_t i = 8; i < size; ++i)
    p[i] = std::byte(static_cast<unsigned char>(client * 31 + seq * 7 + i));
}
bool matches(const std::byte* p, std::size_t size, std::uint32_t client, std::uint32_t seq) {
  std::byte want[4096];
  fill(want, size, client, seq);
  return std::memcmp(p, want, size) == 0;
}

struct connect_result {
  int established = 0;
  double seconds = 0;
  std::vector<double> connect_ms;  // each client's own connect time
  std::string error;               // empty: all N established
};

struct message_result {
  std::uint64_t received = 0, verified = 0;
  double seconds = 0;
  std::string error;
};

/// N clients and the server connections they were accepted onto, with what they share. Members are
/// declared so that connections go before the SRQ, the SRQ before the completion queues, those before
/// the protection domains, and all before the io_context.
class world {
public:
  world(const config& c, int n, bool srq)
      : c_(c), n_(n), srq_mode_(srq), window_(window(c, n)),
        listener_(io_, c.address, 0, listener_opts(c)), server_pd_(listener_.get_device()),
        client_pd_(listener_.get_device()) {
    const auto& caps = listener_.get_device().caps();
    const std::uint64_t server_depth = srq ? std::uint64_t(c.srq_receives) + n + 16
                                           : std::uint64_t(n) * (1 + c.receives) + 16;
    const std::uint64_t client_depth = std::uint64_t(n) * (window_ + 1) + 16;
    if (std::uint64_t(2) * n > caps.max_qp)
      throw limit("2 x " + std::to_string(n) + " queue pairs (server and client side) exceed the device's max_qp " +
                  std::to_string(caps.max_qp));
    for (const auto depth : {server_depth, client_depth})
      if (depth > caps.max_cqe)
        throw limit("a completion queue of depth " + std::to_string(depth) + " for " + std::to_string(n) +
                    " connections exceeds the device's max_cqe " + std::to_string(caps.max_cqe));
    server_cq_.emplace(io_, listener_.get_device(), cq_options(server_depth));
    client_cq_.emplace(io_, listener_.get_device(), cq_options(client_depth));
    if (srq) {
      srq_.emplace(server_pd_, *server_cq_,
                   cv::srq_options{.max_wr = std::uint32_t(c.srq_receives), .max_sge = 1, .limit = 0});
      add_receive_region(std::size_t(c.srq_receives) * c.size);
    }
    client_bytes_.resize(std::size_t(n) * window_ * c.size);
    client_mr_ = cv::memory_region(client_pd_, client_bytes_, cv::access::local_write);
    server_opts_.pd = &server_pd_;
    server_opts_.cq = &*server_cq_;
    server_opts_.qp.max_send_wr = 1;
    server_opts_.qp.max_recv_wr = srq ? 1 : std::uint32_t(c.receives);
    server_opts_.qp.min_rnr_timer = 1;  // a send that found no receive is retried after 0.01 ms
    server_opts_.qp.srq = srq ? &*srq_ : nullptr;
    client_opts_.pd = &client_pd_;
    client_opts_.cq = &*client_cq_;
    client_opts_.qp.max_send_wr = std::uint32_t(window_);
    client_opts_.qp.max_recv_wr = 1;
    client_opts_.connect_timeout = std::chrono::seconds(c.phase_timeout_s);
  }

  ~world() {
    clients_.clear();
    servers_.clear();
  }

  struct limit : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  /// The window of sends in flight per client.
  static int window(const config& c, int n) { return std::max(1, std::min({8, c.receives, c.srq_receives / n})); }

  std::string device_name() const { return listener_.get_device().name(); }

  /// Bytes registered for receives (the sum of the regions' sizes).
  std::uint64_t receive_bytes() const { return receive_bytes_; }

  connect_result connect() {
    connect_result r;
    cancels_ = std::vector<asio::cancellation_signal>(std::size_t(n_));
    const auto start = clock_type::now();
    accept_next();
    launch();
    const bool done = run([&] { return accepted_ == n_ && connected_ == n_; }, [&] {
      return failed() && in_flight_ == 0 && !accepting_;
    }, [&] {
      for (auto& s : cancels_) s.emit(asio::cancellation_type::terminal);
      accept_cancel_.emit(asio::cancellation_type::terminal);
    });
    r.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    r.established = std::min(accepted_, connected_);
    r.connect_ms = std::move(connect_ms_);
    if (!done || failed())
      r.error = (error_.empty() ? "the phase did not end" : error_) + "; open descriptors after it: " + open_descriptors();
    return r;
  }

  message_result exchange() {
    message_result r;
    seen_.assign(std::size_t(n_) * c_.messages, 0);
    qp_of_client_.assign(std::size_t(n_), 0);
    if (srq_mode_) {
      for (int j = 0; j < c_.srq_receives; ++j)
        srq_recv(std::size_t(j));
    } else {
      for (std::size_t k = 0; k < servers_.size(); ++k)
        for (int j = 0; j < c_.receives; ++j)
          qp_recv(k, std::size_t(j));
    }
    next_seq_.assign(std::size_t(n_), 0);
    const auto start = clock_type::now();  // the receives are posted: the clock runs from the first send
    for (std::size_t cl = 0; cl < clients_.size(); ++cl)
      for (int w = 0; w < window_ && next_seq_[cl] < std::uint32_t(c_.messages); ++w)
        send(cl, std::size_t(w));
    const std::uint64_t total = std::uint64_t(n_) * c_.messages;
    const bool done = run([&] { return received_ == total && sent_ == total; }, [&] { return failed(); }, [] {});
    r.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    r.received = received_;
    r.verified = verified_;
    if (!done || failed()) r.error = error_.empty() ? "the phase did not end" : error_;
    return r;
  }

private:
  static cv::listener_options listener_opts(const config& c) {
    cv::listener_options o;
    o.backlog = c.parallel;
    o.establish_timeout = std::chrono::seconds(c.phase_timeout_s);
    return o;
  }
  static cv::completion_queue_options cq_options(std::uint64_t depth) {
    cv::completion_queue_options o;
    o.depth = int(depth);
    return o;
  }

  /// The process's open descriptors, counted in /proc/self/fd, against RLIMIT_NOFILE: an error that hides
  /// EMFILE (rdma_cm's answer then names no device) shows here.
  static std::string open_descriptors() {
    rlimit r{};
    getrlimit(RLIMIT_NOFILE, &r);
    std::size_t n = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
      ++n;
    return (ec ? std::string("not countable (") + ec.message() + ")" : std::to_string(n)) + " of RLIMIT_NOFILE " +
           std::to_string(r.rlim_cur);
  }

  bool failed() const { return !error_.empty(); }
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }

  /// Runs the loop until `done`; past the phase's deadline (or on an error) calls `abort` once and runs
  /// until `settled` (at most 30 s more). Returns whether `done` was reached.
  template <class Done, class Settled, class Abort>
  bool run(Done done, Settled settled, Abort abort) {
    const auto deadline = clock_type::now() + std::chrono::seconds(c_.phase_timeout_s);
    bool aborted = false;
    auto hard = clock_type::time_point::max();
    while (!done()) {
      const auto now = clock_type::now();
      if (!aborted && (failed() || now >= deadline)) {
        if (!failed())
          fail("the phase's deadline (" + std::to_string(c_.phase_timeout_s) + " s) passed");
        abort();
        aborted = true;
        hard = now + std::chrono::seconds(30);
      }
      if (aborted && (settled() || now >= hard)) return false;
      io_.run_one_for(std::chrono::milliseconds(50));
    }
    return true;
  }

  void add_receive_region(std::size_t bytes) {
    auto& b = receive_buffers_.emplace_back(bytes);
    receive_regions_.emplace_back(server_pd_, b, cv::access::local_write);
    receive_bytes_ += receive_regions_.back().size();
  }

  void accept_next() {
    if (accepted_ == n_ || failed()) return;
    accepting_ = true;
    listener_.async_accept(server_opts_, asio::bind_cancellation_slot(
                                             accept_cancel_.slot(), [this](cv::error_code ec, cv::connection conn) {
                                               accepting_ = false;
                                               if (ec) return fail("accept of connection " + std::to_string(accepted_ + 1) + ": " + ec.message());
                                               servers_.push_back(std::move(conn));
                                               if (!srq_mode_) add_receive_region(std::size_t(c_.receives) * c_.size);
                                               ++accepted_;
                                               accept_next();
                                             }));
  }

  void launch() {
    while (!failed() && next_client_ < n_ && in_flight_ < c_.parallel) {
      const int i = next_client_++;
      ++in_flight_;
      const auto t0 = clock_type::now();
      cv::async_connect(io_, c_.address, listener_.local_port(), client_opts_,
                        asio::bind_cancellation_slot(cancels_[std::size_t(i)].slot(),
                                                     [this, i, t0](cv::error_code ec, cv::connection conn) {
                                                       --in_flight_;
                                                       if (ec) return fail("connect of client " + std::to_string(i + 1) + ": " + ec.message());
                                                       connect_ms_.push_back(
                                                           std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
                                                       clients_.push_back(std::move(conn));
                                                       ++connected_;
                                                       launch();
                                                     }));
    }
  }

  cv::registered_span client_slot(std::size_t client, std::size_t w) const {
    return cv::span_of(client_mr_, (client * std::size_t(window_) + w) * c_.size, c_.size);
  }

  void send(std::size_t client, std::size_t w) {
    const std::uint32_t seq = next_seq_[client]++;
    const auto span = client_slot(client, w);
    fill(span.bytes.data(), c_.size, std::uint32_t(client), seq);
    clients_[client].qp().async_send_with_imm(span, std::uint32_t(client << 16 | (seq & 0xffff)),
                                              [this, client, w](cv::error_code ec, std::size_t) {
                                                if (ec) return fail("send of client " + std::to_string(client + 1) + ": " + ec.message());
                                                ++sent_;
                                                if (!failed() && next_seq_[client] < std::uint32_t(c_.messages)) send(client, w);
                                              });
  }

  /// Checks a received message in `p`: its bytes, that it is the first of its (client, seq) and that its
  /// client's messages come to one queue pair.
  void check(const std::byte* p, std::size_t bytes, std::optional<std::uint32_t> imm, std::uint32_t qp_num) {
    ++received_;
    if (!imm || bytes != c_.size) return fail("a message without immediate data or of the wrong size");
    const std::uint32_t client = *imm >> 16, seq16 = *imm & 0xffff;
    std::uint32_t seq = 0;
    std::memcpy(&seq, p + 4, 4);
    if (client >= std::uint32_t(n_) || seq >= std::uint32_t(c_.messages) || (seq & 0xffff) != seq16 ||
        !matches(p, c_.size, client, seq))
      return fail("message " + std::to_string(received_) + " is not as sent");
    auto& s = seen_[std::size_t(client) * c_.messages + seq];
    if (s++) return fail("client " + std::to_string(client + 1) + "'s message " + std::to_string(seq) + " arrived twice");
    auto& q = qp_of_client_[client];
    if (q == 0) q = qp_num;
    if (q != qp_num) return fail("client " + std::to_string(client + 1) + "'s messages arrived on two queue pairs");
    ++verified_;
  }

  void srq_recv(std::size_t j) {
    const auto span = cv::span_of(receive_regions_[0], j * c_.size, c_.size);
    srq_->async_recv(span, [this, j, span](cv::error_code ec, cv::srq_received r) {
      if (ec == asio::error::operation_aborted) return;  // the SRQ is destroyed
      if (ec) return fail("SRQ receive: " + ec.message());
      check(span.bytes.data(), r.bytes, r.imm, r.qp_num);
      if (!failed()) srq_recv(j);
    });
  }

  void qp_recv(std::size_t k, std::size_t j) {
    const auto span = cv::span_of(receive_regions_[k], j * c_.size, c_.size);
    cv::queue_pair& qp = servers_[k].qp();
    qp.async_recv(span, [this, k, j, span, qp_num = qp.qp_num()](cv::error_code ec, cv::received r) {
      if (ec == asio::error::operation_aborted || ec == cv::wc_errc::wr_flush_err) return;  // torn down
      if (ec) return fail("receive: " + ec.message());
      check(span.bytes.data(), r.bytes, r.imm, qp_num);
      if (!failed()) qp_recv(k, j);
    });
  }

  const config& c_;
  const int n_;
  const bool srq_mode_;
  const int window_;
  asio::io_context io_{1};
  cv::listener listener_;
  cv::protection_domain server_pd_, client_pd_;
  std::optional<cv::completion_queue> server_cq_, client_cq_;
  std::optional<cv::shared_receive_queue> srq_;
  std::vector<std::vector<std::byte>> receive_buffers_;
  std::vector<cv::memory_region> receive_regions_;
  std::uint64_t receive_bytes_ = 0;
  std::vector<std::byte> client_bytes_;
  cv::memory_region client_mr_;
  cv::connection_options server_opts_;
  cv::connect_options client_opts_;
  std::vector<cv::connection> servers_, clients_;

  std::vector<asio::cancellation_signal> cancels_;
  asio::cancellation_signal accept_cancel_;
  bool accepting_ = false;
  int accepted_ = 0, connected_ = 0, next_client_ = 0, in_flight_ = 0;
  std::vector<double> connect_ms_;
  std::vector<std::uint32_t> next_seq_;
  std::vector<std::uint8_t> seen_;
  std::vector<std::uint32_t> qp_of_client_;
  std::uint64_t sent_ = 0, received_ = 0, verified_ = 0;
  std::string error_;
};

struct figures {
  int n = 0;
  bool srq = true;
  connect_result conn;
  message_result msgs;
  std::uint64_t receive_bytes = 0;
  bool ok() const { return conn.error.empty() && msgs.error.empty(); }
};

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  const auto [nofile_before, nofile] = raise_nofile();
  std::fprintf(stderr, "%s: soft RLIMIT_NOFILE raised from %llu to the hard limit %llu\n", prog,
               static_cast<unsigned long long>(nofile_before), static_cast<unsigned long long>(nofile));
  std::vector<figures> runs;
  int max_established = 0, established_at_limit = -1;
  std::string limit_reason, device;
  try {
    progress::phases phase(prog, int(c.counts.size()) * (c.skip_no_srq ? 1 : 2));
    for (const bool srq : {true, false}) {
      if (!srq && c.skip_no_srq) break;
      for (const int n : c.counts) {
        if (!srq && n > max_established) break;
        phase.next(std::string(srq ? "SRQ" : "no SRQ") + ": " + std::to_string(n) + " connections");
        figures f{n, srq, {}, {}, 0};
        try {
          world w(c, n, srq);
          device = w.device_name();
          f.conn = w.connect();
          f.receive_bytes = w.receive_bytes();
          if (f.conn.error.empty()) {
            std::fprintf(stderr, "%s:   %d connected in %.2f s; sending %d messages each\n", prog, n, f.conn.seconds,
                         c.messages);
            f.msgs = w.exchange();
          }
        } catch (const world::limit& e) {
          f.conn.error = e.what();
        } catch (const std::exception& e) {
          f.conn.error = std::string("setting up: ") + e.what();
        }
        runs.push_back(f);
        if (!f.ok()) {
          const std::string why = f.conn.error.empty() ? f.msgs.error : f.conn.error;
          std::fprintf(stderr, "%s:   failed with %d connections (%d established): %s\n", prog, n,
                       f.conn.established, why.c_str());
          if (srq) established_at_limit = f.conn.established;
          if (srq)
            limit_reason = std::to_string(n) + " connections (" + std::to_string(f.conn.established) +
                           " established): " + why;
          break;
        }
        if (srq) max_established = n;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 1;
  }
  if (max_established == 0) {  // not one connection: no device, a wrong address, ...
    std::fprintf(stderr, "%s: no connection could be set up: %s\n", prog, limit_reason.c_str());
    return 1;
  }
  if (limit_reason.empty())
    limit_reason = "none hit up to --max-connections " + std::to_string(c.max_connections);

  const auto key = [](const char* what, const figures& f) {
    return std::string(what) + (f.srq ? "" : "_no_srq") + "_" + std::to_string(f.n);
  };
  if (c.json) {
    namespace json = json_output::json;
    const auto r1 = [](double x) { return json_output::rounded(x, 1); };
    json::object o{{"device", device},
                   {"address", c.address},
                   {"messages", c.messages},
                   {"size", c.size},
                   {"srq_receives", c.srq_receives},
                   {"receives_per_conn_no_srq", c.receives},
                   {"parallel", c.parallel},
                   {"nofile_soft_before", nofile_before},
                   {"nofile_limit", nofile},
                   {"max_connections", max_established},
                   {"limit_reason", limit_reason},
                   {"established_at_limit", established_at_limit},
                   {"reg_bytes_per_conn_no_srq", std::uint64_t(c.receives) * c.size}};
    for (const auto& f : runs) {
      if (!f.ok()) continue;
      const auto s = statistics::summarize(f.conn.connect_ms);
      o[key("connect_per_s", f)] = r1(f.n / f.conn.seconds);
      o[key("connect_ms_p50", f)] = r1(s.median);
      o[key("connect_ms_p99", f)] = r1(s.p99);
      o[std::string(f.srq ? "msg_rate_srq_" : "msg_rate_no_srq_") + std::to_string(f.n)] =
          r1(double(f.msgs.received) / f.msgs.seconds);
      o[std::string(f.srq ? "verified_srq_" : "verified_no_srq_") + std::to_string(f.n)] =
          f.msgs.verified == std::uint64_t(f.n) * c.messages;
      const std::string mode = f.srq ? "srq" : "no_srq";
      if (f.srq) o["reg_bytes_per_conn_srq_" + std::to_string(f.n)] = r1(double(c.srq_receives) * c.size / f.n);
      o["reg_bytes_per_conn_" + mode + "_measured_" + std::to_string(f.n)] = r1(double(f.receive_bytes) / f.n);
      o["reg_bytes_total_" + mode + "_" + std::to_string(f.n)] = f.receive_bytes;
    }
    json_output::print(o);
  } else {
    std::printf("device %s; %d messages of %zu B per client; SRQ of %d receives; without SRQ %d receives per connection; "
                "RLIMIT_NOFILE %llu\n",
                device.c_str(), c.messages, c.size, c.srq_receives, c.receives,
                static_cast<unsigned long long>(nofile));
    std::printf("  %-7s %6s %10s %9s %9s %12s %9s %14s\n", "recv", "conns", "conn/s", "p50 ms", "p99 ms", "msg/s",
                "verified", "reg B/conn");
    for (const auto& f : runs) {
      if (!f.ok()) continue;
      const auto s = statistics::summarize(f.conn.connect_ms);
      std::printf("  %-7s %6d %10.1f %9.1f %9.1f %12.1f %9s %14.1f\n", f.srq ? "SRQ" : "per-QP", f.n,
                  f.n / f.conn.seconds, s.median, s.p99, double(f.msgs.received) / f.msgs.seconds,
                  f.msgs.verified == std::uint64_t(f.n) * c.messages ? "all" : "NO", double(f.receive_bytes) / f.n);
    }
    std::printf("  max_connections %d; limit: %s\n", max_established, limit_reason.c_str());
  }
  return 0;
}

#else

#include <cstdio>

int main() {
  std::fprintf(stderr, "bench_connections: coverbs was built without librdmacm\n");
  return 1;
}

#endif
