#pragma once
// `receiver`: the one receive each end of a control connection keeps posted ahead of the next message, and
// the order of the first messages on a connection (the server's hello before anything else).
#include "protocol.hpp"

#include "common/prelude.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/channel.hpp>

#include <functional>
#include <memory>
#include <tuple>
#include <utility>

namespace memory_pool {

namespace asio = boost::asio;
using asio::awaitable;
using example::tuple;

/// Keeps one receive posted ahead of the message it is for, so a peer's send never meets an empty receive
/// queue: rdma_cm sets the RNR timer to its slowest, so a send that arrives early waits 655 ms before its
/// retry. Completions go through a channel that the handler keeps alive, so a receive flushed after its
/// owner is gone is harmless.
///
/// The first message on a connection is the server's hello, sent once the server's receive is posted; the
/// client sends nothing before it. The client may post its own first receive only after registering its
/// buffers; a hello that arrives before it is retried after the queue pair's `min_rnr_timer`
/// (`queue_pair_options`, default 0.64 ms, set by the connect), not after rdma_cm's 655 ms.
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

}  // namespace memory_pool
