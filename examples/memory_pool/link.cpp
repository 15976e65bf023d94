// The steps of a client's link to the server: open (connect, register, await the hello), close, and one
// request answered by its reply.
#include "link.hpp"

#include "common/peer.hpp"

#include <coverbs_support/timings.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

namespace memory_pool {

using clock_type = example::clock;
using statistics::us_since;

awaitable<std::unique_ptr<link>> open_link(const client_config& c, client_stats& st) {
  const auto ex = co_await asio::this_coro::executor;
  cv::connect_options o;
  o.qp = small_queue_pair();  // its min_rnr_timer (default 12, 0.64 ms) applies from the connect on
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
  l->conn = std::move(conn);
  l->size = c.size;
  l->memory.resize(2 * message_bytes + 2 * c.size);
  const auto t1 = clock_type::now();
  auto [reg_ec, mr] = co_await cv::reg_mr(l->conn.pd(), l->memory, cv::access::local_write, tuple);
  if (reg_ec) throw step_failed("register " + std::to_string(l->memory.size()) + " bytes: " + reg_ec.message());
  st.registration_us.add(us_since(t1));
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

awaitable<message> call(link& l, message request, client_stats& st) {
  const message reply = co_await exchange(l, request, st);
  if (reply.status == refusal::too_many_waiting)
    throw step_failed("server refused: waiting for " + std::to_string(request.count) +
                      " sessions, but the pool has only " + std::to_string(reply.count) + " slots");
  if (reply.status != refusal::none) throw step_failed(std::string("server refused: ") + to_string(reply.status));
  co_return reply;
}

}  // namespace memory_pool
