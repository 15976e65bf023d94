// The memory pool server's sessions: registering the pool, serving each session's requests until its
// connection ends (then releasing what it held), stopping, the statistics report, and `run_server`, the
// process around it. Tenants and keys: tenants.cpp; compaction: compaction.cpp.
#include "server.hpp"

#include "common/device_watch.hpp"
#include "common/run.hpp"

#include <coverbs_support/json_output.hpp>
#include <coverbs_support/size_argument.hpp>
#include <coverbs_support/timings.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <exception>
#include <fstream>
#include <new>

namespace memory_pool {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
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

  // Every session's queue pair in the pool's domain (the windows over the pool are bound through it).
  cv::server_options o;
  o.session = session_options();
  o.session.connection.pd = &pd_;
  o.session.connection.cq = &cq_;
  // One completion queue for every session, each reserving its queue pair's depths from it: as many sessions as
  // it has room for run at once; further connection requests wait in the listener's backlog until one ends.
  const cv::queue_pair_options& qp = o.session.connection.qp;
  o.max_sessions = static_cast<std::size_t>(cq_.depth()) / (qp.max_send_wr + qp.max_recv_wr);
  o.on_end = [this](const cv::session_report& r) { ended(r); };
  const cv::session_handler handler = [this](cv::session& s) { return serve(s); };
  if (stopping_) co_return;  // stopped while the pool was being registered
  co_await cv::async_serve(listener_, handler, o, asio::bind_cancellation_slot(stop_accept_.slot(), tuple));
}

void pool_server::stop() {
  if (stopping_) return;
  stopping_ = true;
  stop_accept_.emit(asio::cancellation_type::terminal);
  sweep_.cancel();
  for (const auto& s : sessions_)
    s->link.endpoint().shutdown();  // its pending receive fails: the session ends
}

awaitable<void> pool_server::serve(cv::session& link) {
  ++connections_;
  if (stopping_) co_return;
  const auto s = std::make_shared<session_state>(link);
  sessions_.push_back(s);
  std::exception_ptr failure;  // what a handler threw (no memory, say): the end below still runs, then it goes on
  try {
    received next = co_await next_request(*s);
    while (!next.ec) {
      // The next request is received while this one is answered, so the end of the connection (that receive
      // failing) ends the session at once, whatever request it is busy with. (Named first, then awaited: GCC 12.)
      auto both = answer(*s, std::move(next.request)) && next_request(*s);
      next = co_await std::move(both);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // The end: every key this connection carried dies, then its tenants are released, before the session
  // closes (its state leaves sessions_ before the session it points to is gone). A compaction granting it
  // windows, or another session revoking them, is over first.
  s->end();
  co_await wait_until([this] { return !compacting_ && revocations_ == 0; }, 60s);
  co_await revoke(*s, windows_revoked_);
  release(*s);
  sessions_.remove(s);
  if (failure) std::rethrow_exception(failure);
}

/// The session's next request; a failed receive (the peer is gone, the queue pair broke, a foreign
/// send-with-invalidate, stop()) ends the session.
awaitable<pool_server::received> pool_server::next_request(session_state& s) {
  auto [ec, request] = co_await s.link.endpoint().async_receive_request(tuple);
  if (ec) s.end();
  co_return received{ec, std::move(request)};
}

awaitable<void> pool_server::answer(session_state& s, cv::inbound_request request) {
  ++requests_;
  control_bytes_ += request.size();
  const std::optional<message> m = message_in(request.bytes());
  request.release();  // its slot goes back to the peer; the reply needs only the call's id
  message reply{.status = refusal::bad_request};
  if (m) reply = co_await handle(s, *m);
  auto [ec] = co_await s.link.endpoint().async_reply(request, bytes_of(reply), tuple);
  if (ec) co_return;
  control_bytes_ += message_bytes;
  if (m && m->op == command::shutdown && reply.status == refusal::none) stop();
}

/// A session closed (or an accept failed): why, for the report.
void pool_server::ended(const cv::session_report& r) {
  if (r.peer.empty()) {
    ++accept_errors_;
    errors_.push_back(r.diagnostic);
    return;
  }
  ++sessions_ended_;
  ++end_causes_[r.reason ? r.reason.message() : "ended"];
}

awaitable<message> pool_server::handle(session_state& s, const message& request) {
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
