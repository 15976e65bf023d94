#pragma once
// Private to lib/: the state behind a `datagram_listener` — a listening id of the UDP port space, the queue
// pairs it answers with (their numbers, devices and ports, read once) and its counters. It reads its event
// channel whenever it is readable and answers each request at once (rdma_accept with a queue pair number, a
// SIDR REP), then destroys the request's id: nothing outlives an answer. Listener's executor only.

#include <coverbs/datagram_listener.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>

#include "cm/cm_event.hpp"
#include "cm/event_channel.hpp"
#include "core/io_owner.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

struct rdma_cm_id;

namespace coverbs::detail {

class datagram_listener_impl final : public std::enable_shared_from_this<datagram_listener_impl>, public io_owner {
public:
  /// A queue pair the listener answers with: immutable facts, safe to read from any thread.
  struct answer {
    std::uint32_t qp_num = 0;
    ibv_device* device = nullptr;
    std::uint8_t port = 0;
  };

  datagram_listener_impl(const boost::asio::any_io_executor& ex, const datagram_listener_options& options)
      : ex_(ex), options_(options) {}
  ~datagram_listener_impl() { close(); }

  /// The io_context is shutting down: the channel's descriptor goes now, while the services exist.
  void on_context_shutdown() noexcept override;
  /// Its wait for resolution requests while it answers them (outstanding_work.hpp).
  void describe_work(std::vector<work_holder>& out) const override;
  /// Once the channel (and with it the descriptor) exists.
  void enroll_in_context();

  boost::asio::any_io_executor ex_;
  datagram_listener_options options_;
  std::vector<answer> answers_;
  std::size_t next_ = 0;  ///< where the round robin looks first
  std::unique_ptr<cm_channel> channel_;
  rdma_cm_id* id_ = nullptr;
  device device_;
  datagram_listener_stats stats_;
  error_code error_;
  bool waiting_ = false, closed_ = false;

  /// Waits (once) for a request; then answers every pending one.
  void wait();
  void on_readable(error_code ec);
  /// Answers request `e` with the next queue pair on its device and port, or refuses it; destroys its id.
  void on_request(const cm_event& e);
  /// Stops answering and destroys the id and the channel. Idempotent.
  void close() noexcept;
};

}  // namespace coverbs::detail
