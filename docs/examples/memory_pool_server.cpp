// memory_pool_server: the storage scenario — one large memory region over a memory pool, a type-2 memory
// window per client and right, compaction that revokes every key, and clients that recover from it.
//
//   memory_pool_server --listen ADDR PORT [--pool-size BYTES] [--slot-size BYTES] [--tenants-per-connection N]
//                      [--hold-seconds S] [--json]
//   memory_pool_server --connect ADDR PORT [--clients N] [--ops N] [--size BYTES] [--after-compaction] [--json]
//   memory_pool_server --connect ADDR PORT --admin compact [--waiting N] | --admin status | --admin shutdown
//   memory_pool_server --connect ADDR PORT --grab N
//
// Server: registers the pool (one memory region with local_write | remote_read | remote_write | mw_bind)
// and listens through rdma_cm. The pool is two halves of slots; each client ("tenant", named by a 64-bit
// id it picks) owns one slot of the current half. A tenant's keys are two leases from a window_pool,
// bound through that client's own connection (a type-2 key works only through the queue pair that bound
// it): a remote_write window it writes through and a remote_read window it reads back through.
// Compaction revokes every window (each key is dead when its revocation completes), copies the live
// slots, packed, into the other half, flips halves and binds fresh windows for every healthy connection.
//
// A tenant belongs to the connection that asked for it; one connection may hold at most
// --tenants-per-connection of them (default 1; past it get_keys is refused with `tenant_limit`). When a
// connection ends — bye-less disconnect, a queue-pair error, a peer killed (its kernel disconnects its
// rdma_cm id: RDMA_CM_EVENT_DISCONNECTED flushes the server's posted receive) — the server notices at once,
// even while that connection waits for a compaction, revokes its windows, and releases its tenants: each
// slot is held --hold-seconds (default 30) for a reconnect presenting the same id (how a client recovers
// from a revoked key, below), then freed; a new tenant that finds no free slot takes the one held longest
// at once. A connection that presents an id another live connection holds takes the tenant over (the id,
// 64 random bits, is the client's credential); the other connection's windows are revoked first. (A peer
// whose host vanishes without a disconnect is noticed only when the server next sends to it: no keepalive.)
// A request sent as a send-with-invalidate of a key the connection was not granted (coverbs reports
// errc::foreign_remote_invalidation) is refused with `foreign_invalidation` and ends that connection.
//
// Client: each session connects, asks for its keys, writes --ops blocks of --size bytes through the write
// window and reads each back through the read window, comparing the bytes. With --after-compaction it
// then waits for the next compaction (saying so on stderr; it gives up after --timeout) and carries on
// with the keys it has, as a client racing with compaction would: its RDMA write through the revoked key
// fails with wc_errc::rem_access_err, which moves its queue pair (and the server's end) to the error
// state. It recovers by asking again: it reconnects, gets fresh keys, reads back what it wrote before the
// compaction (now in the other half) and writes and verifies once more. An admin connection (any client
// may send the same control messages) starts a compaction — once N sessions wait for one; the server
// refuses an N above its slot count at once —, asks for the slots free and held, or shuts the server down.
// --grab N asks keys for N fresh ids on one connection, prints how many it got and holds them (until a
// compaction, --timeout, or being killed): a check of --tenants-per-connection.
//
// Control messages are `message`s sent with IBV_WR_SEND over the same connection; the data moves with
// RDMA write and read only. Every process prints its statistics at the end (one JSON line with --json).
// Exit status: 0 when everything held, 1 when something failed, 2 for a bad command line.
//
// Standalone, in the Soft-RoCE guest (rdma_cm on rxe0's address 10.77.0.1; --help prints this too):
//   tools/rxe-vm -- sh -c 'S=build/docs/memory_pool_server A="10.77.0.1 7471"
//     $S --listen $A &
//     $S --connect $A --clients 2 --after-compaction & c=$!
//     $S --connect $A --admin compact --waiting 2; wait $c
//     $S --connect $A --admin shutdown; wait'
#include <coverbs/coverbs.hpp>

#include "example_support.hpp"
#include "../../tools/json_output.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unistd.h>
#include <utility>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
namespace json = json_output::json;
using asio::awaitable;
using asio::use_awaitable;
using namespace std::chrono_literals;

namespace {

constexpr auto tuple = asio::as_tuple(use_awaitable);
using clock_type = std::chrono::steady_clock;

double micros_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

// ---------------------------------------------------------------------------------------------------------
// Control messages

enum class command : std::uint32_t {
  get_keys = 1,     ///< client → server: my keys (tenant); granted now if I have none on this connection
  wait_compaction,  ///< client → server: reply when the next compaction is done
  compact,          ///< admin → server: compact once `count` sessions wait for it
  shutdown,         ///< admin → server: stop accepting, end every session, print statistics, exit
  bye,              ///< client → server: I am done; free my slot (a tenant of this connection)
  status,           ///< admin → server: slots per half, free, held for a reconnect
  hello = 0x80,     ///< server → client, first on a connection: the server's receive is posted, go ahead
  reply = 0x100,    ///< server → client, to any of the above
};

/// Why the server refused a request (`message::status`).
enum class refusal : std::int32_t {
  none = 0,
  bad_request,
  no_free_slot,
  barrier_timed_out,
  no_compaction,
  shutting_down,
  grant_failed,
  too_many_waiting,   ///< compact: more sessions to wait for than the pool has slots (`count`: the slots)
  tenant_limit,       ///< get_keys: this connection holds --tenants-per-connection tenants (`count`: that)
  tenant_taken_over,  ///< get_keys: another connection presented the same id meanwhile and took it
  not_your_tenant,    ///< bye: no tenant of this id belongs to this connection
  connection_ended,   ///< the connection ended while the request waited (never delivered)
  /// The request came as a send-with-invalidate of a key this connection was not granted: the server ends
  /// the connection.
  foreign_invalidation
};

const char* to_string(refusal r) {
  switch (r) {
  case refusal::none: return "ok";
  case refusal::bad_request: return "bad request";
  case refusal::no_free_slot: return "no free slot in the pool (raise --pool-size or lower --slot-size)";
  case refusal::barrier_timed_out: return "not enough sessions waited for the compaction within 60 s";
  case refusal::no_compaction: return "no compaction came within 120 s";
  case refusal::shutting_down: return "the server is shutting down";
  case refusal::grant_failed: return "binding a window failed (see the server's output)";
  case refusal::too_many_waiting: return "more sessions to wait for than the pool has slots";
  case refusal::tenant_limit:
    return "this connection already holds as many tenants as the server allows one connection (its "
           "--tenants-per-connection): say bye for one, or use another connection";
  case refusal::tenant_taken_over: return "another connection presented this tenant's id and took it over";
  case refusal::not_your_tenant: return "no tenant of this id belongs to this connection";
  case refusal::connection_ended: return "the connection ended";
  case refusal::foreign_invalidation:
    return "the request came as a send-with-invalidate naming a key this connection was not granted; the "
           "server ends the connection (send requests with a plain send)";
  }
  return "unknown refusal";
}

/// One control message, either way. Sent as bytes (IBV_WR_SEND), so every field is in host byte order:
/// both ends on machines of one endianness.
struct message {
  static constexpr std::uint32_t magic_value = 0x6d706f6f;  // "mpoo"
  std::uint32_t magic = magic_value;
  command op = command::reply;
  refusal status = refusal::none;
  std::uint32_t count = 0;        ///< compact: sessions to wait for; hello, refused compact: slots per half
  std::uint64_t tenant = 0;       ///< get_keys / bye: the client's id (kept across reconnects)
  std::uint64_t generation = 0;   ///< reply: compactions done so far
  cv::remote_key write_key{};     ///< reply to get_keys: {address, length in bytes, rkey}, remote_write
  cv::remote_key read_key{};      ///< reply to get_keys: the same bytes, remote_read
  std::uint64_t revoked = 0;      ///< reply to compact: windows revoked
  std::uint64_t granted = 0;      ///< reply to compact: windows bound afresh
  std::uint64_t moved_bytes = 0;  ///< reply to compact: bytes copied to the other half
  std::uint64_t took_us = 0;      ///< reply to compact: revoke + copy + re-grant, microseconds
  std::uint32_t free_slots = 0;   ///< reply to status: slots of the current half no tenant holds
  std::uint32_t held_slots = 0;   ///< reply to status: slots held for a reconnect (their connection ended)
};

/// Keeps one receive posted ahead of the message it is for, so a peer's send never meets an empty receive
/// queue: rdma_cm sets the RNR timer to its slowest, so a send that arrives early waits 655 ms before its
/// retry. Completions go through a channel that the handler keeps alive, so a receive flushed after its
/// owner is gone is harmless.
///
/// The first message on a connection is the server's hello, sent once the server's receive is posted; the
/// client sends nothing before it. The client may post its own first receive only after registering its
/// buffers, so it lowers its queue pair's RNR timer to 0.64 ms first (`shorten_rnr_timer`): a hello that
/// arrives early is retried at once instead of after 655 ms.
class receiver {
public:
  using channel = asio::experimental::channel<void(cv::error_code, cv::received)>;
  explicit receiver(const asio::any_io_executor& ex) : channel_(std::make_shared<channel>(ex, 1)) {}

