// datagram_rpc: a request/response service over unreliable datagrams (UD), one queue pair serving every client,
// with the loss that UD allows handled by the client: timeouts, retransmission with backoff, and a server that
// answers a duplicate from its reply cache (docs/datagrams.md says what UD does and does not promise).
//
// The server makes one coverbs::datagram_queue_pair, keeps `server_slots` receives posted, and answers resolution
// requests for its address and port with that queue pair (coverbs::datagram_listener, rdma_cm's UDP port space).
// Each request is answered to its sender (an address handle made from the received sender, cached by GID).
// A client resolves the server (coverbs::async_resolve_datagram_peer), keeps receives posted for its replies,
// and runs `window` requests at a time; each waits for its reply on a timer and is sent again when the timer
// fires first (the same sequence number), up to --retries times.
#include <coverbs/coverbs.hpp>

#include "common/command_line.hpp"
#include "common/run.hpp"
#include "datagram_rpc/lru.hpp"
#include "datagram_rpc/protocol.hpp"
#include "datagram_rpc/sender_cache.hpp"

#include <coverbs_support/json_output.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
namespace proto = datagram_rpc;
using asio::awaitable;
using example::clock;
using example::tuple;
using proto::sender_cache;

constexpr const char* usage_text =
    "datagram_rpc: requests and replies over unreliable datagrams, one queue pair serving every client, with\n"
    "timeouts and retransmission (a coverbs example).\n"
    "\n"
    "  datagram_rpc --self-test [--clients K] [--requests N] [--drop-percent P] [--replies-kept M] [--address ADDR]\n"
    "              [--json]\n"
    "      the server and K clients (default 4) in one process and one io_context, on ADDR (default 10.77.0.1,\n"
    "      the Soft-RoCE guest's rxe0); with P, the server drops P% of the requests and P% of its replies on\n"
    "      purpose (seeded), so the clients must retransmit. Exit status 0 only if every request completed\n"
    "      with a verified reply and the server counted each request answered once.\n"
    "  datagram_rpc --listen ADDR PORT [--expect N] [--drop-percent P] [--replies-kept M]\n"
    "      serve on ADDR:PORT (a numeric address of an RDMA device); with N, end once N distinct requests were\n"
    "      answered and no request came for 5 s (retransmissions of lost replies are still answered until\n"
    "      then), or fail when fewer were answered and none came for 60 s; else serve until SIGINT or SIGTERM.\n"
    "  datagram_rpc --connect ADDR PORT [--requests N] [--timeout-ms T] [--retries R] [--json]\n"
    "      send N requests (default 200), 4 at a time, of 0 .. 512 bytes; a request without a reply within T ms\n"
    "      (default 200) is sent again, waiting twice as long each time (8 T at most), R times at most\n"
    "      (default 8).\n"
    "--replies-kept M: the server keeps its replies to each sender's M newest requests (default 64) to answer\n"
    "a retransmission from them; an older one is answered anew (the work is idempotent).\n"
    "--json prints each client's counters as one JSON line: requests, completed, failed, retransmissions,\n"
    "timeouts, late_replies, rtt_p50_us.\n"
    "Run it where verbs work; without an RDMA device, in the Soft-RoCE guest, from the project folder:\n"
    "  tools/rxe-vm -- build/examples/datagram_rpc --self-test --drop-percent 10\n";

constexpr std::size_t server_slots = 64;  // receives the server keeps posted, each with its own send slot
constexpr std::size_t client_window = 4;  // requests a client keeps in flight
constexpr std::size_t client_slots = 2 * client_window;  // receives a client keeps posted (replies, duplicates)

