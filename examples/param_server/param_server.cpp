// param_server: a parameter server whose workers touch its memory only through memory windows.
//
// The server holds the parameter vector (64-bit integers) in one memory region. Each worker connects through
// rdma_cm and, over a small send/recv control protocol, gets a read-only type-2 window on that region: it
// pulls the parameters with one RDMA read. For each push it asks for a write/atomic window, adds its
// gradients with RDMA fetch-and-add, and says it is done; the server invalidates that window right away, so
// the key dies. Rounds are synchronous: push keys of a round are handed out once every worker has pulled, and
// when every worker has pushed, the server checks each sum against the totals computed from the known
// gradients. At the end, one worker pushes again with its last (invalidated) key and another tries to push
// through its read-only key: both must fail with wc_errc::rem_access_err, and the sums must not move.
#include <coverbs/coverbs.hpp>

#include "common/command_line.hpp"
#include "common/completions.hpp"
#include "common/device_watch.hpp"
#include "common/peer.hpp"
#include "common/run.hpp"

#include <coverbs_support/timings.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using example::clock;
using example::tuple;

constexpr const char* usage_text =
    "param_server: a parameter server with read-only and write/atomic memory windows, and its workers\n"
    "(a coverbs example).\n"
    "\n"
    "  param_server --self-test [--workers W] [--rounds R] [--params N] [--address ADDR]\n"
    "      the server and W workers (default 4) in one process and one io_context, on ADDR (default\n"
    "      10.77.0.1, the Soft-RoCE guest's rxe0), R rounds (default 10) over N parameters (default 256);\n"
    "      exit status 0 only if every sum was exact and the stale keys were refused.\n"
    "  param_server --listen ADDR PORT [--workers W] [--rounds R] [--params N]\n"
    "      serve W workers on ADDR:PORT (a numeric address of an RDMA device) for R rounds, then exit.\n"
    "      A peer takes a worker slot with its hello: one that sends nothing for 20 s, sends anything\n"
    "      else, or comes once every slot is taken is refused (a line on stderr says why) and the run\n"
    "      goes on with the others.\n"
    "  param_server --connect ADDR PORT\n"
    "      one worker; the server tells it its number, the worker count, the rounds and the parameters\n"
    "      (a refused connection is tried again for 10 s, so workers and server may start together).\n"
    "\n"
    "Each round a worker pulls every parameter (RDMA read through its read-only window) and checks it, then\n"
    "adds gradient(worker, round, j) to parameter j (one RDMA fetch-and-add per parameter through that\n"
    "round's write/atomic window, which the server invalidates as soon as the worker says it is done).\n"
    "Worker 0 finally pushes with its invalidated key and worker 1 through its read-only key: both must get\n"
    "rem_access_err. Limits: --workers 1..16, --rounds 1..1000, --params 1..65536.\n"
    "Every wait on the peer is bounded (20 s for a message; 60 s for an answer that waits for every\n"
    "worker; a disconnect's answer 20 s, 1 s once the port is down), and the device's events are read: a\n"
    "port going down ends the connections on it at once, reported as the port's error (errc::port_error).\n"
    "Run it where verbs work; without an RDMA device, in the Soft-RoCE guest, from the project folder:\n"
    "  tools/rxe-vm -- build/examples/param_server --self-test\n"
    "  tools/rxe-vm -- sh -c 'build/examples/param_server --listen 10.77.0.1 7472 --workers 2 & s=$!;\n"
    "                         build/examples/param_server --connect 10.77.0.1 7472 & w=$!;\n"
    "                         build/examples/param_server --connect 10.77.0.1 7472 && wait $w && wait $s'\n";

// --- the model: what every parameter must hold ---

