#pragma once
// The memory pool server: its configuration (--listen's options), a `session_state` per session, a `tenant`
// per client id, and `pool_server`, which owns the registered pool and its window pool and serves the
// protocol of protocol.hpp on coverbs sessions. Its definitions: server.cpp (serving a session's requests, the
// report), tenants.cpp (slots, keys and what a session's end releases), compaction.cpp.
#include "protocol.hpp"
#include "samples.hpp"

#include "common/command_line.hpp"
#include "common/prelude.hpp"

#include <coverbs/coverbs.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memory_pool {

namespace asio = boost::asio;
using asio::awaitable;
using clock_type = example::clock;
using example::tuple;

/// What --listen and its options configure.
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

/// What the server keeps of one session (an accepted connection) while its coroutine runs, in
/// `pool_server::sessions_` (and `link` is valid as long). Once `ended`, nothing new starts on `link`; its
/// leases are dead (revoked and awaited) before the session closes.
struct session_state {
  explicit session_state(cv::session& s) : link(s), wake(s.get_executor()) {}

  cv::session& link;
  cv::window_lease write_lease, read_lease;
  std::uint64_t tenant_id = 0;  ///< 0: none yet (an admin connection)
  bool waiting = false;         ///< parked in wait_compaction
  asio::steady_timer wake;      ///< what a waiting session sleeps on; cancelled by a compaction

  std::vector<std::uint64_t> owned;  ///< the tenants this connection holds (at most --tenants-per-connection)
  bool ended = false;                ///< its receive failed: the peer is gone, the queue pair broke, or stop()

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
  const session_state* owner = nullptr;
  clock_type::time_point held_until{};
};

/// One registered pool in two halves of slots, the window pool over it, and the sessions it serves.
/// @par Thread Safety Use from the thread running the io_context it was made with.
class pool_server {
public:
  pool_server(asio::io_context& io, const server_config& config)
      : io_(io), config_(config), listener_(io.get_executor(), config.address, config.port),
        pd_(example::listening_device(listener_, config.address)), cq_(io, listener_.get_device()),
        pool_memory_(config.pool_size), slots_per_half_(config.pool_size / 2 / config.slot_size),
        slot_used_(slots_per_half_, false), sweep_(io) {}

  /// Registers the pool, listens and serves until `stop()`; returns once it stops accepting (the sessions
  /// end on their own, their reports afterwards).
  awaitable<void> run();
  /// Stops accepting and ends every session (from the loop's thread).
  void stop();
  /// Prints the statistics (text, or one JSON line).
  void report() const;
  /// The device the server listens on, serves from, and whose events `run_server` reads.
  cv::device& device() const noexcept { return listener_.get_device(); }

private:
  struct received {  ///< a session's next request, or why none came
    cv::error_code ec;
    cv::inbound_request request;
  };
  awaitable<void> serve(cv::session& link);
  awaitable<received> next_request(session_state& s);
  awaitable<void> answer(session_state& s, cv::inbound_request request);
  void ended(const cv::session_report& r);
  awaitable<message> handle(session_state& s, const message& request);
  awaitable<message> get_keys(session_state& s, std::uint64_t tenant_id);
  awaitable<message> compact(std::uint32_t waiters);
  awaitable<message> wait_compaction(session_state& s);
  awaitable<message> leave(session_state& s, std::uint64_t tenant_id);
  message status() const;
  awaitable<cv::error_code> grant(session_state& s);
  awaitable<void> revoke(session_state& s, std::uint64_t& counter);
  awaitable<void> take_over(session_state& s, std::uint64_t tenant_id);
  std::optional<std::size_t> take_slot();
  std::map<std::uint64_t, tenant>::iterator free_tenant(std::map<std::uint64_t, tenant>::iterator t);
  void release(session_state& s);
  awaitable<void> expire_held();

  asio::io_context& io_;
  server_config config_;
  cv::listener listener_;  // first: its device view outlives everything below
  cv::protection_domain pd_;
  cv::completion_queue cq_;  ///< every session's
  std::vector<std::byte> pool_memory_;
  cv::memory_region pool_mr_;
  std::optional<cv::window_pool> windows_;
  std::list<std::shared_ptr<session_state>> sessions_;  ///< those whose coroutine runs
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

/// Sleeps in steps of `step` until `done()` holds or `limit` has passed. @returns done().
template <class Pred>
awaitable<bool> wait_until(Pred done, clock_type::duration limit,
                           clock_type::duration step = std::chrono::milliseconds(2)) {
  const auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  const auto deadline = clock_type::now() + limit;
  while (!done() && clock_type::now() < deadline) {
    timer.expires_after(step);
    co_await timer.async_wait(tuple);
  }
  co_return done();
}

/// Serves until SIGINT, SIGTERM or an admin shutdown, reading the device's events meanwhile, then prints the
/// statistics. @returns the exit status: 0, or 1 when the server could not start or failed.
int run_server(const server_config& config);

}  // namespace memory_pool
