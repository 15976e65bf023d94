// messaging_pair --serve ADDR PORT | --client ADDR PORT [PHASE...] — the message layer's device checks
// (device/messaging_test.cpp) with the server on one host and the clients on another (suite 'wire',
// test/wire/messaging-pair runs it on the two hosts of tools/rxe-vm --hosts 2).
//
// The server (--serve, host A) accepts sessions (async_serve: slots of 1024 bytes, 128 receive slots) and plays,
// per session, the part its client names in the session's first request: "out-of-order N SEED" answers N requests
// in shuffled batches of 1..32, then echoes; "hold" keeps the 128 requests its slots can take, releases none until
// told to; "defer N" takes N requests (giving each slot back) and answers none until told to; "never" takes
// requests and answers none; "echo" answers each at once; "control" answers the client's questions about the
// others ("held", "deferred", "never", "end PEER" — the report of the session whose peer was PEER —, "rnr" —
// this host's receiver-not-ready counters —, "release", "answer", "stop"). Every answer is the request with each
// byte XOR 0x5A (fixtures/messaging.hpp).
//
// The client (--client, host B) checks, across the wire:
//   1. calls: 100,000 calls over 8 sessions, 64 in flight on each, payloads of 0 bytes to the slot size, answered
//      out of order: every reply matched byte-exact, none failed, no endpoint error;
//   2. credits: a server that holds every slot (128) makes the client's 20 further calls wait on credits, not
//      fail (its credits 0, its credit waits counted); no receiver-not-ready counter moves on either host
//      (hw_counters rcvd_rnr_err + send_rnr_err, A's read by the server); once released, every call completes;
//   3. cancellation: 250 calls on each of 8 sessions reach the server, which answers none yet; 125 random ones per
//      session are cancelled: each completes with operation_aborted at once; once answered, the other 1,000 are
//      matched, the 1,000 late replies are dropped and counted, and 20 more calls on every session succeed;
//   4. hostile clients, each on a raw connection of its own (bad magic, garbage, a length above the slot size, a
//      length that differs from what arrived, more messages than credits) or a session that disconnects with a
//      call in flight: the server ends that session only, with the named reason (its report: protocol_violation,
//      credit_overrun, connection_reset) and disconnects the raw peer; a session kept open alongside answers a
//      call after each one.
// Each check prints what it expected and what it saw. Every wait has a limit (scaled by COVERBS_TIMEOUT_SCALE).
// Exit status 0 when every check held, 1 when one did not (or a limit passed), 2 for a bad command line.
#include <coverbs/outstanding_work.hpp>
#include <coverbs/coverbs.hpp>

#include "fixtures/messaging.hpp"
#include "fixtures/time_limit.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using clock_type = std::chrono::steady_clock;
using test::bytes;
using test::equal;
using test::transform;
constexpr auto with_ec = asio::as_tuple(asio::use_awaitable);

constexpr std::uint32_t slots = 128;     // receive slots per session, the server's and the client's
constexpr std::size_t slot_size = 1024;  // bytes of payload per slot

cv::session_options session_options() {
  cv::session_options o;
  o.messages.slot_size = slot_size;
  o.messages.recv_slots = slots;
  o.messages.send_slots = 128;
  o.connection.qp.max_send_wr = 256;
  o.connection.qp.max_recv_wr = 256;  // recv_slots + the 4 control receives
  return o;
}

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

awaitable<void> pause(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(with_ec);
}

/// Runs `io` until `done()` or `deadline`, looking every 50 ms. Not io.run_for: with Boost 1.81's io_uring backend
/// every run_for woken before its time submits a timeout removal whose result lands on another operation, often a
/// completion queue's readiness wait (lib/core/readiness.hpp). coverbs takes it for a wake-up, but the wait's own
/// poll request stays in the ring beside the next one: over 100,000 calls they pile up by the hundred on each
/// channel, and every event then wakes all of them (the calls phase slowed from 600 to 120 calls/s).
void run_until(asio::io_context& io, const std::function<bool()>& done, clock_type::time_point deadline) {
  asio::steady_timer tick(io);
  std::function<void()> look = [&] {
    if (done() || clock_type::now() >= deadline) return io.stop();
    tick.expires_after(std::chrono::milliseconds(50));
    tick.async_wait([&](const cv::error_code& ec) {
      if (!ec) look();
    });
  };
  io.restart();
  look();
  io.run();
  io.restart();
}