/// Registered memory cut into `count` pairs of message slots: a receive slot of a whole datagram (the queue
/// pair's `max_datagram_size()`, so that no datagram is truncated) and a send slot of `proto::max_message`.
struct slots {
  std::size_t receive_size;
  std::vector<std::byte> memory;
  cv::memory_region mr;
  slots(cv::protection_domain& pd, std::size_t count, std::size_t datagram)
      : receive_size(datagram), memory(count * (datagram + proto::max_message)),
        mr(pd, memory, cv::access::local_write) {}
  std::size_t receive_at(std::size_t i) const { return i * (receive_size + proto::max_message); }
  std::size_t send_at(std::size_t i) const { return receive_at(i) + receive_size; }
  cv::registered_span receive(std::size_t i) { return cv::span_of(mr, receive_at(i), receive_size); }
  cv::registered_span send(std::size_t i, std::size_t bytes) { return cv::span_of(mr, send_at(i), bytes); }
  std::span<std::byte> send_area(std::size_t i) { return {memory.data() + send_at(i), proto::max_message}; }
  std::span<const std::byte> received(std::size_t i, std::size_t bytes) const {
    return {memory.data() + receive_at(i), bytes};
  }
};

/// Seeded drops, for the self-test's lossy runs: `drop()` is true `percent` % of the time.
struct dropper {
  std::uint64_t percent = 0;
  std::mt19937_64 rng{7};
  bool drop() { return percent && std::uniform_int_distribution<std::uint64_t>(0, 99)(rng) < percent; }
};

// --- server ---

struct server_counters {
  std::uint64_t requests = 0, answered = 0, duplicates = 0, malformed = 0, dropped_requests = 0, dropped_replies = 0;
};

class server {
public:
  server(cv::protection_domain& pd, cv::completion_queue& cq, std::uint64_t drop_percent, std::size_t replies_kept)
      : pd_(pd), qp_(std::in_place, pd, cq, queue_options()),
        slots_(pd, server_slots, qp_->max_datagram_size()), drops_{drop_percent}, replies_kept_(replies_kept) {}

  cv::datagram_queue_pair& qp() { return *qp_; }
  const server_counters& counters() const { return counters_; }
  std::uint64_t distinct_answered() const { return counters_.answered; }
  clock::time_point last_request() const { return last_request_; }

  /// One of the `server_slots` receive loops: until the queue pair is closed (or fails: `failure()`).
  awaitable<void> serve_slot(std::size_t i) {
    while (qp_) {
      cv::registered_span into = slots_.receive(i);
      auto [ec, r] = co_await qp_->async_recv(into, tuple);
      if (ec == cv::errc::datagram_truncated) {  // longer than any request: not one of ours
        ++counters_.malformed;
        continue;
      }
      if (ec) {
        if (!closing_ && !failure_) {
          failure_ = qp_ && qp_->error() ? qp_->error() : ec;
          std::fprintf(stderr, "datagram_rpc server: the queue pair failed: %s\n", failure_.message().c_str());
        }
        co_return;
      }
      last_request_ = clock::now();
      ++counters_.requests;
      const auto h = proto::read(slots_.received(i, r.bytes), proto::request_magic);
      if (!h) {
        ++counters_.malformed;
        continue;
      }
      if (drops_.drop()) {
        ++counters_.dropped_requests;
        continue;
      }
      co_await answer(i, r.sender, *h);
    }
  }

  /// Why the server stopped serving before it was closed (its queue pair failed), or nothing.
  cv::error_code failure() const { return failure_; }

  /// Destroys the queue pair: the receives still posted complete with wr_flush_err, ending `serve_slot`s.
  void close() {
    closing_ = true;
    qp_.reset();
  }

private:
  static cv::datagram_options queue_options() {
    cv::datagram_options o;
    o.max_send_wr = server_slots;
    o.max_recv_wr = server_slots;
    return o;
  }

