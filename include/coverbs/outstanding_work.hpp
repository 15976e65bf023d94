#pragma once
/// @file
/// "What keeps run() busy?": every coverbs object of an execution context that holds outstanding work now,
/// and what it waits for — the answer to an `io_context::run()` that does not return, or a shutdown that hangs.

#include <coverbs/config.hpp>  // the Asio configuration libcoverbs was built with (checked at compile and link time)

#include <boost/asio/execution_context.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace coverbs {

/// One coverbs object that holds outstanding work on an execution context: while it does, its operations (or
/// a wait of its own) keep `io_context::run()` from returning.
struct work_holder {
  /// The object's type, as the API names it: `completion_queue`, `queue_pair`, `datagram_queue_pair`,
  /// `shared_receive_queue`, `listener`, `connection`, `device_events`, `message_endpoint`, `datagram_listener`, and
  /// `datagram_resolve` (an rdma_cm UDP id resolving a datagram peer, or a multicast membership).
  std::string kind;
  /// Which one, e.g. `qp 0x11 on rxe0` or `cq 0x55d0c2a0 on rxe0`.
  std::string name;
  /// The operations it holds: work requests posted and operations waiting (queue pairs, shared receive
  /// queues), pending accepts and handshakes (listeners), a pending connect or disconnect (connections).
  /// 0 for a wait of its own: a completion queue's readiness wait, the device-events reader.
  std::size_t operations = 0;
  /// What it waits for, in words, e.g. `2 send requests posted, 3 waiting for a send-queue credit, 16
  /// receives posted`.
  std::string what;
};

/// Every coverbs object created on `ctx` (an `asio::io_context`, or a loop pool member's `context()`) that holds
/// outstanding work now, and what for; empty when coverbs holds none (then what keeps `run()` busy is not
/// coverbs': a work guard, a timer, a socket of the application's).
///
/// Thread: call it from a thread that runs `ctx` (a handler or a coroutine on it) or while no thread runs it —
/// it reads the objects' state as their own handlers leave it, without locking them. For a loop pool, use
/// `loop_pool::describe_outstanding_work()`, which asks each member on its own thread.
std::vector<work_holder> outstanding_work(boost::asio::execution_context& ctx);

/// `outstanding_work(ctx)` as text, one object per line (`queue_pair qp 0x11 on rxe0: 1 operation - 1
/// receive posted`), or a line saying coverbs holds none. Same thread rule.
std::string describe_outstanding_work(boost::asio::execution_context& ctx);

/// The lines of `describe_outstanding_work` for a list of holders.
std::string describe(const std::vector<work_holder>& holders);

}  // namespace coverbs