  /// Posts a receive of at most `into.size()` bytes; when it fails (the connection ended), `on_error` runs
  /// first, from the completion, whether or not anyone awaits `next()`.
  void post(cv::queue_pair& qp, cv::registered_span into, std::function<void()> on_error = {}) {
    qp.async_recv(into, [ch = channel_, on_error = std::move(on_error)](cv::error_code ec, cv::received r) {
      if (ec && on_error) on_error();
      ch->try_send(ec, r);
    });
  }
  /// The result of the receive posted last: {error, received}.
  awaitable<std::tuple<cv::error_code, cv::received>> next() { return channel_->async_receive(tuple); }

private:
  std::shared_ptr<channel> channel_;
};

/// Sleeps in steps of `step` until `done()` holds or `limit` has passed. @returns done().
template <class Pred>
awaitable<bool> wait_until(Pred done, clock_type::duration limit, clock_type::duration step = 2ms) {
  const auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  const auto deadline = clock_type::now() + limit;
  while (!done() && clock_type::now() < deadline) {
    timer.expires_after(step);
    co_await timer.async_wait(tuple);
  }
  co_return done();
}

// ---------------------------------------------------------------------------------------------------------
// Statistics

/// `x` to a tenth, as the statistics print it.
double tenth(double x) { return json_output::rounded(x, 1); }

/// Latency samples in microseconds.
struct samples {
  std::vector<double> values;
  void add(double us) { values.push_back(us); }
  /// "median 120.5, p99 480.2, max 512.0 (1600)" (tools/statistics.hpp says how they are taken).
  std::string text() const {
    if (values.empty()) return "none";
    const statistics::summary s = statistics::summarize(values);
    char b[128];
    std::snprintf(b, sizeof b, "median %.1f, p99 %.1f, max %.1f (%zu)", s.median, s.p99, s.max, s.count);
    return b;
  }
  /// {count, median, p99, max, values}: the samples too, so results of several processes can be merged.
  json::object to_json() const {
    const statistics::summary s = statistics::summarize(values);
    json::array all;
    for (double v : values)
      all.push_back(tenth(v));
    return {{"count", s.count},
            {"median", tenth(s.median)},
            {"p99", tenth(s.p99)},
            {"max", tenth(s.max)},
            {"values", std::move(all)}};
  }
};

// ---------------------------------------------------------------------------------------------------------
// Server

constexpr std::size_t message_bytes = sizeof(message);

/// Queue-pair sizes of a control connection: a handful of sends and one receive in flight.
cv::queue_pair_options small_queue_pair() {
  cv::queue_pair_options q;
  q.max_send_wr = 16;
  q.max_recv_wr = 4;
  return q;
}

struct server_config {
  std::string address = "10.77.0.1";
  std::uint16_t port = 7471;
  std::size_t pool_size = 64u << 20;       ///< bytes, both halves
  std::size_t slot_size = 1u << 20;        ///< bytes per tenant
  std::size_t tenants_per_connection = 1;  ///< tenants one connection may hold
  std::chrono::seconds hold{30};  ///< how long a released tenant's slot waits for a reconnect; 0: freed at once
  std::string ready_file;         ///< written with the port once listening
  bool json = false;
};

/// One accepted connection. Destruction order matters: the leases are dead (revoked and awaited) before
/// anything goes; the connection goes before its completion queue.
struct session {
  session(asio::io_context& io, cv::device& dev) : cq(io, dev, cq_options()), wake(io), in(io.get_executor()) {}
  static cv::completion_queue_options cq_options() {
    cv::completion_queue_options o;
    o.depth = 64;
    return o;
  }

  cv::completion_queue cq;
  std::vector<std::byte> buffers = std::vector<std::byte>(2 * message_bytes);  ///< [inbox | outbox]
  cv::memory_region mr;  ///< over `buffers`, in the server's protection domain
  cv::connection conn;
  cv::window_lease write_lease, read_lease;
  std::uint64_t tenant_id = 0;  ///< 0: none yet (an admin connection)
  bool waiting = false;         ///< parked in wait_compaction
  asio::steady_timer wake;      ///< what a waiting session sleeps on; cancelled by a compaction
  receiver in;

  std::vector<std::uint64_t> owned;  ///< the tenants this connection holds (at most --tenants-per-connection)
  bool ended = false;                ///< its receive failed: the peer is gone or the queue pair broke

  cv::registered_span inbox() const { return cv::span_of(mr, 0, message_bytes); }
  cv::registered_span outbox() const { return cv::span_of(mr, message_bytes, message_bytes); }
  /// The connection is over (from its receive's completion): a wait for a compaction ends now.
  void end() {
    ended = true;
    wake.cancel();
  }
};

/// A client's storage: `slot_size` bytes at `offset` in the pool (in the current half), and whose it is.
struct tenant {
  std::size_t offset = 0;
  /// The connection it belongs to; null once that one ended without a bye: the slot is then held for a
  /// reconnect with the same id until `held_until`.
  const session* owner = nullptr;
  clock_type::time_point held_until{};
};

class pool_server {
public:
  pool_server(asio::io_context& io, const server_config& config)
      : io_(io), config_(config), listener_(io.get_executor(), config.address, config.port, listener_options()),
        pd_(example::listening_device(listener_, config.address)), pool_memory_(config.pool_size),
        slots_per_half_(config.pool_size / 2 / config.slot_size), slot_used_(slots_per_half_, false), sweep_(io) {}

  /// Registers the pool, listens and serves until `stop()`; returns once every session has ended.
  awaitable<void> run();
  /// Stops accepting and ends every session (from the loop's thread).
  void stop();
  /// Prints the statistics (text, or one JSON line).
  void report() const;
  /// The device the server listens on, serves from, and whose events `run_server` reads.
  cv::device& device() const noexcept { return listener_.get_device(); }

private:
  static cv::listener_options listener_options() {
    cv::listener_options o;
    o.connection.qp = small_queue_pair();
    return o;
  }
  awaitable<void> serve(std::shared_ptr<session> s);
  awaitable<message> handle(session& s, const message& request);
  awaitable<message> get_keys(session& s, std::uint64_t tenant_id);
  awaitable<message> compact(std::uint32_t waiters);
  awaitable<message> wait_compaction(session& s);
  awaitable<message> leave(session& s, std::uint64_t tenant_id);
  message status() const;
  awaitable<cv::error_code> grant(session& s);
  awaitable<void> revoke(session& s, std::uint64_t& counter);
  awaitable<void> take_over(session& s, std::uint64_t tenant_id);
  std::optional<std::size_t> take_slot();
  std::map<std::uint64_t, tenant>::iterator free_tenant(std::map<std::uint64_t, tenant>::iterator t);
  void release(session& s);
  awaitable<void> expire_held();

  asio::io_context& io_;
  server_config config_;
  cv::listener listener_;  // first: its device view outlives everything below
  cv::protection_domain pd_;
  std::vector<std::byte> pool_memory_;
  cv::memory_region pool_mr_;
  std::optional<cv::window_pool> windows_;
  std::list<std::shared_ptr<session>> sessions_;
  std::map<std::uint64_t, tenant> tenants_;
  std::size_t slots_per_half_;
  std::vector<bool> slot_used_;  ///< slots of the current half
  int half_ = 0;
  std::uint64_t generation_ = 0;
  bool compacting_ = false;
  bool stopping_ = false;
  std::size_t waiting_ = 0;      ///< sessions parked in wait_compaction
  std::size_t revocations_ = 0;  ///< revocations in flight (`revoke`)
  asio::cancellation_signal stop_accept_;
  asio::steady_timer sweep_;  ///< wakes `expire_held` at the next hold's end (cancelled to re-arm it)

  // statistics
  std::uint64_t connections_ = 0, accept_errors_ = 0, sessions_ended_ = 0, requests_ = 0, control_bytes_ = 0;
  std::uint64_t windows_granted_ = 0, windows_revoked_ = 0, revoked_by_compaction_ = 0, grant_failures_ = 0;
  std::uint64_t bytes_exposed_ = 0, compactions_ = 0, moved_bytes_ = 0, tenants_seen_ = 0;
  std::uint64_t tenants_released_ = 0, tenants_reclaimed_ = 0, tenants_expired_ = 0, tenants_evicted_ = 0;
  std::uint64_t tenants_taken_over_ = 0, tenant_limit_refusals_ = 0;
  double registration_us_ = 0;
  samples bind_us_, compaction_us_;
  std::map<std::string, std::uint64_t> end_causes_;
  std::vector<std::string> errors_;
};

awaitable<void> pool_server::run() {
  const auto rights =
      cv::access::local_write | cv::access::remote_read | cv::access::remote_write | cv::access::mw_bind;
  const auto t0 = clock_type::now();
  pool_mr_ = co_await cv::reg_mr(pd_, pool_memory_, rights);  // on a worker: the loop stays free
  registration_us_ = micros_since(t0);
  cv::window_pool_options wo;
  wo.type = cv::window_type::type2;
  wo.initial_windows = std::min<std::size_t>(4 * slots_per_half_, 64);
  wo.max_windows = 4 * slots_per_half_ + 16;  // two per session, old and new sessions of a tenant overlapping
  windows_.emplace(pd_, wo);

  if (!config_.ready_file.empty()) {
    std::ofstream(config_.ready_file + ".tmp") << listener_.local_port() << "\n";
    std::rename((config_.ready_file + ".tmp").c_str(), config_.ready_file.c_str());
  }
  std::fprintf(stderr,
               "memory_pool_server: listening on %s:%u (%s), pool %zu MiB in 2 halves of %zu slots of %zu KiB\n",
               config_.address.c_str(), listener_.local_port(), listener_.get_device().name().c_str(),
               config_.pool_size >> 20, slots_per_half_, config_.slot_size >> 10);
  asio::co_spawn(io_, expire_held(), asio::detached);  // ends with stop()

  while (!stopping_) {
    auto s = std::make_shared<session>(io_, listener_.get_device());
    s->mr = cv::memory_region(pd_, s->buffers, cv::access::local_write);
    cv::connection_options o = listener_options().connection;
    o.pd = &pd_;
    o.cq = &s->cq;
    auto [ec, conn] = co_await listener_.async_accept(o, asio::bind_cancellation_slot(stop_accept_.slot(), tuple));
    if (ec) {
      if (stopping_) break;
      ++accept_errors_;
      errors_.push_back("accept: " + ec.message());
      continue;
    }
    ++connections_;
    s->conn = std::move(conn);
    sessions_.push_back(s);
    asio::co_spawn(io_, serve(s), [this](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        errors_.push_back(std::string("session: ") + x.what());
      }
    });
  }
  co_await wait_until([this] { return sessions_.empty(); }, 30s);
}