  /// The reply to request `h` from `from`: from the sender's reply cache when it is a retransmission of a
  /// request answered recently (the work is not done twice), else done now and cached.
  awaitable<void> answer(std::size_t i, const cv::datagram_sender& from, const proto::header& h) {
    // The reply cache of this (GID, queue pair, client id); a client id is whatever a peer writes, so only the
    // `senders_kept` most recent are remembered (a peer inventing ids cannot exhaust the server's memory).
    sender_cache& cache = replies_.touch(std::tuple(from.source_gid.raw, from.qp_num, h.client));
    std::span<std::byte> out = slots_.send_area(i);
    std::size_t bytes = 0;
    if (const std::vector<std::byte>* hit = cache.find(h.seq)) {
      ++counters_.duplicates;  // our reply was lost (or is late): the same answer again
      std::copy_n(hit->begin(), hit->size(), out.begin());
      bytes = hit->size();
    } else {
      std::array<std::byte, proto::max_payload> payload;
      const auto in = slots_.received(i, proto::header_size + h.length).subspan(proto::header_size);
      std::transform(in.begin(), in.end(), payload.begin(), proto::answer_byte);
      bytes = proto::write(out, proto::reply_magic, h.client, h.seq, std::span(payload).first(h.length));
      if (cache.record(h.seq, out.first(bytes), replies_kept_))
        ++counters_.answered;  // a request not answered before
      else
        ++counters_.duplicates;  // older than the cache: this example's work is idempotent, so done again
    }
    if (drops_.drop()) {
      ++counters_.dropped_replies;
      co_return;
    }
    // Held across the send: the cache may forget the handle meanwhile, and it must outlive the send.
    const std::shared_ptr<cv::address_handle> ah = handle_for(from);
    const cv::datagram_destination to{ah.get(), from.qp_num, qp_->qkey()};
    cv::registered_span reply = slots_.send(i, bytes);
    auto [ec, n] = co_await qp_->async_send_to(to, reply, tuple);
    (void)n;
    if (ec && ec != cv::wc_errc::wr_flush_err)
      std::fprintf(stderr, "datagram_rpc server: reply: %s\n", ec.message().c_str());
  }

  /// The address handle that reaches `from`, made once per sender GID; the least recently used is forgotten
  /// beyond `senders_kept` GIDs, so a peer sending from many addresses cannot grow the server without bound.
  std::shared_ptr<cv::address_handle> handle_for(const cv::datagram_sender& from) {
    auto& entry = handles_.touch(from.source_gid.raw);
    if (!entry) entry = std::make_shared<cv::address_handle>(pd_, from, qp_->port());
    return entry;
  }

  static constexpr std::size_t senders_kept = 1024;  // senders (and sender GIDs) remembered
  cv::protection_domain& pd_;
  std::optional<cv::datagram_queue_pair> qp_;
  slots slots_;
  dropper drops_;
  std::size_t replies_kept_;  // replies kept per sender
  server_counters counters_;
  clock::time_point last_request_ = clock::now();
  bool closing_ = false;
  cv::error_code failure_;
  proto::lru<std::array<std::uint8_t, 16>, std::shared_ptr<cv::address_handle>> handles_{senders_kept};
  proto::lru<std::tuple<std::array<std::uint8_t, 16>, std::uint32_t, std::uint32_t>, sender_cache> replies_{
      senders_kept};
};

// --- client ---

struct client_config {
  std::string host;
  std::string port;
  std::uint64_t requests = 200, timeout_ms = 200, retries = 8;
};

struct client_counters {
  std::uint64_t requests = 0, completed = 0, failed = 0, retransmissions = 0, timeouts = 0, late_replies = 0;
  std::vector<double> rtt_us;
  double rtt_p50_us() {
    if (rtt_us.empty()) return 0;
    std::nth_element(rtt_us.begin(), rtt_us.begin() + rtt_us.size() / 2, rtt_us.end());
    return rtt_us[rtt_us.size() / 2];
  }
};

class client {
public:
  client(cv::protection_domain& pd, cv::completion_queue& cq, client_config config, std::uint32_t id)
      : pd_(pd), qp_(std::in_place, pd, cq, queue_options()), slots_(pd, client_slots, qp_->max_datagram_size()),
        config_(std::move(config)), id_(id) {}

  client_counters counters;
  bool finished() const noexcept { return !qp_; }