/// Waits until `done()` or `limit` (scaled) passes, looking every 20 ms. @returns done().
awaitable<bool> wait_until(std::function<bool()> done, std::chrono::seconds limit) {
  const auto deadline = clock_type::now() + test::scaled(limit);
  while (!done() && clock_type::now() < deadline) co_await pause(std::chrono::milliseconds(20));
  co_return done();
}

bytes text(std::string_view s) {
  bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

std::string untransform(std::span<const std::byte> in) {
  const bytes b = transform(in);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

/// "category:value (message)", the message up to its first parenthesis; "no error".
std::string describe(cv::error_code ec) {
  const std::string m = ec.message();
  return ec ? std::string(ec.category().name()) + ":" + std::to_string(ec.value()) + " (" + m.substr(0, m.find(" (")) + ")"
            : std::string("no error");
}

/// Prints what `ep` counted, for a run that stalls.
void print_endpoint(const std::string& who, const cv::message_endpoint& ep) {
  const auto st = ep.statistics();
  std::cout << who << ": credits " << ep.credits() << ", sent " << st.messages_sent << ", received "
            << st.messages_received << ", credit updates sent " << st.credit_updates_sent << " received "
            << st.credit_updates_received << ", credit waits " << st.credit_waits << ", in flight "
            << st.calls_in_flight << ", error " << describe(ep.error()) << std::endl;
}

/// Prints every counter of the port (hw_counters), for a run that stalls.
void print_port_counters(cv::device& dev, const std::string& host) {
  const std::filesystem::path dir = std::filesystem::path("/sys/class/infiniband") /
                                    ::ibv_get_device_name(dev.native_handle()->device) / "ports/1/hw_counters";
  std::error_code ec;
  std::ostringstream line;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream in(e.path());
    std::string v;
    in >> v;
    if (v != "0") line << " " << e.path().filename().string() << "=" << v;
  }
  std::cout << host << " port counters (not zero):" << line.str() << std::endl;
}

/// Prints the kernel's view of this process's io_uring instances (/proc/self/fdinfo: submission and completion
/// ring heads and tails, polls armed), for a run that stalls: a submission tail ahead of its head is work the
/// loop never submitted.
asio::io_context* diag_io = nullptr;
void print_io_uring_state(const std::string& host) {
  if (diag_io) std::cout << host << " outstanding work:\n" << cv::describe_outstanding_work(*diag_io) << std::endl;
  std::error_code ec;
  std::map<std::string, int> kinds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code lec;
    std::string t = std::filesystem::read_symlink(e.path(), lec).string();
    if (t.rfind("socket:", 0) == 0) t = "socket"; else if (t.rfind("pipe:", 0) == 0) t = "pipe";
    ++kinds[t];
  }
  std::cout << host << " fds:";
  for (auto& [k, n] : kinds) std::cout << " " << k << "=" << n;
  std::cout << std::endl;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code lec;
    if (std::filesystem::read_symlink(e.path(), lec).string() != "anon_inode:[io_uring]") continue;
    std::ifstream in("/proc/self/fdinfo/" + e.path().filename().string());
    std::string line;
    std::cout << host << " io_uring fd " << e.path().filename().string() << ":";
    while (std::getline(in, line))
      if (line.rfind("Sq", 0) == 0 || line.rfind("Cq", 0) == 0 || line.rfind("CachedSq", 0) == 0 ||
          line.rfind("CachedCq", 0) == 0 || line.rfind("  op=", 0) == 0 || line.rfind("PollList", 0) == 0)
        std::cout << " [" << line << "]";
    std::cout << std::endl;
  }
}

/// Prints what completion queue `cq` counted, whether its channel holds an event (a readable channel that no
/// wait reported is a lost wake-up above the kernel; an unreadable one with completions queued, an event the
/// kernel never raised), then polls it and prints what that found, for a run that stalls.
void print_cq(cv::completion_queue& cq) {
  const auto q = cq.stats();
  pollfd p{cq.native_handle()->channel ? cq.native_handle()->channel->fd : -1, POLLIN, 0};
  const int ready = p.fd >= 0 ? ::poll(&p, 1, 0) : -1;
  std::cout << "  cq: events " << q.events << " spurious " << q.spurious_wakeups << " stray " << q.stray_wakeups
            << " arms " << q.arms << " polls "
            << q.polls << " completions " << q.completions << " yields " << q.yields << "; channel fd " << p.fd
            << (ready > 0 ? " READABLE (an event waits)" : ready == 0 ? " not readable" : " poll failed") << std::endl;
  std::cout << "  cq.poll() now dispatched " << cq.poll() << std::endl;
}