void pool_server::stop() {
  if (stopping_) return;
  stopping_ = true;
  stop_accept_.emit(asio::cancellation_type::terminal);
  sweep_.cancel();
  for (const auto& s : sessions_) {
    s->wake.cancel();
    if (s->conn.connected()) s->conn.async_disconnect([s](cv::error_code) {});  // flushes its receive
  }
}

awaitable<void> pool_server::serve(std::shared_ptr<session> s) {
  // Each receive's failure ends the session at once, whatever request it is busy with.
  const auto post_receive = [&s] {
    s->in.post(s->conn.qp(), s->inbox(), [w = std::weak_ptr<session>(s)] {
      if (const auto live = w.lock()) live->end();
    });
  };
  post_receive();
  message hello{.op = command::hello, .count = static_cast<std::uint32_t>(slots_per_half_), .generation = generation_};
  std::memcpy(s->outbox().data(), &hello, message_bytes);
  auto [hello_ec, hello_bytes] = co_await s->conn.qp().async_send(s->outbox(), tuple);
  control_bytes_ += hello_ec ? 0 : hello_bytes;
  cv::error_code refused;  // a hostile request that ended the session
  while (!hello_ec) {
    auto [ec, r] = co_await s->in.next();
    if (ec == cv::errc::foreign_remote_invalidation) {
      // A send-with-invalidate naming a window of another connection: coverbs refused it (and counted it in
      // window_statistics().foreign_invalidations). Never served: the peer is told why and disconnected;
      // every other session goes on. (On rxe the named key is dead already — its owner's next access fails
      // and it recovers as after a compaction; a device that enforces IBA's rule fails the receive instead.)
      refused = ec;
      message no{.op = command::reply, .status = refusal::foreign_invalidation};
      std::memcpy(s->outbox().data(), &no, message_bytes);
      co_await s->conn.qp().async_send(s->outbox(), tuple);
      break;
    }
    if (ec) break;  // the peer disconnected, or the queue pair went to the error state
    message request;
    std::memcpy(&request, s->inbox().data(), std::min<std::size_t>(r.bytes, message_bytes));
    post_receive();  // ready for the next request before this one is answered
    ++requests_;
    control_bytes_ += r.bytes;
    message reply{.status = refusal::bad_request};
    if (r.bytes == message_bytes && request.magic == message::magic_value) reply = co_await handle(*s, request);
    reply.op = command::reply;
    std::memcpy(s->outbox().data(), &reply, message_bytes);
    auto [send_ec, n] = co_await s->conn.qp().async_send(s->outbox(), tuple);
    if (send_ec) break;
    control_bytes_ += n;
    if (request.op == command::shutdown && reply.status == refusal::none) stop();
  }
  // The end: every key this connection carried dies, then its tenants are released, before the
  // connection goes.
  s->end();
  ++sessions_ended_;
  cv::error_code cause = refused ? refused : s->conn.qp().error();
  if (!cause) cause = s->conn.error();
  ++end_causes_[cause ? cause.message() : "ended"];
  co_await revoke(*s, windows_revoked_);
  release(*s);
  if (s->conn.connected()) co_await s->conn.async_disconnect(tuple);
  sessions_.remove(s);
}

awaitable<message> pool_server::handle(session& s, const message& request) {
  switch (request.op) {
  case command::get_keys: co_return co_await get_keys(s, request.tenant);
  case command::wait_compaction: co_return co_await wait_compaction(s);
  case command::compact: co_return co_await compact(request.count);
  case command::shutdown: co_return message{.generation = generation_};
  case command::bye: co_return co_await leave(s, request.tenant);
  case command::status: co_return status();
  default: co_return message{.status = refusal::bad_request};
  }
}

/// Takes the session's two leases and waits until both keys are dead; counts the live ones in `counter`.
awaitable<void> pool_server::revoke(session& s, std::uint64_t& counter) {
  cv::window_lease dying[] = {std::move(s.write_lease), std::move(s.read_lease)};  // the session holds none now
  ++revocations_;
  for (cv::window_lease& lease : dying) {
    if (!lease) continue;
    if (lease.active()) ++counter;
    co_await lease.async_revoke();  // completes at once when already dead
  }
  --revocations_;
}

/// Binds a write and a read window over the session's tenant slot, through the session's queue pair.
awaitable<cv::error_code> pool_server::grant(session& s) {
  const auto t = tenants_.find(s.tenant_id);
  if (t == tenants_.end()) co_return asio::error::not_found;  // the tenant left meanwhile
  const cv::window_range range{t->second.offset, config_.slot_size};
  const clock_type::duration no_time_limit{};
  const std::pair<cv::window_lease*, cv::access> wanted[] = {{&s.write_lease, cv::access::remote_write},
                                                             {&s.read_lease, cv::access::remote_read}};
  for (const auto& [lease, right] : wanted) {
    const auto t0 = clock_type::now();
    auto [ec, granted] = co_await windows_->async_lease(s.conn.qp(), pool_mr_, range, right, no_time_limit, tuple);
    if (ec) {
      ++grant_failures_;
      errors_.push_back("grant: " + ec.message());
      co_return ec;
    }
    bind_us_.add(micros_since(t0));
    *lease = std::move(granted);
    ++windows_granted_;
    bytes_exposed_ += config_.slot_size;
  }
  co_return cv::error_code{};
}

awaitable<message> pool_server::get_keys(session& s, std::uint64_t tenant_id) {
  if (tenant_id == 0) co_return message{.status = refusal::bad_request};
  if (stopping_) co_return message{.status = refusal::shutting_down};
  for (;;) {
    co_await wait_until([&] { return !compacting_ || s.ended; }, 60s);
    if (s.ended) co_return message{.status = refusal::connection_ended};
    auto t = tenants_.find(tenant_id);
    if (t == tenants_.end() || t->second.owner != &s) {
      if (s.owned.size() >= config_.tenants_per_connection) {
        ++tenant_limit_refusals_;
        co_return message{.status = refusal::tenant_limit,
                          .count = static_cast<std::uint32_t>(config_.tenants_per_connection)};
      }
      if (t == tenants_.end()) {
        const std::optional<std::size_t> offset = take_slot();
        if (!offset) co_return message{.status = refusal::no_free_slot};
        t = tenants_.emplace(tenant_id, tenant{.offset = *offset}).first;
        ++tenants_seen_;
      } else {
        ++(t->second.owner ? tenants_taken_over_ : tenants_reclaimed_);
      }
      t->second.owner = &s;
      s.owned.push_back(tenant_id);
      co_await take_over(s, tenant_id);
      continue;  // the compaction may have begun meanwhile
    }
    const std::size_t offset = t->second.offset;
    const bool current = s.tenant_id == tenant_id && s.write_lease.active() && s.read_lease.active() &&
                         s.write_lease.key().addr == reinterpret_cast<std::uint64_t>(pool_mr_.data() + offset);
    if (!current) {
      co_await revoke(s, windows_revoked_);
      s.tenant_id = tenant_id;
      const cv::error_code ec = co_await grant(s);
      if (ec) co_return message{.status = refusal::grant_failed};
    }
    // A compaction that began while the windows were being bound has moved the slot: bind again. A
    // connection that presented the same id meanwhile has taken the tenant: give the windows up.
    t = tenants_.find(tenant_id);
    const bool ours = t != tenants_.end() && t->second.owner == &s;
    if (!compacting_ && ours && t->second.offset == offset) break;
    co_await revoke(s, windows_revoked_);
    if (!ours) {
      if (s.tenant_id == tenant_id) s.tenant_id = 0;
      co_return message{.status = refusal::tenant_taken_over};
    }
  }
  co_return message{.generation = generation_, .write_key = s.write_lease.key(), .read_key = s.read_lease.key()};
}

/// The tenant now belongs to `s`: every other connection that held it forgets it, its windows revoked.
awaitable<void> pool_server::take_over(session& s, std::uint64_t tenant_id) {
  const std::vector<std::shared_ptr<session>> all(sessions_.begin(), sessions_.end());
  for (const auto& other : all) {
    if (other.get() == &s) continue;
    std::erase(other->owned, tenant_id);
    if (other->tenant_id != tenant_id) continue;
    other->tenant_id = 0;
    co_await revoke(*other, windows_revoked_);
  }
}