  /// Resolves the server, then runs every request; the receives posted end when it closes its queue pair.
  awaitable<void> run(example::task_group& tasks) {
    const auto ex = co_await asio::this_coro::executor;
    cv::datagram_resolve_options options;
    options.timeout = std::chrono::seconds(30);  // rdma_cm's own requests are retried on loss (every 4 s)
    // A server started at the same time may not listen yet (refused at once): tried again for 30 s.
    const auto give_up = clock::now() + std::chrono::seconds(30);
    for (;;) {
      auto [ec, peer] = co_await cv::async_resolve_datagram_peer(pd_, *qp_, config_.host, config_.port, options, tuple);
      if (!ec) {
        peer_.emplace(std::move(peer));
        break;
      }
      if (ec != cv::errc::connection_refused || clock::now() >= give_up)
        throw std::runtime_error("resolve " + config_.host + ":" + config_.port + ": " + ec.message());
      asio::steady_timer pause(ex, std::chrono::milliseconds(500));
      co_await pause.async_wait(asio::use_awaitable);
    }
    for (std::size_t i = 0; i < client_slots; ++i)
      tasks.spawn(ex, receive_slot(i), "datagram_rpc client receive");
    requesters_ = client_window;
    for (std::size_t w = 0; w < client_window; ++w)
      tasks.spawn(ex, requester(w), "datagram_rpc client");
  }

  /// Runs once the client is done (every request completed or given up) and its queue pair closed.
  std::function<void()> on_done;

private:
  static cv::datagram_options queue_options() {
    cv::datagram_options o;
    o.max_send_wr = client_window;
    o.max_recv_wr = client_slots;
    return o;
  }

  /// A request waiting for its reply: the timer its requester waits on, cancelled when the reply comes.
  struct pending {
    asio::steady_timer* timer;
    bool replied = false;
    bool verified = false;
  };

  awaitable<void> receive_slot(std::size_t i) {
    for (;;) {
      cv::registered_span into = slots_.receive(i);
      auto [ec, r] = co_await qp_->async_recv(into, tuple);
      if (ec == cv::errc::datagram_truncated) {
        ++counters.late_replies;  // not a reply of ours (longer than any): counted with the strays
        continue;
      }
      if (ec) co_return;  // closed
      const std::span<const std::byte> message = slots_.received(i, r.bytes);
      const auto h = proto::read(message, proto::reply_magic);
      auto it = h && h->client == id_ ? waiting_.find(h->seq) : waiting_.end();
      if (it == waiting_.end() || it->second->replied) {
        ++counters.late_replies;  // a reply to a request already answered (its first reply came late)
        continue;
      }
      pending& p = *it->second;
      p.replied = true;
      p.verified = verifies(h->seq, message.subspan(proto::header_size));
      p.timer->cancel();
    }
  }

  bool verifies(std::uint64_t seq, std::span<const std::byte> payload) const {
    if (payload.size() != proto::request_length(seq)) return false;
    for (std::size_t j = 0; j < payload.size(); ++j)
      if (payload[j] != proto::answer_byte(proto::request_byte(id_, seq, j))) return false;
    return true;
  }

  /// Runs requests from send slot `w` until every request was taken; the last requester to end closes the
  /// queue pair (the receives still posted complete with wr_flush_err: `receive_slot` ends).
  awaitable<void> requester(std::size_t w) {
    try {
      co_await requests(w);
    } catch (...) {
      requester_ended();
      throw;
    }
    requester_ended();
  }

  void requester_ended() {
    if (--requesters_ != 0) return;
    qp_.reset();
    if (on_done) on_done();
  }