std::uint64_t initial_value(std::size_t j) { return 1000000 * j; }
std::uint64_t gradient(unsigned worker, unsigned round, std::size_t j) {
  return 1 + 1000 * worker + 37 * round + j % 101;
}
/// Parameter `j` once `rounds_done` rounds of `workers` workers have been added in.
std::uint64_t expected_value(std::size_t j, unsigned workers, unsigned rounds_done) {
  std::uint64_t v = initial_value(j);
  for (unsigned r = 0; r < rounds_done; ++r)
    for (unsigned w = 0; w < workers; ++w)
      v += gradient(w, r, j);
  return v;
}
/// Parameters of `values` that differ from the expected ones.
std::size_t wrong_values(std::span<const std::uint64_t> values, unsigned workers, unsigned rounds_done) {
  std::size_t wrong = 0;
  for (std::size_t j = 0; j < values.size(); ++j)
    wrong += values[j] != expected_value(j, workers, rounds_done);
  return wrong;
}

// --- the control protocol ---

enum class kind : std::uint32_t {
  hello = 1,   ///< worker → server: first message
  welcome,     ///< server → worker: worker number, workers, rounds, params; `key` the read-only window
  want_push,   ///< worker → server: it has pulled for `round` and asks for a push window
  push_key,    ///< server → worker: `key` the write/atomic window of `round` (once every worker pulled)
  pushed,      ///< worker → server: every fetch-and-add of `round` completed
  round_done,  ///< server → worker: the window is invalidated; `sums_exact` once every worker pushed
  failed,      ///< server → worker: the round cannot complete (a worker was lost, a bind failed)
};

/// One control message, in host byte order (both ends on hosts of one byte order).
struct control_message {
  kind what = kind::hello;
  std::uint32_t round = 0;
  std::uint32_t worker = 0, workers = 0, rounds = 0, params = 0;
  std::uint32_t sums_exact = 0, reserved = 0;
  cv::remote_key key{};  ///< address, length in bytes, rkey
};
static_assert(std::is_trivially_copyable_v<control_message>);

/// One end of the control protocol on a connection: a receive kept posted for the next message, one message
/// out at a time, both in a small registered block of `pd` (the connection's protection domain).
class control_channel {
public:
  control_channel(cv::connection& conn, cv::protection_domain& pd)
      : qp_(conn.qp()), mr_(pd, std::as_writable_bytes(std::span(slots_)), cv::access::local_write),
        arrivals_(conn.get_executor()) {}

  /// Posts the receive for the next message (before the peer can send it: no receiver-not-ready wait).
  void expect() { qp_.async_recv(cv::span_of(mr_, 0, sizeof(control_message)), arrivals_.handler(0)); }

  /// The message the receive posted by `expect()` got, waiting until `deadline` at most (then
  /// `std::errc::timed_out`, the receive still posted). A message that is not one whole control message
  /// gives `std::errc::bad_message` (`received_bytes()` says how long it was).
  awaitable<std::pair<cv::error_code, control_message>> receive(clock::time_point deadline = clock::time_point::max()) {
    const example::completion<cv::received> c = co_await arrivals_.next(deadline);
    if (!c.ec) received_ = c.value.bytes;
    if (!c.ec && c.value.bytes != sizeof(control_message))
      co_return std::pair(cv::error_code(std::make_error_code(std::errc::bad_message)), control_message{});
    co_return std::pair(c.ec, slots_[0]);
  }

  /// Bytes of the last message received.
  std::size_t received_bytes() const noexcept { return received_; }

  awaitable<cv::error_code> send(control_message m) {
    slots_[1] = m;
    auto [ec, n] = co_await qp_.async_send(cv::span_of(mr_, sizeof(control_message), sizeof(control_message)), tuple);
    co_return ec;
  }

  /// Sends `m` and waits for the answer until `deadline` at most.
  awaitable<std::pair<cv::error_code, control_message>> request(control_message m, clock::time_point deadline) {
    expect();
    const cv::error_code ec = co_await send(m);
    const std::pair<cv::error_code, control_message> answer = co_await receive(deadline);
    co_return ec ? std::pair(ec, control_message{}) : answer;
  }

  /// Waits for a receive still posted (flushed once the connection is down).
  awaitable<void> drain() { co_await arrivals_.drain(); }

private:
  cv::queue_pair& qp_;
  std::array<control_message, 2> slots_{};  // [0] in, [1] out
  std::size_t received_ = 0;
  cv::memory_region mr_;
  example::completions<cv::received> arrivals_;
};

// --- server ---