/// A free slot of the current half, marked used; when none is free, the slot held longest for a reconnect
/// (its tenant is freed). @returns its offset in the pool, or nothing when every slot has a live owner.
std::optional<std::size_t> pool_server::take_slot() {
  auto free = std::find(slot_used_.begin(), slot_used_.end(), false);
  if (free == slot_used_.end()) {
    auto oldest = tenants_.end();
    for (auto t = tenants_.begin(); t != tenants_.end(); ++t)
      if (!t->second.owner && (oldest == tenants_.end() || t->second.held_until < oldest->second.held_until))
        oldest = t;
    if (oldest == tenants_.end()) return std::nullopt;
    free_tenant(oldest);
    ++tenants_evicted_;
    free = std::find(slot_used_.begin(), slot_used_.end(), false);
  }
  *free = true;
  return (half_ * slots_per_half_ + static_cast<std::size_t>(free - slot_used_.begin())) * config_.slot_size;
}

/// Frees the tenant's slot and forgets it. @returns the next tenant.
std::map<std::uint64_t, tenant>::iterator pool_server::free_tenant(std::map<std::uint64_t, tenant>::iterator t) {
  const std::size_t slot = t->second.offset / config_.slot_size - half_ * slots_per_half_;
  if (slot < slot_used_.size()) slot_used_[slot] = false;
  return tenants_.erase(t);
}

/// The connection ended (its windows are revoked): its tenants are held --hold-seconds for a reconnect
/// (or freed now with --hold-seconds 0).
void pool_server::release(session& s) {
  const auto until = clock_type::now() + config_.hold;
  for (const std::uint64_t id : std::exchange(s.owned, {})) {
    auto t = tenants_.find(id);
    if (t == tenants_.end() || t->second.owner != &s) continue;
    ++tenants_released_;
    if (config_.hold.count() == 0) {
      free_tenant(t);
    } else {
      t->second.owner = nullptr;
      t->second.held_until = until;
    }
  }
  s.tenant_id = 0;
  sweep_.cancel();  // `expire_held` re-arms for the new holds
}

/// Frees every held slot whose time is up, then sleeps until the next one's (or a new hold); until stop().
awaitable<void> pool_server::expire_held() {
  while (!stopping_) {
    const auto now = clock_type::now();
    auto next = now + 1h;
    for (auto t = tenants_.begin(); t != tenants_.end();) {
      if (t->second.owner) {
        ++t;
      } else if (t->second.held_until <= now) {
        t = free_tenant(t);
        ++tenants_expired_;
      } else {
        next = std::min(next, t->second.held_until);
        ++t;
      }
    }
    sweep_.expires_at(next);
    co_await sweep_.async_wait(tuple);
  }
}

message pool_server::status() const {
  message m{.count = static_cast<std::uint32_t>(slots_per_half_), .generation = generation_};
  m.free_slots = static_cast<std::uint32_t>(std::count(slot_used_.begin(), slot_used_.end(), false));
  m.held_slots = static_cast<std::uint32_t>(
      std::count_if(tenants_.begin(), tenants_.end(), [](const auto& t) { return !t.second.owner; }));
  return m;
}

awaitable<message> pool_server::wait_compaction(session& s) {
  const std::uint64_t before = generation_;
  if (s.ended) co_return message{.status = refusal::connection_ended};
  s.waiting = true;
  ++waiting_;
  s.wake.expires_after(120s);
  co_await s.wake.async_wait(tuple);  // cancelled by the compaction, by stop, or by the connection's end
  s.waiting = false;
  --waiting_;
  if (generation_ == before) {
    const refusal why = s.ended     ? refusal::connection_ended
                        : stopping_ ? refusal::shutting_down
                                    : refusal::no_compaction;
    co_return message{.status = why, .generation = generation_};
  }
  co_return message{.generation = generation_};
}

awaitable<message> pool_server::compact(std::uint32_t waiters) {
  // Only sessions holding a slot wait for a compaction (as the clients of this program do): refuse a wait
  // that could never end.
  if (waiters > slots_per_half_)
    co_return message{.status = refusal::too_many_waiting, .count = static_cast<std::uint32_t>(slots_per_half_)};
  const bool quorum = co_await wait_until([&] { return waiting_ >= waiters || stopping_; }, 60s);
  if (!quorum) co_return message{.status = refusal::barrier_timed_out};
  co_await wait_until([this] { return !compacting_; }, 60s);
  if (stopping_) co_return message{.status = refusal::shutting_down};
  compacting_ = true;
  const auto t0 = clock_type::now();
  // 1. Revoke every key: once these complete no peer can touch the pool.
  std::uint64_t revoked = 0;
  const std::vector<std::shared_ptr<session>> all(sessions_.begin(), sessions_.end());
  for (const auto& s : all)
    co_await revoke(*s, revoked);
  co_await wait_until([this] { return revocations_ == 0; }, 60s);  // those begun elsewhere (sessions ending)
  // 2. Copy the live slots, packed, into the other half.
  const int to = 1 - half_;
  std::vector<bool> used(slots_per_half_, false);
  std::size_t next = 0, moved = 0;
  for (auto& [id, t] : tenants_) {
    const std::size_t offset = (to * slots_per_half_ + next) * config_.slot_size;
    std::memcpy(pool_memory_.data() + offset, pool_memory_.data() + t.offset, config_.slot_size);
    t.offset = offset;
    used[next++] = true;
    moved += config_.slot_size;
  }
  half_ = to;
  slot_used_ = std::move(used);
  ++generation_;
  // 3. Fresh keys for every connection that can still carry them.
  std::uint64_t granted = 0;
  for (const auto& s : all) {
    const auto t = tenants_.find(s->tenant_id);
    if (t == tenants_.end() || t->second.owner != s.get() || s->ended || !s->conn.connected() || s->conn.qp().error())
      continue;
    const cv::error_code ec = co_await grant(*s);
    if (!ec) granted += 2;
  }
  compacting_ = false;
  const double took = micros_since(t0);
  ++compactions_;
  moved_bytes_ += moved;
  revoked_by_compaction_ += revoked;
  windows_revoked_ += revoked;
  compaction_us_.add(took);
  for (const auto& s : sessions_)
    if (s->waiting) s->wake.cancel();
  co_return message{.generation = generation_,
                    .revoked = revoked,
                    .granted = granted,
                    .moved_bytes = moved,
                    .took_us = static_cast<std::uint64_t>(took)};
}

awaitable<message> pool_server::leave(session& s, std::uint64_t tenant_id) {
  co_await wait_until([this] { return !compacting_; }, 60s);
  auto t = tenants_.find(tenant_id);
  if (t == tenants_.end() || t->second.owner != &s)
    co_return message{.status = refusal::not_your_tenant, .generation = generation_};
  if (s.tenant_id == tenant_id) {
    s.tenant_id = 0;
    co_await revoke(s, windows_revoked_);
  }
  t = tenants_.find(tenant_id);
  if (t != tenants_.end() && t->second.owner == &s) free_tenant(t);
  std::erase(s.owned, tenant_id);
  co_return message{.generation = generation_};
}

void pool_server::report() const {
  const cv::window_counters w = cv::window_statistics();
  if (config_.json) {
    json::array causes;
    for (const auto& [cause, n] : end_causes_)
      causes.push_back(json::string(std::to_string(n) + " x " + cause));
    json_output::print(json::object{{"role", "server"},
                                    {"connections", connections_},
                                    {"accept_errors", accept_errors_},
                                    {"sessions_ended", sessions_ended_},
                                    {"tenants", tenants_seen_},
                                    {"tenants_per_connection", config_.tenants_per_connection},
                                    {"tenant_limit_refusals", tenant_limit_refusals_},
                                    {"tenants_released", tenants_released_},
                                    {"tenants_reclaimed", tenants_reclaimed_},
                                    {"tenants_taken_over", tenants_taken_over_},
                                    {"tenants_expired", tenants_expired_},
                                    {"tenants_evicted", tenants_evicted_},
                                    {"requests", requests_},
                                    {"control_bytes", control_bytes_},
                                    {"pool_bytes", config_.pool_size},
                                    {"registration_us", tenth(registration_us_)},
                                    {"windows_granted", windows_granted_},
                                    {"windows_revoked", windows_revoked_},
                                    {"revoked_by_compaction", revoked_by_compaction_},
                                    {"grant_failures", grant_failures_},
                                    {"bytes_exposed", bytes_exposed_},
                                    {"bind_us", bind_us_.to_json()},
                                    {"compactions", compactions_},
                                    {"moved_bytes", moved_bytes_},
                                    {"compaction_us", compaction_us_.to_json()},
                                    {"binds", w.binds},
                                    {"binds_failed", w.binds_failed},
                                    {"invalidations", w.invalidations},
                                    {"foreign_invalidations", w.foreign_invalidations},
                                    {"windows_replaced", w.windows_replaced},
                                    {"windows_bound_at_exit", w.windows_bound},
                                    {"session_end_causes", std::move(causes)},
                                    {"errors", json::array(errors_.begin(), errors_.end())}});
    return;
  }
  std::printf("memory_pool_server statistics\n");
  std::printf("  connections       : %" PRIu64 " accepted (%" PRIu64 " tenants), %" PRIu64 " ended, %" PRIu64
              " accept errors\n",
              connections_, tenants_seen_, sessions_ended_, accept_errors_);
  for (const auto& [cause, n] : end_causes_)
    std::printf("    ended %" PRIu64 " x: %s\n", n, cause.c_str());
  std::printf("  tenants           : at most %zu per connection (%" PRIu64 " refused past it); %" PRIu64
              " released by ended connections, held %lld s: %" PRIu64 " reclaimed by a reconnect, %" PRIu64
              " expired, %" PRIu64 " evicted for a new tenant; %" PRIu64 " taken over\n",
              config_.tenants_per_connection, tenant_limit_refusals_, tenants_released_,
              static_cast<long long>(config_.hold.count()), tenants_reclaimed_, tenants_expired_, tenants_evicted_,
              tenants_taken_over_);
  std::printf("  pool              : %zu bytes registered in %.1f us\n", config_.pool_size, registration_us_);
  std::printf("  windows           : %" PRIu64 " granted, %" PRIu64 " revoked (%" PRIu64 " by compaction), %" PRIu64
              " grant failures, %" PRIu64 " bytes exposed\n",
              windows_granted_, windows_revoked_, revoked_by_compaction_, grant_failures_, bytes_exposed_);
  std::printf("  bind latency (us) : %s\n", bind_us_.text().c_str());
  std::printf("  compactions       : %" PRIu64 ", %" PRIu64 " bytes moved, took (us) %s\n", compactions_, moved_bytes_,
              compaction_us_.text().c_str());
  std::printf("  control messages  : %" PRIu64 " requests, %" PRIu64 " bytes\n", requests_, control_bytes_);
  std::printf("  device counters   : %" PRIu64 " binds, %" PRIu64 " invalidations, %" PRIu64
              " foreign invalidations refused, %" PRIu64 " windows replaced, %" PRIu64 " bound at exit\n",
              w.binds, w.invalidations, w.foreign_invalidations, w.windows_replaced, w.windows_bound);
  for (const auto& e : errors_)
    std::printf("  error: %s\n", e.c_str());
}