  awaitable<void> requests(std::size_t w) {
    const auto ex = co_await asio::this_coro::executor;
    asio::steady_timer timer(ex);
    std::array<std::byte, proto::max_payload> payload;
    while (next_seq_ < config_.requests) {
      const std::uint64_t seq = next_seq_++;
      ++counters.requests;
      const std::size_t length = proto::request_length(seq);
      for (std::size_t j = 0; j < length; ++j)
        payload[j] = proto::request_byte(id_, seq, j);
      const std::size_t bytes =
          proto::write(slots_.send_area(w), proto::request_magic, id_, seq, std::span(payload).first(length));
      pending p{&timer};
      waiting_[seq] = &p;
      const auto start = clock::now();
      auto wait = std::chrono::milliseconds(config_.timeout_ms);
      for (std::uint64_t attempt = 0; !p.replied; ++attempt) {
        if (attempt > config_.retries) break;
        if (attempt) ++counters.retransmissions;
        cv::registered_span request = slots_.send(w, bytes);
        const cv::datagram_destination to = peer_->destination();
        auto [ec, n] = co_await qp_->async_send_to(to, request, tuple);
        (void)n;
        if (ec) throw std::runtime_error("send request " + std::to_string(seq) + ": " + ec.message());
        if (p.replied) break;  // the reply came while the send completed
        timer.expires_after(wait);
        auto [timer_ec] = co_await timer.async_wait(tuple);
        if (!timer_ec) ++counters.timeouts;  // expired: no reply within `wait`
        wait = std::min(2 * wait, 8 * std::chrono::milliseconds(config_.timeout_ms));  // backoff, capped
      }
      waiting_.erase(seq);
      if (p.replied && p.verified) {
        ++counters.completed;
        counters.rtt_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - start).count());
      } else {
        ++counters.failed;
        std::fprintf(stderr, "datagram_rpc client %08x: request %llu %s\n", id_, static_cast<unsigned long long>(seq),
                     p.replied ? "got a reply that does not answer it" : "got no reply after every retry");
      }
    }
  }

  cv::protection_domain& pd_;
  std::optional<cv::datagram_queue_pair> qp_;
  slots slots_;
  client_config config_;
  std::uint32_t id_;
  std::optional<cv::datagram_peer> peer_;
  std::uint64_t next_seq_ = 0;
  std::size_t requesters_ = 0;
  std::map<std::uint64_t, pending*> waiting_;
};

void print(const std::string& who, client_counters& c, bool json) {
  const double p50 = c.rtt_p50_us();
  if (json) {
    json_output::print(json_output::json::object{{"client", who},
                                                 {"requests", c.requests},
                                                 {"completed", c.completed},
                                                 {"failed", c.failed},
                                                 {"retransmissions", c.retransmissions},
                                                 {"timeouts", c.timeouts},
                                                 {"late_replies", c.late_replies},
                                                 {"rtt_p50_us", json_output::rounded(p50, 1)}});
    return;
  }
  std::printf("  %s: %llu requests, %llu completed, %llu failed, %llu retransmissions, %llu timeouts, "
              "%llu late replies, rtt p50 %.1f us\n",
              who.c_str(), static_cast<unsigned long long>(c.requests), static_cast<unsigned long long>(c.completed),
              static_cast<unsigned long long>(c.failed), static_cast<unsigned long long>(c.retransmissions),
              static_cast<unsigned long long>(c.timeouts), static_cast<unsigned long long>(c.late_replies), p50);
}

void print(const server_counters& s) {
  std::printf("  server: %llu requests received, %llu answered, %llu duplicates, %llu malformed, dropped on purpose "
              "%llu requests and %llu replies\n",
              static_cast<unsigned long long>(s.requests), static_cast<unsigned long long>(s.answered),
              static_cast<unsigned long long>(s.duplicates), static_cast<unsigned long long>(s.malformed),
              static_cast<unsigned long long>(s.dropped_requests), static_cast<unsigned long long>(s.dropped_replies));
}

/// Ends the server once `expect` distinct requests were answered and none came for `quiet`; or, short of
/// `expect`, once none came for `give_up` (a client failed or gave up: the server says so and fails).
awaitable<void> close_when_done(server& s, std::uint64_t expect, std::chrono::seconds quiet,
                                std::chrono::seconds give_up, bool& short_of_expected) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (;;) {
    const auto idle = clock::now() - s.last_request();
    if (s.distinct_answered() >= expect && idle >= quiet) break;
    if (idle >= give_up) {
      short_of_expected = true;
      std::fprintf(stderr,
                   "datagram_rpc server: %llu of the %llu requests expected were answered, and none came for %lld s\n",
                   static_cast<unsigned long long>(s.distinct_answered()), static_cast<unsigned long long>(expect),
                   static_cast<long long>(give_up.count()));
      break;
    }
    t.expires_after(std::chrono::milliseconds(200));
    co_await t.async_wait(asio::use_awaitable);
  }
  s.close();
}

/// What the command line chose (see usage_text).
struct settings {
  std::uint64_t clients = 4, requests = 200, drop_percent = 0, expect = 0, replies_kept = 64, timeout_ms = 200,
                retries = 8;
  bool json = false;
};