struct param_server {
  unsigned workers, rounds;
  cv::protection_domain pd;
  cv::completion_queue cq;
  std::vector<std::uint64_t> values;  // the parameter vector
  cv::memory_region mr;               // over `values`; windows grant parts of its rights
  cv::connection_options options;
  asio::steady_timer event;                  // never expires; cancelled whenever a barrier moves or a worker is lost
  asio::cancellation_signal stop_accepting;  // emitted once every worker slot is taken, or a worker was lost
  example::device_watch& watch;              // the listener's device: a port going down fails the workers

  std::vector<unsigned> pulled, pushed;  // per round: workers that asked for their push key / have pushed
  std::vector<clock::time_point> round_started;
  std::vector<bool> exact;  // per round: every sum was exact once all its pushes were in
  unsigned next_worker = 0, workers_ended = 0, workers_lost = 0, rounds_exact = 0;
  unsigned peers_refused = 0;  // connections that never became workers (no hello, junk, every slot taken)
  std::size_t final_wrong = 0;
  statistics::timings read_binds, push_binds, invalidations, round_times;

  param_server(cv::listener& l, asio::io_context& io, unsigned w, unsigned r, std::size_t params,
               example::device_watch& dw)
      : workers(w), rounds(r), pd(l.get_device()), cq(io, l.get_device(), {.depth = 8192}), values(params),
        mr(pd, std::as_writable_bytes(std::span(values)),
           cv::access::local_write | cv::access::remote_read | cv::access::remote_write | cv::access::remote_atomic |
               cv::access::mw_bind),
        event(io, clock::time_point::max()), watch(dw), pulled(r), pushed(r), round_started(r), exact(r) {
    watch.watch(l.get_device());
    for (std::size_t j = 0; j < values.size(); ++j)
      values[j] = initial_value(j);
    options.pd = &pd;
    options.cq = &cq;
  }

  /// A barrier: counts the caller in at `round` of `arrived` (`pulled` or `pushed`) and waits for every worker.
  /// The last push of a round checks the sums. @returns false when a worker was lost.
  awaitable<bool> arrive(std::vector<unsigned>& arrived, unsigned round) {
    if (++arrived[round] == workers) {
      if (&arrived == &pushed) check_round(round);
      event.cancel();
    }
    while (arrived[round] < workers && workers_lost == 0)
      co_await event.async_wait(tuple);
    co_return arrived[round] == workers;
  }

  /// Every fetch-and-add of `round` has completed: each sum must be exact.
  void check_round(unsigned round) {
    const std::size_t wrong = wrong_values(values, workers, round + 1);
    exact[round] = wrong == 0;
    rounds_exact += exact[round];
    round_times.add(clock::now() - round_started[round]);
    if (wrong) std::fprintf(stderr, "param_server: round %u: %zu parameters are off\n", round, wrong);
  }

  void lose_worker() {
    ++workers_lost;
    event.cancel();
    stop_accepting.emit(asio::cancellation_type::terminal);  // the rounds cannot complete any more
  }
};

/// The answer to one control message from worker `id` (binds and invalidations go through its queue pair:
/// a type-2 key works only through the queue pair that bound it).
awaitable<control_message> answer(param_server& s, cv::queue_pair& qp, unsigned id, const control_message& in,
                                  cv::memory_window& pull_window, cv::memory_window& push_window) {
  control_message out;
  out.round = in.round;
  out.what = kind::failed;
  const bool round_ok = in.round < s.rounds;
  const cv::window_range whole;  // every window spans the whole vector
  if (in.what == kind::hello) {
    const auto start = clock::now();
    auto [ec, key] = co_await cv::bind_mw(qp, pull_window, s.mr, whole, cv::access::remote_read, tuple);
    s.read_binds.add(clock::now() - start);
    if (ec) co_return out;
    out = {kind::welcome, 0, id, s.workers, s.rounds, static_cast<std::uint32_t>(s.values.size()), 0, 0, key};
  } else if (in.what == kind::want_push && round_ok) {
    if (s.pulled[in.round] == 0) s.round_started[in.round] = clock::now();
    const auto start = clock::now();
    auto [ec, key] =
        co_await cv::bind_mw(qp, push_window, s.mr, whole, cv::access::remote_write | cv::access::remote_atomic, tuple);
    s.push_binds.add(clock::now() - start);
    const bool all_pulled = co_await s.arrive(s.pulled, in.round);
    if (ec || !all_pulled) co_return out;
    out.what = kind::push_key;
    out.key = key;
  } else if (in.what == kind::pushed && round_ok) {
    const auto start = clock::now();
    auto [ec] = co_await cv::invalidate(qp, push_window, tuple);  // the key is dead once this completes
    s.invalidations.add(clock::now() - start);
    const bool all_pushed = co_await s.arrive(s.pushed, in.round);
    if (ec || !all_pushed) co_return out;
    out.what = kind::round_done;
    out.sums_exact = s.exact[in.round];
  }
  co_return out;
}