// ---------------------------------------------------------------------------------------------------------
// Client

struct client_config {
  std::string host;
  std::uint16_t port = 0;
  int clients = 2;
  std::size_t ops = 16;
  std::size_t size = 4096;  ///< bytes per operation
  bool after_compaction = false;
  std::string admin;  ///< "", "compact", "status" or "shutdown"
  std::uint32_t waiting = 0;
  std::uint32_t grab = 0;  ///< --grab N: fresh tenant ids to ask keys for on one connection
  unsigned timeout = 80;   ///< seconds the whole process may take
  bool json = false;
};

/// Everything a client session's statistics add up to (summed over sessions).
struct client_stats {
  std::uint64_t sessions = 0, sessions_ok = 0, connections = 0, reconnects = 0;
  std::uint64_t ops_verified = 0, verify_failures = 0, bytes_written = 0, bytes_read = 0, control_bytes = 0;
  std::uint64_t expected_errors = 0, expected_errors_seen = 0;
  std::uint64_t recovered = 0, fresh_keys = 0, data_intact = 0, moved = 0;
  samples connect_us, registration_us, keys_us, recover_us, phase1_us, phase2_us;
  std::vector<std::string> unexpected;
  bool told_waiting = false;  ///< the note that the sessions wait for a compaction is out
  cv::error_code last_connect;  ///< the last connect try's error (see timeout_reason)
  /// Where open_link registers each connection's device: a port going down then fails the sessions on it at
  /// once, as errc::port_error. None for --admin and --grab (one connection, bounded by --timeout).
  example::device_watch* watch = nullptr;
};

/// A connection plus the client's registered memory in its protection domain:
/// [inbox | outbox | out: size bytes | in: size bytes]. The region goes before the connection.
struct link {
  cv::connection conn;
  std::vector<std::byte> memory;
  cv::memory_region mr;
  std::optional<receiver> in;
  std::size_t size = 0;
  std::uint32_t slots = 0;  ///< the server's slots per half (from its hello)

  cv::registered_span inbox() const { return cv::span_of(mr, 0, message_bytes); }
  cv::registered_span outbox() const { return cv::span_of(mr, message_bytes, message_bytes); }
  cv::registered_span out() const { return cv::span_of(mr, 2 * message_bytes, size); }
  cv::registered_span in_data() const { return cv::span_of(mr, 2 * message_bytes + size, size); }
};

/// Thrown for whatever ends a session early; `what()` says which step.
struct step_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// RNR NAK timer code 12 (0.64 ms) instead of rdma_cm's 0 (655.36 ms), on an established queue pair
/// (RTS → RTS with IBV_QP_MIN_RNR_TIMER). @throws system_error with the errno of ibv_modify_qp(3).
void shorten_rnr_timer(cv::queue_pair& qp) {
  ibv_qp_attr attr{};
  attr.min_rnr_timer = 12;
  qp.modify(attr, IBV_QP_MIN_RNR_TIMER);
}

awaitable<std::unique_ptr<link>> open_link(const client_config& c, client_stats& st) {
  const auto ex = co_await asio::this_coro::executor;
  cv::connect_options o;
  o.qp = small_queue_pair();
  const auto t0 = clock_type::now();
  const example::command_line server{.mode = example::role::connect, .address = c.host, .port = c.port};
  // A refused connect is tried again for 10 s, but not for longer than half of --timeout; the last try's
  // error is kept, so a process whose --timeout ends first says "connection refused" (timeout_reason).
  const auto patience = std::min<std::chrono::milliseconds>(std::chrono::seconds(10),
                                                            std::chrono::seconds(c.timeout) / 2);
  auto [ec, conn] = co_await example::connect_patiently(ex, server, o, patience, &st.last_connect);
  if (ec) throw step_failed("connect to " + c.host + ":" + std::to_string(c.port) + ": " + ec.message());
  if (st.watch) st.watch->watch(conn.get_device());
  st.connect_us.add(micros_since(t0));
  ++st.connections;
  auto l = std::make_unique<link>();
  l->conn = std::move(conn);
  shorten_rnr_timer(l->conn.qp());
  l->size = c.size;
  l->memory.resize(2 * message_bytes + 2 * c.size);
  const auto t1 = clock_type::now();
  auto [reg_ec, mr] = co_await cv::reg_mr(l->conn.pd(), l->memory, cv::access::local_write, tuple);
  if (reg_ec) throw step_failed("register " + std::to_string(l->memory.size()) + " bytes: " + reg_ec.message());
  st.registration_us.add(micros_since(t1));
  l->mr = std::move(mr);
  l->in.emplace(ex);
  l->in->post(l->conn.qp(), l->inbox());
  auto [hello_ec, r] = co_await l->in->next();
  message hello;
  std::memcpy(&hello, l->inbox().data(), message_bytes);
  if (hello_ec) throw step_failed("wait for the server's hello: " + example::cause(hello_ec, l->conn).message());
  if (r.bytes != message_bytes || hello.magic != message::magic_value || hello.op != command::hello)
    throw step_failed("the peer is not a memory_pool_server (no hello)");
  l->slots = hello.count;
  l->in->post(l->conn.qp(), l->inbox());
  st.control_bytes += r.bytes;
  co_return l;
}

awaitable<void> close_link(link& l) {
  if (l.conn.connected()) co_await l.conn.async_disconnect(tuple);
}

/// Sends `request` and waits for the reply, granted or refused. @throws step_failed on a transport error
/// or a malformed reply.
awaitable<message> exchange(link& l, message request, client_stats& st) {
  std::memcpy(l.outbox().data(), &request, message_bytes);
  auto [ec, n] = co_await l.conn.qp().async_send(l.outbox(), tuple);
  // example::cause names what failed the queue pair (e.g. errc::port_error), not the flush it caused.
  if (ec) throw step_failed("send request: " + example::cause(ec, l.conn).message());
  auto [recv_ec, r] = co_await l.in->next();
  if (recv_ec) throw step_failed("receive reply: " + example::cause(recv_ec, l.conn).message());
  message reply;
  std::memcpy(&reply, l.inbox().data(), message_bytes);
  l.in->post(l.conn.qp(), l.inbox());
  st.control_bytes += n + r.bytes;
  if (r.bytes != message_bytes || reply.magic != message::magic_value || reply.op != command::reply)
    throw step_failed("malformed reply");
  co_return reply;
}

/// Sends `request` and waits for the reply. @throws step_failed on a transport error or a refusal.
awaitable<message> call(link& l, message request, client_stats& st) {
  const message reply = co_await exchange(l, request, st);
  if (reply.status == refusal::too_many_waiting)
    throw step_failed("server refused: waiting for " + std::to_string(request.count) +
                      " sessions, but the pool has only " + std::to_string(reply.count) + " slots");
  if (reply.status != refusal::none) throw step_failed(std::string("server refused: ") + to_string(reply.status));
  co_return reply;
}

/// The bytes operation `op` of round `round` writes: a pattern no other tenant, round or op repeats.
void fill_pattern(std::span<std::byte> out, std::uint64_t tenant_id, int round, std::size_t op) {
  std::uint64_t x = tenant_id * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(round) * 0x100000001b3ull + op;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
}

/// Reads block `op` back through `read_key` and compares it with what round `round` wrote there.
awaitable<bool> read_and_verify(link& l, const cv::remote_key& read_key, std::uint64_t tenant_id, int round,
                                std::size_t op, client_stats& st) {
  const cv::remote_key block = read_key.slice(op * l.size, l.size);
  auto [ec, n] = co_await l.conn.qp().async_read(l.in_data(), block, tuple);
  if (ec) throw step_failed("RDMA read through the read window: " + ec.message());
  st.bytes_read += n;
  fill_pattern(l.out().bytes, tenant_id, round, op);
  const bool same = std::memcmp(l.out().data(), l.in_data().data(), l.size) == 0;
  ++(same ? st.ops_verified : st.verify_failures);
  co_return same;
}

