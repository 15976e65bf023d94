// bench_overhead's call op, in a translation unit of its own (overhead_call.hpp says why).
#include "overhead_call.hpp"

#include <coverbs/message_endpoint.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <exception>
#include <vector>

namespace bench_overhead {

namespace cv = coverbs;
namespace asio = boost::asio;

/// The two endpoints over the pair (a: client, b: server) and their payloads.
struct call_rig {
  cv::message_endpoint client, server;
  std::vector<std::byte> request, reply;
  int replies_sent = 0;  // the server's async_reply handlers that ran (a batch ends when the last did)
  call_rig(soft_verbs::soft_pair& rig, std::size_t size)
      : client(rig.pd, rig.a, options(size)), server(rig.pd, rig.b, options(size)), request(size), reply(size) {}

private:
  static cv::message_options options(std::size_t size) {
    cv::message_options o;
    o.slot_size = std::max<std::size_t>(size, 64);
    o.recv_slots = o.send_slots = 16;
    return o;
  }
};

namespace {

/// Runs `io` one handler at a time until `done()`: the endpoints keep their receives posted, so `run()` would not
/// return.
template <class Pred>
void run_calls(asio::io_context& io, Pred done) {
  io.restart();
  while (!done())
    if (io.run_one() == 0) call_failed("the call loop", "the io_context ran out of work before the calls ended");
}

/// The server with callbacks: answers each request, waits for the next while any is left.
struct call_server {
  call_rig* r;
  int* left;
  void start() const { r->server.async_receive_request(*this); }
  void operator()(cv::error_code ec, cv::inbound_request request) const {
    if (ec) call_failed("async_receive_request", ec.message());
    r->server.async_reply(request, asio::buffer(r->reply), [r = r](cv::error_code e) {
      if (e) call_failed("async_reply", e.message());
      ++r->replies_sent;
    });
    if (--*left > 0) start();
  }
};

/// The client with callbacks: one call in flight, the next started from the reply's handler.
struct call_client {
  call_rig* r;
  int* left;
  void start() const { r->client.async_call(asio::buffer(r->request), *this); }
  void operator()(cv::error_code ec, cv::inbound_message reply) const {
    if (ec) call_failed("async_call", ec.message());
    reply.release();
    if (--*left > 0) start();
  }
};

}  // namespace

/// `ops` calls answered with callbacks.
void callback_calls(asio::io_context& io, call_rig& r, int ops) {
  int to_serve = ops, to_call = ops;
  r.replies_sent = 0;
  call_server{&r, &to_serve}.start();
  call_client{&r, &to_call}.start();
  run_calls(io, [&] { return to_call == 0 && r.replies_sent == ops; });
}

/// `ops` calls, the client and the server each a coroutine awaiting with `token`.
template <class Token>
static void await_calls(asio::io_context& io, call_rig& r, int ops, Token token) {
  int ended = 0;
  const auto end = [&ended](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
    ++ended;
  };
  asio::co_spawn(
      io,
      [&r, ops, token]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i) {
          cv::inbound_request request = co_await r.server.async_receive_request(token);
          co_await r.server.async_reply(request, asio::buffer(r.reply), token);
        }
      },
      end);
  asio::co_spawn(
      io,
      [&r, ops, token]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i) {
          cv::inbound_message reply = co_await r.client.async_call(asio::buffer(r.request), token);
          reply.release();
        }
      },
      end);
  run_calls(io, [&] { return ended == 2; });
}

void awaitable_calls(asio::io_context& io, call_rig& r, int ops) { await_calls(io, r, ops, asio::use_awaitable); }
void deferred_calls(asio::io_context& io, call_rig& r, int ops) { await_calls(io, r, ops, asio::deferred); }

void call_rig_deleter::operator()(call_rig* r) const noexcept { delete r; }
call_rig_ptr make_call_rig(soft_verbs::soft_pair& pair, std::size_t size) { return call_rig_ptr(new call_rig(pair, size)); }

}  // namespace bench_overhead