/// Why a peer's control receive failed, in words: silent for `peer_timeout`, junk, or what ended the connection
/// (e.g. errc::port_error when the port went down, rather than the flush it caused).
std::string receive_failure(const cv::error_code& ec, const cv::connection& conn, const control_channel& control) {
  if (ec == std::errc::timed_out) return "it sent nothing for " + example::seconds_text(example::peer_timeout);
  if (ec == std::errc::bad_message)
    return "it sent " + std::to_string(control.received_bytes()) + " bytes, not a param_server control message (" +
           std::to_string(sizeof(control_message)) + " bytes)";
  const cv::error_code why = example::cause(ec, conn);
  if (why == cv::wc_errc::wr_flush_err && conn.error()) return conn.error().message();
  return why.message();
}

/// One peer's connection: answers its control messages until it goes away. It becomes a worker (takes a
/// worker slot) only with a well-formed hello; a peer that sends nothing for `peer_timeout`, sends junk or
/// comes once every slot is taken has its session ended with a line on stderr saying why, and the run goes
/// on with the others. A worker lost before its last round fails the rounds (they need every worker).
awaitable<void> serve_worker(param_server& s, cv::connection conn) {
  const std::string peer = conn.remote_endpoint();
  std::optional<unsigned> id;  // once its hello took a worker slot
  control_channel control(conn, s.pd);
  cv::memory_window pull_window(s.pd, cv::window_type::type2), push_window(s.pd, cv::window_type::type2);
  bool all_rounds = false;
  std::string why;  // what ended it early
  control.expect();
  for (;;) {
    auto [ec, in] = co_await control.receive(clock::now() + example::peer_timeout);
    if (ec) {
      why = receive_failure(ec, conn, control);
      break;
    }
    if (!id && in.what != kind::hello) {
      why = "its first message is not a hello (kind " + std::to_string(static_cast<std::uint32_t>(in.what)) + ")";
      break;
    }
    if (!id && s.next_worker == s.workers) {
      why = "every worker slot is taken";
      co_await control.send(control_message{.what = kind::failed});
      break;
    }
    if (!id) {
      id = s.next_worker++;
      if (s.next_worker == s.workers) s.stop_accepting.emit(asio::cancellation_type::terminal);
    }
    control.expect();  // `in` is a copy: the next message may land
    const control_message out = co_await answer(s, conn.qp(), *id, in, pull_window, push_window);
    const cv::error_code sent = co_await control.send(out);
    if (sent || out.what == kind::failed) {
      why = sent ? "sending the answer: " + example::cause(sent, conn).message() : "its request could not be served";
      break;
    }
    all_rounds = all_rounds || (out.what == kind::round_done && in.round + 1 == s.rounds);
  }
  // The worker's probes (stale keys) break the connection on purpose, after its last round.
  co_await example::disconnect_within(conn);
  co_await control.drain();
  if (!id) {
    ++s.peers_refused;
    std::fprintf(stderr, "param_server: %s is not a worker: %s; its connection is closed, the others go on\n",
                 peer.c_str(), why.c_str());
    co_return;
  }
  ++s.workers_ended;
  if (!all_rounds) {
    std::fprintf(stderr, "param_server: worker %u (%s) left before its last round: %s\n", *id, peer.c_str(),
                 why.c_str());
    s.lose_worker();
  }
}