/// `ops` blocks: write each through the write window, read it back through the read window, compare.
awaitable<bool> write_and_verify(link& l, const message& keys, std::uint64_t tenant_id, int round,
                                 const client_config& c, client_stats& st) {
  bool all = true;
  for (std::size_t op = 0; op < c.ops; ++op) {
    fill_pattern(l.out().bytes, tenant_id, round, op);
    const cv::remote_key block = keys.write_key.slice(op * c.size, c.size);
    auto [ec, n] = co_await l.conn.qp().async_write(l.out(), block, tuple);
    if (ec) throw step_failed("RDMA write through the write window: " + ec.message());
    st.bytes_written += n;
    const bool same = co_await read_and_verify(l, keys.read_key, tenant_id, round, op, st);
    all = all && same;
  }
  co_return all;
}

awaitable<message> ask_for_keys(link& l, std::uint64_t tenant_id, const client_config& c, client_stats& st) {
  const message request{.op = command::get_keys, .tenant = tenant_id};
  const auto t0 = clock_type::now();
  const message reply = co_await call(l, request, st);
  st.keys_us.add(micros_since(t0));
  if (reply.write_key.length < c.ops * c.size || reply.read_key.length < c.ops * c.size)
    throw step_failed("--ops x --size (" + std::to_string(c.ops * c.size) + " bytes) exceeds the server's window (" +
                      std::to_string(reply.write_key.length) + " bytes): lower them or raise --slot-size");
  co_return reply;
}

/// Records what went wrong in session `index`.
void note(client_stats& st, int index, const std::string& what) {
  st.unexpected.push_back("session " + std::to_string(index) + ": " + what);
}

/// After the compaction: writes through the revoked key from `keys` (it must fail with rem_access_err),
/// then recovers — reconnects if the error closed the queue pair, asks for the keys again, reads back
/// round 1 at the slot's new place and writes and verifies round 2. @returns true when all that held.
awaitable<bool> use_revoked_key_and_recover(std::unique_ptr<link>& l, const message& keys, std::uint64_t tenant_id,
                                            int index, const client_config& c, client_stats& st) {
  bool ok = true;
  ++st.expected_errors;
  const auto t0 = clock_type::now();
  auto [stale, n] = co_await l->conn.qp().async_write(l->out(), keys.write_key.slice(0, c.size), tuple);
  if (stale == cv::wc_errc::rem_access_err) {
    ++st.expected_errors_seen;
  } else {
    ok = false;
    note(st, index,
         "a write through the revoked key gave '" + (stale ? stale.message() : std::string("success")) +
             "', not rem_access_err");
  }
  if (!l->conn.connected() || l->conn.qp().error()) {  // a remote access error leaves it in the error state
    co_await close_link(*l);
    l.reset();
    l = co_await open_link(c, st);
    ++st.reconnects;
  }
  const message fresh = co_await ask_for_keys(*l, tenant_id, c, st);
  const bool new_keys = fresh.write_key.rkey != keys.write_key.rkey && fresh.read_key.rkey != keys.read_key.rkey &&
                        fresh.generation > keys.generation;
  st.fresh_keys += new_keys;
  st.moved += fresh.write_key.addr != keys.write_key.addr;
  if (!new_keys) note(st, index, "the keys after the compaction are not fresh");
  bool intact = true;
  for (std::size_t op = 0; op < c.ops; ++op) {
    const bool same = co_await read_and_verify(*l, fresh.read_key, tenant_id, 1, op, st);
    intact = intact && same;
  }
  st.recover_us.add(micros_since(t0));
  st.data_intact += intact;
  if (!intact) note(st, index, "data written before the compaction did not survive it");
  const auto t1 = clock_type::now();
  const bool second = co_await write_and_verify(*l, fresh, tenant_id, 2, c, st);
  st.phase2_us.add(micros_since(t1));
  if (!second) note(st, index, "data written after recovery read back differently");
  const bool recovered = new_keys && intact && second;
  st.recovered += recovered;
  co_return ok&& recovered;
}

/// More sessions in this process than the server has slots: every session ends, one says why.
struct too_many_sessions : step_failed {
  using step_failed::step_failed;
};

/// The line saying that the sessions wait for a compaction, how to start one, and for how long they wait.
std::string waiting_note(const client_config& c) {
  return "memory_pool_server: waiting for a compaction, as the scenario does (the demo's admin starts one; by hand: "
         "memory_pool_server --connect " +
         c.host + " " + std::to_string(c.port) + " --admin compact), for at most " + std::to_string(c.timeout) +
         " s (--timeout)";
}

/// One client session: the scenario from the file comment. Records into `st`; never throws.
awaitable<void> client_session(const client_config& c, std::uint64_t tenant_id, int index, client_stats& st) {
  ++st.sessions;
  std::unique_ptr<link> l;
  try {
    l = co_await open_link(c, st);
    if (static_cast<std::uint64_t>(c.clients) > l->slots)
      throw too_many_sessions("--clients " + std::to_string(c.clients) + " is more than the server's " +
                              std::to_string(l->slots) +
                              " slots: lower --clients, or start the server with more slots (raise its "
                              "--pool-size or lower its --slot-size)");
    const message keys = co_await ask_for_keys(*l, tenant_id, c, st);
    const auto t0 = clock_type::now();
    bool ok = co_await write_and_verify(*l, keys, tenant_id, 1, c, st);
    st.phase1_us.add(micros_since(t0));
    if (!ok) note(st, index, "data read back through the read window differs from what was written");
    if (c.after_compaction) {
      const message wait{.op = command::wait_compaction};
      if (!std::exchange(st.told_waiting, true)) std::fprintf(stderr, "%s\n", waiting_note(c).c_str());
      co_await call(*l, wait, st);
      // Carry on with the keys from before the compaction, as a client racing with it would.
      const bool recovered = co_await use_revoked_key_and_recover(l, keys, tenant_id, index, c, st);
      ok = ok && recovered;
    }
    const message bye{.op = command::bye, .tenant = tenant_id};
    co_await call(*l, bye, st);
    st.sessions_ok += ok;
  } catch (const too_many_sessions& e) {
    if (index == 0) st.unexpected.push_back(e.what());
  } catch (const std::exception& e) {
    note(st, index, e.what());
  }
  if (l) co_await close_link(*l);
}

/// Prints why the admin request failed: one JSON line on stdout with --json, else a line on stderr.
void print_admin_failure(const client_config& c, const std::string& why) {
  if (c.json)
    json_output::print(json::object{{"role", "admin"}, {"command", c.admin}, {"status", why}});
  else
    std::fprintf(stderr, "memory_pool_server: %s: %s\n", c.admin.c_str(), why.c_str());
}

/// An admin request on a connection of its own; prints the reply. @returns true when the server agreed.
awaitable<bool> admin(const client_config& c, client_stats& st) {
  std::unique_ptr<link> l;
  bool ok = false;
  try {
    l = co_await open_link(c, st);
    const command op = c.admin == "compact"  ? command::compact
                       : c.admin == "status" ? command::status
                                             : command::shutdown;
    const auto t0 = clock_type::now();
    const message request{.op = op, .count = c.waiting};
    const message reply = co_await call(*l, request, st);
    const double us = micros_since(t0);
    json::object j{{"role", "admin"}, {"command", c.admin}, {"status", "ok"}, {"generation", reply.generation}};
    if (op == command::compact) {
      j["waiting"] = c.waiting;
      j["revoked"] = reply.revoked;
      j["granted"] = reply.granted;
      j["moved_bytes"] = reply.moved_bytes;
      j["compaction_us"] = reply.took_us;
    }
    if (op == command::status) {
      j["slots"] = reply.count;
      j["free_slots"] = reply.free_slots;
      j["held_slots"] = reply.held_slots;
    }
    j["request_us"] = tenth(us);
    const std::string line =
        c.json ? json_output::text(j)
        : op == command::compact
            ? "compaction " + std::to_string(reply.generation) + ": revoked " + std::to_string(reply.revoked) +
                  " windows, copied " + std::to_string(reply.moved_bytes) + " bytes, granted " +
                  std::to_string(reply.granted) + " fresh windows in " + std::to_string(reply.took_us) + " us"
        : op == command::status
            ? std::to_string(reply.count) + " slots: " + std::to_string(reply.free_slots) + " free, " +
                  std::to_string(reply.held_slots) + " held for a reconnect (their connection ended without bye)"
            : "server is shutting down";
    ok = true;
    std::printf("%s\n", line.c_str());
  } catch (const std::exception& e) {
    print_admin_failure(c, e.what());
  }
  if (l) co_await close_link(*l);
  co_return ok;
}

/// A tenant id no one else picks: 64 random bits, never 0.
std::uint64_t fresh_tenant_id(std::random_device& seed) {
  return (static_cast<std::uint64_t>(seed()) << 32 | seed()) | 1;
}

