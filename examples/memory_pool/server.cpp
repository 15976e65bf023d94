// The memory pool server's connections: registering the pool, accepting, serving each session's requests
// until its connection ends (then releasing what it held), stopping, the statistics report, and
// `run_server`, the process around it. Tenants and keys: tenants.cpp; compaction: compaction.cpp.
#include "server.hpp"

#include "common/device_watch.hpp"
#include "common/run.hpp"

#include <coverbs_support/json_output.hpp>
#include <coverbs_support/size_argument.hpp>
#include <coverbs_support/timings.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <new>

namespace memory_pool {

using namespace std::chrono_literals;
using statistics::us_since;

awaitable<void> pool_server::run() {
  const auto rights =
      cv::access::local_write | cv::access::remote_read | cv::access::remote_write | cv::access::mw_bind;
  const auto t0 = clock_type::now();
  pool_mr_ = co_await cv::reg_mr(pd_, pool_memory_, rights);  // on a worker: the loop stays free
  registration_us_ = us_since(t0);
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
  example::busy_report busy(io);  // debug builds: SIGQUIT prints what keeps the loop busy
  watch.watch(server->device());
  std::exception_ptr failure;
  asio::co_spawn(io, server->run(), [&](std::exception_ptr e) {
    failure = e;
    signals.cancel();
    watch.close();
    busy.close();
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

}  // namespace memory_pool