/// Accepts connections until every worker slot is taken (a peer takes one with its hello, see serve_worker)
/// or a worker was lost.
awaitable<void> accept_workers(param_server& s, cv::listener& l, example::task_group& tasks) {
  while (s.next_worker < s.workers && s.workers_lost == 0) {
    auto [ec, conn] = co_await l.async_accept(s.options, asio::bind_cancellation_slot(s.stop_accepting.slot(), tuple));
    if (ec == asio::error::operation_aborted) co_return;  // every slot taken, or the listener closed
    if (ec) {
      std::fprintf(stderr, "param_server: accept failed: %s\n", ec.message().c_str());
      continue;
    }
    tasks.spawn(l.get_executor(), serve_worker(s, std::move(conn)), "param_server");
  }
}

// --- worker ---

struct worker_result {
  bool welcomed = false;
  unsigned id = 0, rounds_announced = 0, rounds = 0, rounds_exact = 0;
  std::size_t params = 0;
  std::size_t pulls = 0, pulls_exact = 0, fetch_adds = 0;
  bool probed = false;
  cv::error_code probe, error;
  std::string step;             ///< what the worker was doing when `error` happened
  statistics::timings pull, push;  // one RDMA read of the vector; one round's fetch-and-adds
};

/// The rounds, on a connected worker: pull, check, push, report; then the final pull and the probe.
/// How long a worker waits for an answer that waits for every worker (a push key, a round's end): the
/// slowest worker's step, bounded by the server's own peer_timeout per worker.
constexpr auto barrier_timeout = 3 * example::peer_timeout;

awaitable<cv::error_code> work(cv::connection& conn, control_channel& control, std::vector<std::uint64_t>& words,
                               cv::memory_region& mr, worker_result& r) {
  cv::queue_pair& qp = conn.qp();
  const control_message hello{kind::hello};
  r.step = "waiting for the server's welcome";
  auto [hec, welcome] = co_await control.request(hello, clock::now() + example::peer_timeout);
  if (hec || welcome.what != kind::welcome) co_return hec ? hec : cv::make_error_code(cv::errc::connection_refused);
  r.welcomed = true;
  r.id = welcome.worker;
  r.rounds_announced = welcome.rounds;
  r.params = welcome.params;
  const std::size_t n = welcome.params;
  const cv::remote_key read_key = welcome.key;
  words.assign(2 * n, 0);  // [0, n): pulled parameters; [n, 2n): the old values fetch-and-add returns
  mr = cv::memory_region(conn.pd(), std::as_writable_bytes(std::span(words)), cv::access::local_write);
  const cv::registered_span pulled = cv::span_of(mr, 0, n * 8);
  auto pull = [&](unsigned rounds_done) -> awaitable<cv::error_code> {
    const auto start = clock::now();
    auto [ec, bytes] = co_await qp.async_read(pulled, read_key, tuple);
    r.pull.add(clock::now() - start);
    ++r.pulls;
    if (!ec && wrong_values(std::span(words).first(n), welcome.workers, rounds_done) == 0) ++r.pulls_exact;
    co_return ec;
  };

  cv::remote_key push_key;
  for (unsigned round = 0; round < welcome.rounds; ++round) {
    const cv::error_code pull_error = co_await pull(round);
    if (pull_error) co_return pull_error;
    const control_message want{kind::want_push, round};
    r.step = "waiting for the push key of round " + std::to_string(round);
    auto [wec, granted] = co_await control.request(want, clock::now() + barrier_timeout);
    if (wec || granted.what != kind::push_key) co_return wec ? wec : cv::make_error_code(cv::errc::connection_refused);
    push_key = granted.key;
    const auto start = clock::now();
    example::completions<std::uint64_t> adds(conn.get_executor());
    for (std::size_t j = 0; j < n; ++j)
      qp.async_fetch_add(cv::span_of(mr, (n + j) * 8, 8), push_key.slice(j * 8, 8), gradient(r.id, round, j),
                         adds.handler(j));
    const std::size_t failed = co_await adds.drain();
    r.push.add(clock::now() - start);
    r.fetch_adds += n - failed;
    if (failed) co_return cv::make_error_code(cv::wc_errc::wr_flush_err);
    const control_message done{kind::pushed, round};
    r.step = "waiting for the end of round " + std::to_string(round);
    auto [dec, closed] = co_await control.request(done, clock::now() + barrier_timeout);
    if (dec || closed.what != kind::round_done) co_return dec ? dec : cv::make_error_code(cv::errc::connection_refused);
    ++r.rounds;
    r.rounds_exact += closed.sums_exact;
  }
  const cv::error_code last_pull_error = co_await pull(welcome.rounds);
  if (last_pull_error) co_return last_pull_error;

  // Probes; each fails the connection (a remote access error moves both queue pairs to the error state).
  if (r.id <= 1) {
    const cv::remote_key target = r.id == 0 ? push_key : read_key;  // invalidated / read-only
    r.probed = true;
    auto [pec, old] = co_await qp.async_fetch_add(cv::span_of(mr, n * 8, 8), target.slice(0, 8), 1, tuple);
    r.probe = pec;
  }
  co_return cv::error_code{};
}