/// --grab N: one connection asks keys for N fresh tenant ids, one after another, and prints how many the
/// server granted and why it refused the rest (one line; JSON with --json); then it holds them, waiting for
/// a compaction, until one comes or the connection ends. Sets `ok` once the line is out (so a process
/// stopped while holding knows) when every refusal was the server's per-connection limit.
awaitable<void> grab(const client_config& c, client_stats& st, bool& ok) {
  std::unique_ptr<link> l;
  try {
    l = co_await open_link(c, st);
    std::random_device seed;
    std::uint64_t granted = 0, over_limit = 0;
    std::map<std::string, std::uint64_t> other;
    for (std::uint32_t i = 0; i < c.grab; ++i) {
      const message reply =
          co_await exchange(*l, message{.op = command::get_keys, .tenant = fresh_tenant_id(seed)}, st);
      if (reply.status == refusal::none)
        ++granted;
      else if (reply.status == refusal::tenant_limit)
        ++over_limit;
      else
        ++other[to_string(reply.status)];
    }
    std::vector<std::string> others;
    for (const auto& [why, n] : other)
      others.push_back(std::to_string(n) + " x " + why);
    if (c.json) {
      json_output::print(json::object{{"role", "grab"},
                                      {"asked", c.grab},
                                      {"granted", granted},
                                      {"over_limit", over_limit},
                                      {"other_refusals", json::array(others.begin(), others.end())}});
    } else {
      std::printf("grab: asked keys for %u tenant ids on one connection: %" PRIu64 " granted, %" PRIu64
                  " refused over the server's --tenants-per-connection\n",
                  c.grab, granted, over_limit);
      for (const auto& o : others)
        std::printf("  refused %s\n", o.c_str());
    }
    std::fflush(stdout);
    ok = other.empty();
    co_await exchange(*l, message{.op = command::wait_compaction}, st);  // holds them
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_pool_server: grab: %s\n", e.what());
  }
  if (l) co_await close_link(*l);
}

void print_client(const client_config& c, const client_stats& st, double wall_us) {
  if (c.json) {
    json_output::print(json::object{{"role", "client"},
                                    {"pid", static_cast<std::uint64_t>(getpid())},
                                    {"sessions", st.sessions},
                                    {"sessions_ok", st.sessions_ok},
                                    {"ops", c.ops},
                                    {"size", c.size},
                                    {"after_compaction", c.after_compaction},
                                    {"connections", st.connections},
                                    {"reconnects", st.reconnects},
                                    {"ops_verified", st.ops_verified},
                                    {"verify_failures", st.verify_failures},
                                    {"bytes_written", st.bytes_written},
                                    {"bytes_read", st.bytes_read},
                                    {"control_bytes", st.control_bytes},
                                    {"expected_errors", st.expected_errors},
                                    {"expected_errors_seen", st.expected_errors_seen},
                                    {"recovered", st.recovered},
                                    {"fresh_keys", st.fresh_keys},
                                    {"data_intact", st.data_intact},
                                    {"moved", st.moved},
                                    {"connect_us", st.connect_us.to_json()},
                                    {"registration_us", st.registration_us.to_json()},
                                    {"keys_us", st.keys_us.to_json()},
                                    {"phase1_us", st.phase1_us.to_json()},
                                    {"recover_us", st.recover_us.to_json()},
                                    {"phase2_us", st.phase2_us.to_json()},
                                    {"wall_us", tenth(wall_us)},
                                    {"unexpected_errors", json::array(st.unexpected.begin(), st.unexpected.end())}});
    return;
  }
  std::printf("memory_pool_server client: %" PRIu64 "/%" PRIu64 " sessions held in %.1f ms\n", st.sessions_ok,
              st.sessions, wall_us / 1000);
  std::printf("  connections        : %" PRIu64 " (%" PRIu64 " after the revoked key broke one)\n", st.connections,
              st.reconnects);
  std::printf("  data               : %" PRIu64 " bytes written, %" PRIu64 " read, %" PRIu64
              " blocks verified, %" PRIu64 " differed\n",
              st.bytes_written, st.bytes_read, st.ops_verified, st.verify_failures);
  if (c.after_compaction)
    std::printf("  after compaction   : revoked key refused %" PRIu64 "/%" PRIu64
                " (rem_access_err, expected); %" PRIu64 " fresh keys, %" PRIu64 " moved, %" PRIu64 " intact, %" PRIu64
                " recovered\n",
                st.expected_errors_seen, st.expected_errors, st.fresh_keys, st.moved, st.data_intact, st.recovered);
  std::printf("  connect (us)       : %s\n", st.connect_us.text().c_str());
  std::printf("  registration (us)  : %s\n", st.registration_us.text().c_str());
  std::printf("  keys round trip(us): %s\n", st.keys_us.text().c_str());
  if (c.after_compaction) std::printf("  recovery (us)      : %s\n", st.recover_us.text().c_str());
  for (const auto& e : st.unexpected)
    std::printf("  error: %s\n", e.c_str());
}

// ---------------------------------------------------------------------------------------------------------
// Command line

constexpr const char* usage_text =
    "usage: memory_pool_server --listen ADDR PORT [--pool-size BYTES] [--slot-size BYTES] [--ready-file FILE]\n"
    "                          [--tenants-per-connection N] [--hold-seconds S] [--json]\n"
    "       memory_pool_server --connect ADDR PORT [--clients N] [--ops N] [--size BYTES] [--after-compaction]\n"
    "                          [--timeout SECONDS] [--json]\n"
    "       memory_pool_server --connect ADDR PORT --admin compact [--waiting N] | --admin status\n"
    "                          | --admin shutdown [--timeout SECONDS] [--json]\n"
    "       memory_pool_server --connect ADDR PORT --grab N [--timeout SECONDS] [--json]\n"
    "\n"
    "A storage server over one registered memory pool: each client gets a type-2 memory window to\n"
    "write through and one to read through, over a slot of its own; a compaction revokes every\n"
    "window, moves the slots and grants fresh keys; a client that uses a revoked key gets\n"
    "rem_access_err and recovers by reconnecting and asking again.\n"
    "\n"
    "Server\n"
    "  --listen ADDR PORT   serve on ADDR, the numeric address of an RDMA device's interface (10.77.0.1\n"
    "                       in the Soft-RoCE guest), rdma_cm port PORT (0: any free one; see\n"
    "                       --ready-file); --listen PORT --address ADDR says the same\n"
    "  --pool-size BYTES    the registered pool, both halves (default 64M; K, M, G suffixes)\n"
    "  --slot-size BYTES    one tenant's storage (default 1M); slots: pool / 2 / slot (default 32)\n"
    "  --tenants-per-connection N\n"
    "                       tenants (slots) one connection may hold (default 1); asking keys for one\n"
    "                       more id is refused ('tenant limit') until it says bye for one\n"
    "  --hold-seconds S     when a connection ends without bye (disconnect, queue-pair error, client\n"
    "                       killed), its windows are revoked at once and each of its slots is held S\n"
    "                       seconds for a reconnect with the same tenant id, then freed (default 30;\n"
    "                       0: freed at once); a new tenant finding no free slot takes a held one\n"
    "  --ready-file FILE    write the listening port to FILE once ready\n"
    "  Stops on SIGINT / SIGTERM or an admin shutdown, then prints its statistics.\n"
    "Client\n"
    "  --connect ADDR PORT  the server (numeric address; a refused connection is tried again for 10 s,\n"
    "                       so client and server may start together)\n"
    "  --clients N          sessions in this process, each a connection and tenant (default 2); at most\n"
    "                       the server's slots\n"
    "  --ops N              blocks written and read back per round (default 16)\n"
    "  --size BYTES         bytes per block (default 4096); ops x size must fit a slot\n"
    "  --after-compaction   wait for a compaction (--admin compact, from another process), use the\n"
    "                       revoked key (expect rem_access_err), recover: reconnect, fresh keys, old\n"
    "                       data intact, new data verified\n"
    "  --timeout SECONDS    give up after this long in all (default 80)\n"
    "Admin (any client may send these)\n"
    "  --admin compact      compact now, or once --waiting N sessions wait for a compaction (at most\n"
    "                       the pool's slots; the server waits 60 s for them)\n"
    "  --admin status       the server's slots: free, and held for a reconnect\n"
    "  --admin shutdown     end every session; the server prints its statistics and exits\n"
    "  --grab N             ask keys for N fresh tenant ids on one connection, print how many were\n"
    "                       granted, hold them until a compaction or --timeout (a check of the\n"
    "                       server's --tenants-per-connection; exit 0 when it alone refused)\n"
    "Both\n"
    "  --json               print the statistics as one JSON line\n"
    "\n"
    "Exit status: 0 when every step held, 1 when one failed, 2 for a bad command line.\n"
    "\n"
    "In the Soft-RoCE guest (tools/rxe-vm boots it; rdma_cm works on 10.77.0.1):\n"
    "  tools/rxe-vm -- sh -c 'S=build/docs/memory_pool_server A=\"10.77.0.1 7471\"\n"
    "    $S --listen $A &\n"
    "    $S --connect $A --clients 2 --after-compaction & c=$!\n"
    "    $S --connect $A --admin compact --waiting 2; wait $c\n"
    "    $S --connect $A --admin shutdown; wait'\n"
    "On a host with an RDMA device, use its address for --listen and --connect.\n";

int run_server(const server_config& config) {
  asio::io_context io;
  std::optional<pool_server> server;
  try {
    server.emplace(io, config);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "memory_pool_server: %s\n",
                 size_argument::cannot_allocate("the pool", config.pool_size, "--pool-size", config.pool_size).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_pool_server: %s\n", e.what());
    return 1;
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](cv::error_code ec, int) {
    if (!ec) server->stop();
  });
  // The device's events: a port going down fails the sessions on it at once (errc::port_error, a line on
  // stderr); the server goes on serving the connections that come once it is back.
  example::device_watch watch(io.get_executor(), "memory_pool_server");
  watch.watch(server->device());
  std::exception_ptr failure;
  asio::co_spawn(io, server->run(), [&](std::exception_ptr e) {
    failure = e;
    signals.cancel();
    watch.close();
  });
  io.run();
  server->report();
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "memory_pool_server: %s\n", e.what());
    }
    return 1;
  }
  return 0;
}