// ---------------------------------------------------------------------------------------------------- server

struct server_state {
  std::vector<cv::session_report> ends;
  int held = 0, deferred = 0, never = 0;
  bool release = false, answer = false, stop = false;
  cv::device* dev = nullptr;
  std::vector<cv::session*> live;  // the sessions running, for "stats"
};

/// A request kept unanswered, and its answer (made before its slot was given back).
struct kept_request {
  cv::inbound_request req;
  bytes reply;
};

/// Answers `kept`, then echoes until the session fails.
awaitable<void> answer_then_echo(cv::message_endpoint& ep, std::vector<kept_request> kept) {
  for (auto& k : kept) {
    k.req.release();
    auto [ec] = co_await ep.async_reply(k.req, k.reply, with_ec);
    if (ec) co_return;
  }
  co_await test::echo_server(ep);
}

std::string control_answer(server_state& st, const std::string& q) {
  if (q == "held") return std::to_string(st.held);
  if (q == "deferred") return std::to_string(st.deferred);
  if (q == "never") return std::to_string(st.never);
  if (q == "rnr") return std::to_string(test::rnr_total(*st.dev));
  if (q == "release") return st.release = true, "ok";
  if (q == "answer") return st.answer = true, "ok";
  if (q == "stop") return st.stop = true, "ok";
  if (q == "stats") {
    for (cv::session* s : st.live) {
      print_endpoint("server, session of " + s->conn().remote_endpoint(), s->endpoint());
      print_cq(s->conn().cq());
    }
    print_port_counters(*st.dev, "host A");
    print_io_uring_state("host A");
    return "ok";
  }
  if (q.rfind("end ", 0) == 0) {
    for (const auto& r : st.ends)
      if (r.peer == q.substr(4))
        return describe(r.reason) + "\n" + r.diagnostic.substr(0, 800);
    return "";
  }
  return "unknown question: " + q;
}

awaitable<void> serve_session(server_state& st, cv::session& s) {
  st.live.push_back(&s);
  struct unlist {
    server_state& st;
    cv::session* s;
    ~unlist() { std::erase(st.live, s); }
  } unlisted{st, &s};
  cv::message_endpoint& ep = s.endpoint();
  auto [ec, first] = co_await ep.async_receive_request(with_ec);
  if (ec) co_return;
  std::istringstream mode{std::string(first.str())};
  const bytes ok = transform(first.bytes());
  first.release();
  if (auto [rec] = co_await ep.async_reply(first, ok, with_ec); rec) co_return;
  std::string part;
  mode >> part;
  if (part == "out-of-order") {
    int n = 0;
    std::uint64_t seed = 0;
    mode >> n >> seed;
    if (co_await test::answer_out_of_order(ep, seed, n)) co_await test::echo_server(ep);
  } else if (part == "hold") {  // every slot taken and kept (no release), until told
    std::vector<kept_request> held;
    while (held.size() < slots) {
      auto [e, req] = co_await ep.async_receive_request(with_ec);
      if (e) co_return;
      bytes reply = transform(req.bytes());
      held.push_back({std::move(req), std::move(reply)});
      ++st.held;
    }
    while (!st.release && !s.error()) co_await pause(std::chrono::milliseconds(20));
    co_await answer_then_echo(ep, std::move(held));
  } else if (part == "defer") {  // n requests taken (slots given back), answered when told
    int n = 0;
    mode >> n;
    std::vector<kept_request> deferred;
    for (int i = 0; i < n; ++i) {
      auto [e, req] = co_await ep.async_receive_request(with_ec);
      if (e) co_return;
      bytes reply = transform(req.bytes());
      req.release();
      deferred.push_back({std::move(req), std::move(reply)});
      ++st.deferred;
    }
    while (!st.answer && !s.error()) co_await pause(std::chrono::milliseconds(20));
    co_await answer_then_echo(ep, std::move(deferred));
  } else if (part == "never") {
    std::vector<cv::inbound_request> kept;
    for (;;) {
      auto [e, req] = co_await ep.async_receive_request(with_ec);
      if (e) co_return;
      kept.push_back(std::move(req));
      ++st.never;
    }
  } else if (part == "control") {
    for (;;) {
      auto [e, req] = co_await ep.async_receive_request(with_ec);
      if (e) co_return;
      const std::string answer = control_answer(st, std::string(req.str()));
      req.release();
      if (auto [re] = co_await ep.async_reply(req, transform(text(answer)), with_ec); re) co_return;
    }
  } else {
    co_await test::echo_server(ep);
  }
}