awaitable<void> run_worker(asio::any_io_executor ex, example::command_line where, example::device_watch& watch,
                           worker_result& r) {
  const cv::connect_options options;  // its own protection domain and completion queue
  auto [ec, conn] = co_await example::connect_patiently(ex, where, options);
  if (ec) {
    r.error = ec;
    r.step = "connecting to " + where.address + ":" + std::to_string(where.port);
    co_return;
  }
  watch.watch(conn.get_device());  // a port going down fails this connection at once, as errc::port_error
  control_channel control(conn, conn.pd());
  std::vector<std::uint64_t> words;
  cv::memory_region mr;
  r.error = example::cause(co_await work(conn, control, words, mr, r), conn);
  co_await example::disconnect_within(conn);
  co_await control.drain();
}

// --- report ---

/// Every round done with exact sums, every pull exact, every fetch-and-add through, the probe refused.
bool worker_ok(const worker_result& r) {
  return !r.error && r.welcomed && r.rounds == r.rounds_announced && r.rounds_exact == r.rounds &&
         r.pulls == r.rounds + std::size_t{1} && r.pulls_exact == r.pulls && r.fetch_adds == r.rounds * r.params &&
         (!r.probed || r.probe == cv::wc_errc::rem_access_err);
}

void print_workers(const std::vector<worker_result>& results) {
  std::size_t pulls = 0, pulls_exact = 0, fetch_adds = 0;
  statistics::timings pull, push;
  std::vector<const worker_result*> by_id;
  for (const worker_result& r : results) {
    pulls += r.pulls;
    pulls_exact += r.pulls_exact;
    fetch_adds += r.fetch_adds;
    pull.merge(r.pull);
    push.merge(r.push);
    by_id.push_back(&r);
  }
  std::string rounds;  // per worker: rounds the server found exact / rounds announced
  for (const worker_result& r : results)
    rounds += (rounds.empty() ? "" : ", ") + std::to_string(r.rounds_exact) + "/" + std::to_string(r.rounds_announced);
  std::printf("  worker rounds    : %s with exact sums\n", rounds.c_str());
  std::printf("  worker pulls     : %zu/%zu exact; RDMA read of the vector: %s\n", pulls_exact, pulls,
              pull.summary().c_str());
  std::printf("  worker pushes    : %zu fetch-and-adds; one round's: %s\n", fetch_adds, push.summary().c_str());
  std::sort(by_id.begin(), by_id.end(), [](auto* a, auto* b) { return a->id < b->id; });
  for (const worker_result* r : by_id) {
    const char* key = r->id == 0 ? "invalidated push" : "read-only";
    if (r->probed && r->probe == cv::wc_errc::rem_access_err)
      std::printf("  stale key        : worker %u pushed through its %s key: wc_errc::rem_access_err, as expected\n",
                  r->id, key);
    else if (r->probed)
      std::printf("  stale key        : worker %u pushed through its %s key: %s, NOT rem_access_err\n", r->id, key,
                  r->probe ? r->probe.message().c_str() : "it succeeded");  // an empty code says "Success"
    if (r->error)
      std::printf("  worker %u error   : %s: %s%s\n", r->id, r->step.c_str(), r->error.message().c_str(),
                  r->error == std::errc::timed_out ? " (the server did not answer in time)" : "");
  }
}