/// Why a client process ran out of time (--timeout): with no connection made yet, what the last connect try
/// got (e.g. "connection refused": nobody listens there), since no reply could come.
std::string timeout_reason(const client_config& c, const client_stats& st) {
  if (st.connections == 0 && st.last_connect)
    return "no connection within " + std::to_string(c.timeout) + " s: connect to " + c.host + ":" +
           std::to_string(c.port) + ": " + st.last_connect.message();
  const std::string limit = "no reply within " + std::to_string(c.timeout) + " s (--timeout SECONDS raises the limit)";
  if (c.admin == "compact" && c.waiting > 0)
    return limit + ": the server compacts once " + std::to_string(c.waiting) + " sessions wait for a compaction";
  if (c.after_compaction)
    return "no compaction within " + std::to_string(c.timeout) +
           " s (start one with --admin compact; --timeout SECONDS raises the limit)";
  return limit;
}

int run_client(const client_config& config) {
  asio::io_context io;
  client_stats st;
  const auto t0 = clock_type::now();
  // The time limit: past it, the process says why and leaves at once (its coroutines still hold connections,
  // which must not be unwound with the io_context).
  asio::steady_timer limit(io, std::chrono::seconds(config.timeout));
  bool grabbed = false;  // --grab: what it got is out and held what the server allows
  limit.async_wait([&](cv::error_code ec) {
    if (ec) return;
    if (config.grab) {  // it held them for --timeout, as asked
      std::fflush(nullptr);
      std::_Exit(grabbed ? 0 : 1);
    }
    const std::string why = timeout_reason(config, st);
    if (!config.admin.empty()) {
      print_admin_failure(config, why);
    } else {
      st.unexpected.push_back(why);
      if (!config.json) std::fprintf(stderr, "memory_pool_server: %s\n", why.c_str());
      print_client(config, st, micros_since(t0));
    }
    std::fflush(nullptr);
    std::_Exit(1);
  });
  if (!config.admin.empty()) {
    bool ok = false;
    asio::co_spawn(io, admin(config, st), [&](std::exception_ptr e, bool r) {
      ok = !e && r;
      limit.cancel();
    });
    io.run();
    return ok ? 0 : 1;
  }
  if (config.grab) {
    asio::co_spawn(io, grab(config, st, grabbed), [&](std::exception_ptr) { limit.cancel(); });
    io.run();
    return grabbed ? 0 : 1;
  }
  std::random_device seed;
  int running = config.clients;
  // The device's events (see open_link): read until every session has ended.
  example::device_watch watch(io.get_executor(), "memory_pool_server");
  st.watch = &watch;
  for (int i = 0; i < config.clients; ++i) {
    asio::co_spawn(io, client_session(config, fresh_tenant_id(seed), i, st), [&](std::exception_ptr e) {
      if (e) st.unexpected.push_back("a session ended with an exception");
      if (--running == 0) {
        limit.cancel();
        watch.close();
      }
    });
  }
  io.run();
  print_client(config, st, micros_since(t0));
  const bool held =
      st.sessions_ok == st.sessions && st.unexpected.empty() && st.expected_errors_seen == st.expected_errors;
  return held ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using example::in_connect, example::in_listen, example::role;
  const std::string prog = argc > 0 ? argv[0] : "memory_pool_server";
  auto bad = [&](const std::string& why) { return example::bad_command_line(prog, why); };
  server_config server;
  client_config client;
  std::optional<role> mode;
  std::string address = server.address;
  bool address_given = false, address_option = false;
  std::uint64_t port = 0, pool_size = server.pool_size, slot_size = server.slot_size, clients = client.clients,
                ops = client.ops, size = client.size, waiting = 0, timeout = client.timeout,
                per_connection = server.tenants_per_connection, hold = static_cast<std::uint64_t>(server.hold.count()),
                grab = 0;
  const example::numeric_option numeric[] = {
      {"--pool-size", &pool_size, 4096, 64ull << 30, in_listen, true},
      {"--slot-size", &slot_size, 64, 1ull << 30, in_listen, true},
      {"--tenants-per-connection", &per_connection, 1, 4096, in_listen},
      {"--hold-seconds", &hold, 0, 3600, in_listen},
      {"--grab", &grab, 1, 4096, in_connect},
      {"--clients", &clients, 1, 64, in_connect},
      {"--ops", &ops, 1, 1u << 20, in_connect},
      {"--size", &size, 1, 1ull << 30, in_connect, true},
      {"--waiting", &waiting, 0, 4096, in_connect},
      {"--timeout", &timeout, 1, 3600, in_connect},
  };
  CLI::App app{"", prog};
  ::command_line::describe(app, usage_text);
  std::vector<std::string> listen, connect;
  app.add_option("--listen", listen)->expected(1, 2);  // --listen PORT --address ADDR: the older spelling
  app.add_option("--connect", connect)->expected(2);
  std::vector<std::pair<std::string, unsigned>> roles;  // options and the roles they belong to
  for (const example::numeric_option& o : numeric) {
    example::add_numeric(app, o);
    roles.emplace_back(o.name, o.roles);
  }
  const auto non_empty = CLI::Validator([](std::string& t) { return t.empty() ? "takes a non-empty value" : ""; }, "");
  app.add_option("--address", address)->check(non_empty);
  app.add_option("--ready-file", server.ready_file)->check(non_empty);
  app.add_option("--admin", client.admin)->check(::command_line::one_of({"compact", "status", "shutdown"}));
  app.add_flag("--after-compaction", client.after_compaction);
  app.add_flag("--json", server.json);
  for (const char* name : {"--address", "--ready-file"})
    roles.emplace_back(name, in_listen);
  for (const char* name : {"--admin", "--after-compaction"})
    roles.emplace_back(name, in_connect);
  if (const auto status = ::command_line::parse(app, argc, argv)) return *status;
  client.json = server.json;
  if (!listen.empty() && !connect.empty()) return bad("give one of --listen and --connect");
  if (!listen.empty() || !connect.empty()) {
    mode = listen.empty() ? role::connect : role::listen;
    const std::vector<std::string>& where = listen.empty() ? connect : listen;
    if (where.size() == 2) address = where[0], address_given = true;
    std::uint16_t p = 0;
    if (const auto why = example::parse_port(where.back(), *mode == role::listen ? 0 : 1, p)) return bad(*why);
    port = p;
  }
  address_option = app.count("--address") > 0;
  if (!mode) return bad("say what to run: --listen ADDR PORT or --connect ADDR PORT");
  for (const auto& [name, in] : roles)
    if (app.count(name))
      if (const auto why = example::check_role(name, in, *mode)) return bad(*why);
  if (address_given && address_option) return bad("give the address once: --listen ADDR PORT or --address ADDR");
  if (const auto why = example::check_address(address)) return bad(*why);
  if (!server.ready_file.empty()) {  // refused now: a script waiting for the file would wait forever
    const auto slash = server.ready_file.rfind('/');
    const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : server.ready_file.substr(0, slash);
    if (::access(folder.c_str(), W_OK | X_OK) != 0)
      return bad("--ready-file " + server.ready_file + ": cannot write in folder '" + folder + "' (" +
                 std::strerror(errno) + "); give a file in an existing, writable folder");
  }
  if (*mode == role::listen && pool_size / 2 / slot_size == 0)
    return bad("--pool-size (" + std::to_string(pool_size) + " bytes) must hold at least two slots of --slot-size (" +
               std::to_string(slot_size) + " bytes), one per half: raise --pool-size or lower --slot-size");
  if (!client.admin.empty() && client.after_compaction) return bad("--admin does not mix with --after-compaction");
  if (waiting && client.admin != "compact") return bad("--waiting goes with --admin compact");
  if (grab && (!client.admin.empty() || client.after_compaction))
    return bad("--grab does not mix with --admin or --after-compaction");
  if (*mode == role::listen)
    if (const auto why = example::check_fits("the pool", pool_size, "--pool-size", pool_size)) {
      std::fprintf(stderr, "%s: %s\n", prog.c_str(), why->c_str());
      return 1;
    }
  // Each client session registers an out and an in block of --size: refused here, before connecting,
  // when they cannot fit in memory (rather than a session ending with std::bad_alloc).
  if (*mode == role::connect && client.admin.empty())
    if (const auto why = example::check_fits("the sessions' buffers (--clients x 2 x --size)", clients * 2 * size,
                                             "--size", size)) {
      std::fprintf(stderr, "%s: %s\n", prog.c_str(), why->c_str());
      return 1;
    }
  if (*mode == role::listen) {
    server.address = address;
    server.port = static_cast<std::uint16_t>(port);
    server.pool_size = pool_size;
    server.slot_size = slot_size;
    server.tenants_per_connection = per_connection;
    server.hold = std::chrono::seconds(hold);
    return run_server(server);
  }
  client.host = address;
  client.port = static_cast<std::uint16_t>(port);
  client.clients = static_cast<int>(clients);
  client.ops = ops;
  client.size = size;
  client.waiting = static_cast<std::uint32_t>(waiting);
  client.timeout = static_cast<unsigned>(timeout);
  client.grab = static_cast<std::uint32_t>(grab);
  return run_client(client);
}
