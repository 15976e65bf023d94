// The steps of a client's link to the server: open (connect a session, register the blocks), close, and one
// call: a request answered by its reply.
#include "link.hpp"

#include "common/peer.hpp"

#include <coverbs_support/timings.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

namespace memory_pool {

using clock_type = example::clock;
using statistics::us_since;

awaitable<std::unique_ptr<link>> open_link(const client_config& c, client_stats& st) {
  const auto ex = co_await asio::this_coro::executor;
  const cv::session_options so = session_options();
  cv::connect_options o = so.connection;  // its endpoint made before the request goes out (session.hpp)
  static_cast<cv::connection_options&>(o) = cv::session_connection_options(so.connection, so.messages);
  const auto t0 = clock_type::now();
  const example::command_line server{.mode = example::role::connect, .address = c.host, .port = c.port};
  // A refused connect is tried again for 10 s, but not for longer than half of --timeout; the last try's
  // error is kept, so a process whose --timeout ends first says "connection refused" (timeout_reason).
  const auto patience =
      std::min<std::chrono::milliseconds>(std::chrono::seconds(10), std::chrono::seconds(c.timeout) / 2);
  auto [ec, conn] = co_await example::connect_patiently(ex, server, o, patience, &st.last_connect);
  if (ec) throw step_failed("connect to " + c.host + ":" + std::to_string(c.port) + ": " + ec.message());
  if (st.watch) st.watch->watch(conn.get_device());
  st.connect_us.add(us_since(t0));
  ++st.connections;
  auto l = std::make_unique<link>();
  l->s = cv::session(std::move(conn));
  l->size = c.size;
  l->memory.resize(2 * c.size);
  const auto t1 = clock_type::now();
  auto [reg_ec, mr] = co_await cv::reg_mr(l->s.pd(), l->memory, cv::access::local_write, tuple);
  if (reg_ec) throw step_failed("register " + std::to_string(l->memory.size()) + " bytes: " + reg_ec.message());
  st.registration_us.add(us_since(t1));
  l->mr = std::move(mr);
  co_return l;
}

awaitable<void> close_link(link& l) {
  l.mr = cv::memory_region();  // before the session's protection domain goes
  if (l.s) co_await l.s.async_close(tuple);
}

awaitable<message> exchange(link& l, message request, client_stats& st) {
  // A failed call says why the session failed (e.g. errc::connection_reset, errc::port_error), not the flush.
  auto [ec, reply] = co_await l.s.endpoint().async_call(bytes_of(request), tuple);
  if (ec) throw step_failed("call: " + ec.message());
  const std::optional<message> m = message_in(reply.bytes());
  if (!m) throw step_failed("malformed reply");
  st.control_bytes += 2 * message_bytes;
  co_return *m;
}

awaitable<message> call(link& l, message request, client_stats& st) {
  const message reply = co_await exchange(l, request, st);
  if (reply.status == refusal::too_many_waiting)
    throw step_failed("server refused: waiting for " + std::to_string(request.count) +
                      " sessions, but the pool has only " + std::to_string(reply.count) + " slots");
  if (reply.status != refusal::none) throw step_failed(std::string("server refused: ") + to_string(reply.status));
  co_return reply;
}

}  // namespace memory_pool