void print_server(const param_server& s) {
  const cv::window_counters w = cv::window_statistics();
  std::printf("  read-only windows: %zu bound (type 2, one per worker): %s\n", s.read_binds.count(),
              s.read_binds.summary().c_str());
  std::printf("  push windows     : bound %s\n", s.push_binds.summary().c_str());
  std::printf("                     invalidated right after each push: %s\n", s.invalidations.summary().c_str());
  std::printf("  rounds           : %u/%u with exact sums; pull-to-check per round: %s\n", s.rounds_exact, s.rounds,
              s.round_times.summary().c_str());
  std::printf("  final sums       : %zu of %zu parameters off (after the refused pushes)\n", s.final_wrong,
              s.values.size());
  std::printf("  peers refused    : %u (connections that never became workers: no hello, junk, or no slot left)\n",
              s.peers_refused);
  std::printf("  window counters  : %llu binds, %llu failed, %llu invalidations\n",
              static_cast<unsigned long long>(w.binds), static_cast<unsigned long long>(w.binds_failed),
              static_cast<unsigned long long>(w.invalidations));
}

bool server_ok(const param_server& s) {
  return s.rounds_exact == s.rounds && s.final_wrong == 0 && s.workers_lost == 0 && s.workers_ended == s.workers;
}

// --- roles ---

/// Every role: the server (--listen, --self-test) and the workers (--connect: one; --self-test: `workers`), on
/// one io_context.
int run(const example::command_line& cmd, unsigned workers, unsigned rounds, std::size_t params) {
  asio::io_context io;
  example::task_group tasks;
  example::device_watch watch(io.get_executor(), "param_server");  // the devices' events: a port going down
  std::optional<cv::listener> listener = cmd.listen(io.get_executor());
  std::optional<param_server> server;
  example::command_line where = cmd;
  if (cmd.serving()) {
    server.emplace(*listener, io, workers, rounds, params, watch);
    where.port = listener->local_port();
  }
  std::vector<worker_result> results(cmd.self_test() ? workers : cmd.connecting() ? 1 : 0);
  const char* what = cmd.self_test() ? "param_server self-test"
                     : cmd.serving() ? "param_server"
                                     : "param_server worker";
  if (cmd.serving())
    std::printf("%s on %s:%u (device %s): %u workers x %u rounds, %zu parameters (%zu bytes, one region)\n", what,
                where.address.c_str(), where.port, listener->get_device().name().c_str(), workers, rounds, params,
                params * 8);
  else
    std::printf("%s of %s:%u\n", what, where.address.c_str(), where.port);
  std::fflush(stdout);

  if (cmd.serving()) tasks.spawn(io, accept_workers(*server, *listener, tasks), what);
  for (worker_result& r : results)
    tasks.spawn(io, run_worker(io.get_executor(), where, watch, r), what);
  const example::run_result outcome = example::run_tasks(io, tasks, cmd);
  watch.close();

  bool ok = tasks.failed == 0 && std::all_of(results.begin(), results.end(), worker_ok);
  if (cmd.serving()) {
    server->final_wrong = wrong_values(server->values, workers, rounds);
    print_server(*server);
    ok = ok && server_ok(*server);
  }
  if (cmd.connecting()) print_workers(results);
  if (cmd.self_test()) {  // worker 0 and worker 1 (when there is one) each probed a dead key
    const auto probes = std::count_if(results.begin(), results.end(), [](const worker_result& r) { return r.probed; });
    ok = ok && probes == (workers >= 2 ? 2 : 1);
  }
  return example::verdict(what, ok, outcome);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t workers = 4, rounds = 10, params = 256;
  constexpr unsigned serving = example::in_self_test | example::in_listen;  // a worker learns them from the server
  return example::run_main(argc, argv, "param_server", usage_text,
                           {{"--workers", &workers, 1, 16, serving},
                            {"--rounds", &rounds, 1, 1000, serving},
                            {"--params", &params, 1, 65536, serving}},
                           [&](const example::command_line& cmd) {
                             return run(cmd, static_cast<unsigned>(workers), static_cast<unsigned>(rounds), params);
                           });
}