int run(const example::command_line& cmd, const settings& o) {
  const std::uint64_t clients = cmd.mode == example::role::connect ? 1 : o.clients, requests = o.requests;
  asio::io_context io(1);
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue cq(io, dev, {.depth = 4096});
  example::task_group tasks;
  std::optional<server> srv;
  bool short_of_expected = false;
  std::optional<cv::datagram_listener> listener;
  std::vector<std::unique_ptr<client>> cls;
  std::random_device seed;
  if (cmd.serving()) {
    srv.emplace(pd, cq, o.drop_percent, o.replies_kept);
    listener.emplace(io, srv->qp(), cmd.address, cmd.port);
    for (std::size_t i = 0; i < server_slots; ++i)
      tasks.spawn(io, srv->serve_slot(i), "datagram_rpc server");
    std::printf("datagram_rpc: serving on %s port %u with queue pair %u (Q_Key 0x%x), %zu receives posted\n",
                cmd.address.c_str(), listener->local_port(), srv->qp().qp_num(), srv->qp().qkey(), server_slots);
    std::fflush(stdout);
    if (o.expect && !cmd.self_test())
      tasks.spawn(io,
                  close_when_done(*srv, o.expect, std::chrono::seconds(5), std::chrono::seconds(60), short_of_expected),
                  "close");
  }
  if (cmd.connecting()) {
    const std::string port = std::to_string(cmd.self_test() ? listener->local_port() : cmd.port);
    for (std::uint64_t c = 0; c < clients; ++c) {
      cls.push_back(std::make_unique<client>(pd, cq,
                                             client_config{cmd.address, port, requests, o.timeout_ms, o.retries},
                                             static_cast<std::uint32_t>(seed())));
      tasks.spawn(io, cls.back()->run(tasks), "datagram_rpc client");
    }
    // In one process the server ends when the last client does (every retransmission it could get came).
    if (srv)
      for (auto& c : cls)
        c->on_done = [&srv, &cls] {
          if (std::all_of(cls.begin(), cls.end(), [](auto& x) { return x->finished(); })) srv->close();
        };
  }
  const example::run_result result = example::run_tasks(io, tasks, cmd, std::chrono::seconds(120));
  bool ok = tasks.failed == 0;
  std::uint64_t completed = 0;
  for (std::size_t c = 0; c < cls.size(); ++c) {
    print("client " + std::to_string(c), cls[c]->counters, o.json);
    ok = ok && cls[c]->counters.completed == requests && cls[c]->counters.failed == 0;
    completed += cls[c]->counters.completed;
  }
  if (srv) {
    print(srv->counters());
    if (srv->failure() || short_of_expected) ok = false;
    // In one process every completed request was answered, and counted once however often it was sent.
    if (cmd.self_test() && srv->distinct_answered() != completed) {
      std::fprintf(
          stderr, "datagram_rpc: the server counted %llu distinct requests answered; the clients completed %llu\n",
          static_cast<unsigned long long>(srv->distinct_answered()), static_cast<unsigned long long>(completed));
      ok = false;
    }
  }
  return example::verdict("datagram_rpc", ok, result);
}

}  // namespace

int main(int argc, char** argv) {
  settings o;
  using example::in_connect, example::in_listen, example::in_self_test;
  return example::run_main(argc, argv, "datagram_rpc", usage_text,
                           {{"--clients", &o.clients, 1, 64, in_self_test},
                            {"--requests", &o.requests, 1, 1000000, in_self_test | in_connect},
                            {"--drop-percent", &o.drop_percent, 0, 90, in_self_test | in_listen},
                            {"--expect", &o.expect, 0, 100000000, in_listen},
                            {"--replies-kept", &o.replies_kept, 1, 4096, in_self_test | in_listen},
                            {"--timeout-ms", &o.timeout_ms, 1, 60000, in_self_test | in_connect},
                            {"--retries", &o.retries, 0, 30, in_self_test | in_connect}},
                           {{"--json", &o.json, in_self_test | in_connect}},
                           [&](const example::command_line& cmd) { return run(cmd, o); });
}