int serve(const std::string& address, std::uint16_t port) {
  asio::io_context io;
  diag_io = &io;
  server_state st;
  cv::listener l(io.get_executor(), address, port);
  st.dev = &l.get_device();
  cv::server_options o;
  o.session = session_options();
  o.on_end = [&](const cv::session_report& r) {
    std::cout << "messaging-pair server: session of " << r.peer << " ended: " << describe(r.reason)
              << (r.diagnostic.empty() ? "" : " — " + r.diagnostic) << "\n";
    st.ends.push_back(r);
  };
  asio::cancellation_signal stop_serving;
  cv::async_serve(l, [&](cv::session& s) { return serve_session(st, s); }, o,
                  asio::bind_cancellation_slot(stop_serving.slot(), asio::detached));
  std::cout << "messaging-pair server: listening on " << address << ":" << port << std::endl;
  const auto deadline = clock_type::now() + test::scaled(std::chrono::seconds(900));
  run_until(io, [&] { return st.stop; }, deadline);
  // The answer to "stop" leaves before the server does.
  run_until(io, [] { return false; }, clock_type::now() + std::chrono::milliseconds(500));
  stop_serving.emit(asio::cancellation_type::terminal);
  run_until(io, [] { return false; }, clock_type::now() + std::chrono::milliseconds(200));
  std::cout << "messaging-pair server: " << (st.stop ? "told to stop" : "FAILED: no stop within its limit") << ", "
            << st.ends.size() << " sessions ended" << std::endl;
  return st.stop ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------- client

int failures = 0;

/// Prints one check: what was expected, what was seen.
template <class T, class U>
bool expect(const std::string& what, const T& expected, const U& seen, bool held) {
  std::ostringstream line;
  line << (held ? "ok: " : "FAILED: ") << what << ": expected " << expected << ", saw " << seen;
  std::cout << line.str() << std::endl;
  failures += !held;
  return held;
}
template <class T>
bool expect_eq(const std::string& what, const T& expected, const T& seen) {
  return expect(what, expected, seen, expected == seen);
}
bool expect_at_least(const std::string& what, std::uint64_t least, std::uint64_t seen) {
  return expect(what, "at least " + std::to_string(least), seen, seen >= least);
}

/// A raw connection's messages, and how the server must end its session.
struct hostile_case {
  std::string what;
  std::vector<test::bytes> messages;
  cv::errc reason;
  std::string names;  ///< what the diagnostic names ("": not checked)
};

struct client {
  asio::any_io_executor ex;
  std::string address;
  std::uint16_t port;
  cv::device* dev = nullptr;  // this host's, from the first session
  cv::session control;
  std::vector<std::string> phases;

  /// A session playing `mode` at the server; empty (and a failure printed) when it cannot be made.
  awaitable<cv::session> open(const std::string& mode) {
    // The server boots at the same time on the other host: a refused connection is tried again (60 s).
    const auto give_up = clock_type::now() + test::scaled(std::chrono::seconds(60));
    for (;;) {
      auto [ec, s] = co_await cv::async_connect_session(ex, address, port, session_options(), with_ec);
      if (!ec) {
        auto [cec, reply] = co_await s.endpoint().async_call(text(mode), with_ec);
        if (!expect("the server takes the part '" + mode + "'", "its answer", cec ? describe(cec) : "the answer",
                    !cec && equal(reply.bytes(), transform(text(mode)))))
          co_return cv::session();
        co_return std::move(s);
      }
      if (ec != cv::errc::connection_refused || clock_type::now() > give_up) {
        expect("a session with " + address, "connected", describe(ec), false);
        co_return cv::session();
      }
      co_await pause(std::chrono::milliseconds(500));
    }
  }

  /// The server's answer to `question` on the control session ("" when the call failed).
  awaitable<std::string> ask(const std::string& question) {
    auto [ec, reply] = co_await control.endpoint().async_call(text(question), with_ec);
    if (ec) {
      expect("the server answers '" + question + "'", "an answer", describe(ec), false);
      co_return "";
    }
    co_return untransform(reply.bytes());
  }
  awaitable<long> ask_number(const std::string& question) {
    const std::string a = co_await ask(question);
    co_return a.empty() ? -1 : std::stol(a);
  }
  /// Waits until the server's count `question` reaches `n`.
  awaitable<bool> wait_count(const std::string& question, long n, std::chrono::seconds limit) {
    long seen = -1;
    const auto deadline = clock_type::now() + test::scaled(limit);
    while ((seen = co_await ask_number(question)) != n && seen >= 0 && clock_type::now() < deadline)
      co_await pause(std::chrono::milliseconds(100));
    co_return expect_eq("the server's count '" + question + "'", n, seen);
  }
  /// A's receiver-not-ready counters (through the server) and B's (this host).
  awaitable<std::string> rnr_both() {
    co_return "A " + co_await ask("rnr") + ", B " + std::to_string(test::rnr_total(*dev));
  }

  /// Closes `sessions`, each within 30 s (a close that does not end is reported, and left running).
  awaitable<void> close_all(std::vector<cv::session>& sessions) {
    for (auto& s : sessions) {
      if (!s) continue;
      auto closed = std::make_shared<bool>(false);
      s.async_close([closed](cv::error_code) { *closed = true; });
      if (!co_await wait_until([&] { return *closed; }, std::chrono::seconds(30)))
        expect("a session's close", "done within 30 s", "not done", false);
    }
    sessions.clear();
  }

  // 1. 100,000 calls over 8 sessions, 64 in flight each, answered out of order.
  awaitable<void> calls() {
    constexpr int connections = 8, in_flight = 64, per_connection = 100000 / connections;
    std::cout << "== calls: 100,000 over " << connections << " sessions, " << in_flight << " in flight each" << std::endl;
    std::vector<cv::session> sessions;
    for (int c = 0; c < connections; ++c) {
      sessions.push_back(co_await open("out-of-order " + std::to_string(per_connection) + " " + std::to_string(1000 + c)));
      if (!sessions.back()) co_return;
    }
    test::call_tally t;
    std::vector<int> next(connections, 0);
    for (int c = 0; c < connections; ++c)
      for (int w = 0; w < in_flight; ++w)
        asio::co_spawn(ex, test::keep_calling(sessions[c].endpoint(), c * 1000 + w, &next[c], per_connection, &t),
                       asio::detached);
    const auto start = clock_type::now();
    // Progress every 10 s, so that a slow wire shows how far it got.
    bool done = false;
    const auto deadline = clock_type::now() + test::scaled(std::chrono::seconds(300));
    for (int last = -1, still = 0; !done && clock_type::now() < deadline; last = t.done()) {
      done = co_await wait_until([&] { return t.done() == 100000 || t.failed > 0; }, std::chrono::seconds(10));
      std::cout << "calls: " << t.done() << " done after " << seconds(clock_type::now() - start) << " s" << std::endl;
      if (t.done() != last) {
        still = 0;
      } else if (++still == 2) {  // 20 s without a call completed: what each side counts, then give up
        for (int c = 0; c < connections; ++c) {
          print_endpoint("client, session " + std::to_string(c), sessions[c].endpoint());
          print_cq(sessions[c].conn().cq());
        }
        print_port_counters(*dev, "host B");
        print_io_uring_state("host B");
        co_await ask("stats");
      } else if (still == 4) {
        break;
      }
    }
    std::cout << "calls: " << t.done() << " calls in " << seconds(clock_type::now() - start) << " s" << std::endl;
    std::uint64_t stray = 0, spurious = 0;
    for (auto& s : sessions) {
      stray += s.conn().cq().stats().stray_wakeups;
      spurious += s.conn().cq().stats().spurious_wakeups;
    }
    std::cout << "calls: this host's completion queues saw " << stray << " stray and " << spurious
              << " spurious wake-ups" << std::endl;
    expect("the calls end within their limit", "100000 ended", t.done(), done);
    expect_eq("failed calls", 0, t.failed);
    expect_eq("replies that differ from the request XOR 0x5A", 0, t.mismatched);
    expect_eq("replies matched byte-exact", 100000, t.matched);
    expect_at_least("calls of 0 bytes", 1, t.empty_calls);
    expect_at_least("calls of the slot size (1024 bytes)", 1, t.full_calls);
    for (int c = 0; c < connections; ++c)
      expect_eq("session " + std::to_string(c) + "'s error", describe({}), describe(sessions[c].error()));
    co_await close_all(sessions);
  }

  // 2. A server that holds every slot: the client waits on credits, with no receiver-not-ready on either host.
  awaitable<void> credits() {
    constexpr int extra = 20, calls = static_cast<int>(slots) + extra;
    std::cout << "== credits: a server that holds all " << slots << " slots, " << calls << " calls" << std::endl;
    std::vector<cv::session> sessions;
    sessions.push_back(co_await open("hold"));
    if (!sessions.back()) co_return;
    cv::message_endpoint& ep = sessions[0].endpoint();
    // The mode's call took a credit and its reply gave it back: every credit is the client's.
    co_await wait_until([&] { return ep.credits() == slots; }, std::chrono::seconds(30));
    expect_eq("the client's credits before", std::uint64_t{slots}, std::uint64_t{ep.credits()});
    const std::string rnr_before = co_await rnr_both();
    int ok = 0, bad = 0;
    for (int i = 0; i < calls; ++i)
      asio::co_spawn(ex, [&, i]() -> awaitable<void> {
        const bytes req(16 + i, static_cast<std::byte>(i));
        auto [ec, reply] = co_await ep.async_call(req, with_ec);
        (!ec && equal(reply.bytes(), transform(req)) ? ok : bad)++;
      }, asio::detached);
    co_await wait_count("held", slots, std::chrono::seconds(60));
    co_await pause(std::chrono::milliseconds(test::scaled(std::chrono::seconds(3)).count() * 1000));  // RNR retries would show
    expect_eq("calls completed while every slot is held", 0, ok + bad);
    expect_eq("the client's credits while every slot is held", std::uint64_t{0}, std::uint64_t{ep.credits()});
    expect_at_least("the client's credit waits", extra, ep.statistics().credit_waits);
    expect_eq("the session's error while waiting", describe({}), describe(sessions[0].error()));
    expect_eq("receiver-not-ready counters while waiting", rnr_before, co_await rnr_both());
    co_await ask("release");
    const bool done = co_await wait_until([&] { return ok + bad == calls; }, std::chrono::seconds(120));
    expect("every call completes once released", calls, ok + bad, done);
    expect_eq("calls answered byte-exact once released", calls, ok);
    expect_eq("receiver-not-ready counters after", rnr_before, co_await rnr_both());
    co_await close_all(sessions);
  }

  // 3. 1,000 random calls cancelled mid-flight (sent, not answered yet).
  awaitable<void> cancellation() {
    constexpr int connections = 8, calls = 250, cancelled_per_connection = 125;
    std::cout << "== cancellation: " << connections * cancelled_per_connection << " of " << connections * calls
              << " calls in flight" << std::endl;
    std::vector<cv::session> sessions;
    for (int c = 0; c < connections; ++c) {
      sessions.push_back(co_await open("defer " + std::to_string(calls)));
      if (!sessions.back()) co_return;
    }
    std::vector<std::vector<std::unique_ptr<test::cancellable_call>>> states(connections);
    std::mt19937_64 rng(7);
    for (int c = 0; c < connections; ++c)
      for (int i = 0; i < calls; ++i) states[c].push_back(test::start_cancellable_call(sessions[c].endpoint(), rng));
    // Every request reaches the server, which answers none yet: then 125 random calls per session are cancelled.
    if (!co_await wait_count("deferred", connections * calls, std::chrono::seconds(120))) co_return;
    int not_aborted = 0, completed_early = 0;
    for (int c = 0; c < connections; ++c) {
      for (auto& s : states[c]) completed_early += s->ec.has_value();
      std::vector<int> order(calls);
      for (int i = 0; i < calls; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      order.resize(cancelled_per_connection);
      for (int i : order) states[c][i]->signal.emit(asio::cancellation_type::terminal);
      co_await asio::post(ex, asio::use_awaitable);  // the aborted completions were posted before: they ran
      for (int i : order) not_aborted += !(states[c][i]->ec && *states[c][i]->ec == asio::error::operation_aborted);
    }
    expect_eq("calls completed before any was answered", 0, completed_early);
    expect_eq("cancelled calls that did not complete with operation_aborted at once", 0, not_aborted);
    co_await ask("answer");
    const bool done = co_await wait_until([&] {
      for (int c = 0; c < connections; ++c) {
        for (auto& s : states[c])
          if (!s->ec) return false;
        const auto st = sessions[c].endpoint().statistics();
        if (st.replies_dropped != st.calls_abandoned) return false;
      }
      return true;
    }, std::chrono::seconds(120));
    expect("every call completes and every late reply is dropped", "all", done ? "all" : "not all", done);
    std::uint64_t dropped = 0, abandoned = 0;
    for (int c = 0; c < connections; ++c) {
      int ok = 0;
      for (auto& s : states[c]) ok += s->matched;
      expect_eq("session " + std::to_string(c) + "'s calls not cancelled, matched byte-exact",
                calls - cancelled_per_connection, ok);
      dropped += sessions[c].endpoint().statistics().replies_dropped;
      abandoned += sessions[c].endpoint().statistics().calls_abandoned;
    }
    expect_eq("calls abandoned (all had been sent)", std::uint64_t{connections * cancelled_per_connection}, abandoned);
    expect_eq("late replies dropped and counted", std::uint64_t{connections * cancelled_per_connection}, dropped);
    int more = 0;
    for (auto& s : sessions)
      for (int i = 0; i < 20; ++i)
        asio::co_spawn(ex, [&]() -> awaitable<void> {
          const bytes req(64, std::byte{1});
          auto [ec, reply] = co_await s.endpoint().async_call(req, with_ec);
          more += !ec && equal(reply.bytes(), transform(req));
        }, asio::detached);
    co_await wait_until([&] { return more == connections * 20; }, std::chrono::seconds(60));
    expect_eq("calls after the cancellations, every session usable", connections * 20, more);
    co_await close_all(sessions);
  }

  /// The server's report of the session whose peer was `peer`, once it ended: "category:value (message)\n
  /// diagnostic".
  awaitable<std::string> report_of(const std::string& peer) {
    std::string r;
    const auto deadline = clock_type::now() + test::scaled(std::chrono::seconds(30));
    while ((r = co_await ask("end " + peer)).empty() && clock_type::now() < deadline)
      co_await pause(std::chrono::milliseconds(100));
    co_return r;
  }

  /// Checks that the server ended the session of `peer` with `reason` (its diagnostic naming `names`) and that
  /// `healthy` still answers.
  awaitable<void> ended_alone(const std::string& what, const std::string& peer, cv::errc reason,
                              const std::string& names, cv::session& healthy) {
    const std::string r = co_await report_of(peer);
    const std::string seen_reason = r.substr(0, r.find('\n'));
    const std::string diagnostic = r.find('\n') == std::string::npos ? "" : r.substr(r.find('\n') + 1);
    expect_eq(what + ": the server's reason for ending the session", describe(reason), seen_reason);
    if (!names.empty())
      expect("the diagnostic", "one naming '" + names + "'", "'" + diagnostic + "'",
             diagnostic.find(names) != std::string::npos);
    const bytes req(100, std::byte{9});
    auto [ec, reply] = co_await healthy.endpoint().async_call(req, with_ec);
    expect(what + ": the session kept open alongside", "its call answered",
           ec ? describe(ec) : equal(reply.bytes(), transform(req)) ? "its call answered" : "a wrong answer",
           !ec && equal(reply.bytes(), transform(req)));
  }

  /// A raw connection (no endpoint) that sends `messages`, each a whole send.
  awaitable<void> hostile(const hostile_case& h, cv::session& healthy) {
    const std::string& what = h.what;
    const std::vector<bytes>& messages = h.messages;
    auto [ec, c] = co_await cv::async_connect(ex, address, port, {}, with_ec);
    if (!expect_eq(what + ": a raw connection", describe({}), describe(ec))) co_return;
    const std::string peer = c.local_endpoint();
    std::vector<std::byte> in(16 * 1100), out(messages.size() * 1100);
    cv::memory_region in_mr(c.pd(), in, cv::access::local_write), out_mr(c.pd(), out, cv::access::local_write);
    for (int i = 0; i < 16; ++i)  // what the server sends (its credit messages)
      c.qp().async_recv(cv::span_of(in_mr, i * 1100, 1100), asio::detached);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      std::memcpy(out.data() + i * 1100, messages[i].data(), messages[i].size());
      auto [sec, n] = co_await c.qp().async_send(cv::span_of(out_mr, i * 1100, messages[i].size()), with_ec);
      if (sec) break;  // the server disconnected us
    }
    co_await wait_until([&] { return !c.connected(); }, std::chrono::seconds(30));
    expect(what + ": the raw connection", "disconnected by the server", c.connected() ? "connected" : "disconnected",
           !c.connected());
    co_await ended_alone(what, peer, h.reason, h.names, healthy);
  }

  // 4. Hostile clients end only their own sessions.
  awaitable<void> hostiles() {
    std::cout << "== hostile clients" << std::endl;
    cv::session healthy = co_await open("echo");
    if (!healthy) co_return;
    auto header = [](cv::message_type type, std::uint32_t length, std::size_t total) {
      return test::header_bytes(type, length, total, 1000);  // 1000: what the raw connection's receives hold
    };
    bytes bad_magic = header(cv::message_type::data, 8, cv::message_header::size + 8);
    bad_magic[0] = std::byte{0x42};
    std::mt19937_64 rng(3);
    bytes garbage = test::random_bytes(rng, 300);
    garbage[0] = std::byte{0x00};  // not the magic, whatever the generator drew
    std::vector<bytes> overrun;
    for (std::uint32_t i = 0; i <= slots; ++i)  // the server granted `slots` data credits
      overrun.push_back(header(cv::message_type::data, 8, cv::message_header::size + 8));
    const std::vector<hostile_case> cases = {
        {"bad magic", {bad_magic}, cv::errc::protocol_violation, "magic"},
        {"garbage", {garbage}, cv::errc::protocol_violation, ""},
        {"a length above the slot size", {header(cv::message_type::data, 5000, cv::message_header::size)},
         cv::errc::protocol_violation, "above the slot size"},
        {"a length that differs from what arrived", {header(cv::message_type::data, 100, cv::message_header::size + 10)},
         cv::errc::protocol_violation, "differs"},
        {"more messages than credits", overrun, cv::errc::credit_overrun, "no data credit"},
    };
    for (const hostile_case& h : cases) co_await hostile(h, healthy);
    // A session that disconnects with a call in flight (the server answers none on it).
    {
      cv::session s = co_await open("never");
      if (!s) co_return;
      const std::string peer = s.conn().local_endpoint();
      std::optional<cv::error_code> call_ec;
      s.endpoint().async_call(asio::buffer("never answered", 14),
                              [&](cv::error_code ec, cv::inbound_message) { call_ec = ec; });
      co_await wait_count("never", 1, std::chrono::seconds(30));
      co_await s.async_close(with_ec);
      co_await wait_until([&] { return call_ec.has_value(); }, std::chrono::seconds(10));
      expect_eq("disconnect mid-call: the call in flight", describe(asio::error::operation_aborted),
                call_ec ? describe(*call_ec) : std::string("not completed"));
      const hostile_case mid_call{"disconnect mid-call", {}, cv::errc::connection_reset, ""};
      co_await ended_alone(mid_call.what, peer, mid_call.reason, mid_call.names, healthy);
    }
    expect_eq("the session kept open alongside: its error", describe({}), describe(healthy.error()));
    co_await healthy.async_close(with_ec);
  }

  awaitable<void> run() {
    control = co_await open("control");
    if (!control) co_return;
    dev = &control.conn().get_device();
    const auto start = clock_type::now();
    for (const std::string& p : phases) {
      if (p == "calls") co_await calls();
      if (p == "credits") co_await credits();
      if (p == "cancellation") co_await cancellation();
      if (p == "hostile") co_await hostiles();
    }
    co_await ask("stop");
    co_await control.async_close(with_ec);
    std::cout << "messaging-pair client: " << (failures ? "FAILED" : "every check held") << " ("
              << failures << " failed) in " << seconds(clock_type::now() - start) << " s" << std::endl;
  }
};

int run_client(const std::string& address, std::uint16_t port, std::vector<std::string> phases) {
  asio::io_context io;
  diag_io = &io;
  client c{io.get_executor(), address, port, nullptr, cv::session(), std::move(phases)};
  bool finished = false;
  asio::co_spawn(io, c.run(), [&](std::exception_ptr e) {
    finished = true;
    if (e) try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        expect("the client's run", "no exception", x.what(), false);
      }
  });
  const auto deadline = clock_type::now() + test::scaled(std::chrono::seconds(1200));
  run_until(io, [&] { return finished; }, deadline);
  if (!finished) expect("the client's run", "ended within its limit", "still running", false);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> all = {"calls", "credits", "cancellation", "hostile"};
  std::vector<std::string> phases(argv + std::min(argc, 4), argv + argc);
  const bool known = std::all_of(phases.begin(), phases.end(),
                                 [&](const std::string& p) { return std::find(all.begin(), all.end(), p) != all.end(); });
  if (argc < 4 || !known || (std::strcmp(argv[1], "--serve") != 0 && std::strcmp(argv[1], "--client") != 0) ||
      (std::strcmp(argv[1], "--serve") == 0 && argc != 4)) {
    std::cerr << "usage: messaging_pair --serve ADDR PORT | --client ADDR PORT [calls|credits|cancellation|hostile]...\n";
    return 2;
  }
  if (phases.empty()) phases = all;
  const auto port = static_cast<std::uint16_t>(std::stoi(argv[3]));
  try {
    return std::strcmp(argv[1], "--serve") == 0 ? serve(argv[2], port) : run_client(argv[2], port, phases);
  } catch (const std::exception& e) {
    std::cout << "messaging-pair: FAILED: " << e.what() << std::endl;
    return 1;
  }
}
