#pragma once
// Private to lib/: an rdma_cm id of the UDP port space with an event channel of its own, driven on one
// executor — its address resolution started, a limit on the whole operation, its events read as they come.
// Two things build on it: a datagram peer's resolution (`resolve_op`) and a multicast membership
// (`multicast_impl`), each with its own steps (`on_event`) and ending (`fail`).

#include <coverbs/error.hpp>

#include "cm/cm_event.hpp"
#include "cm/event_channel.hpp"
#include "core/io_owner.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <rdma/rdma_cma.h>

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

namespace coverbs {
class protection_domain;
}

namespace coverbs::detail {

class ud_id : public std::enable_shared_from_this<ud_id>, public io_owner {
public:
  explicit ud_id(const boost::asio::any_io_executor& ex);
  virtual ~ud_id() { close(); }
  /// The io_context is shutting down: the timer and the descriptor go now, while the services exist.
  void on_context_shutdown() noexcept override;
  /// A resolution or a multicast membership waiting for its rdma_cm events (outstanding_work.hpp).
  void describe_work(std::vector<work_holder>& out) const override;

  boost::asio::any_io_executor ex_;
  std::unique_ptr<cm_channel> channel_;
  rdma_cm_id* id_ = nullptr;
  std::optional<boost::asio::steady_timer> timer_;  // reset only when the io_context shuts down
  bool waiting_ = false;
  bool loopback_dst_ = false;  ///< resolving a loopback or wildcard address
  /// The queue pair's protection domain (the peer's or group's address handle is made there) and port.
  protection_domain* pd_ = nullptr;
  std::uint8_t port_ = 0;

  /// On the executor: creates the channel and the id, resolves `dst` (from `src`, if any) within
  /// `address_timeout`, waits for events, and fails with `timed_out` after `limit` (zero: no limit).
  /// @throws system_error from rdma_create_event_channel / rdma_create_id / rdma_resolve_addr
  void start(sockaddr_storage& dst, sockaddr_storage* src, std::chrono::milliseconds address_timeout,
             std::chrono::milliseconds limit);
  /// Waits (once) for the channel to be readable while `expecting()`; then hands every event to `on_event`
  /// (an exception thrown there fails the operation).
  void wait();
  /// `ec`, or `errc::loopback_address` for a loopback or wildcard destination that failed while `resolving`
  /// (it fails in many ways: ENODEV, EINVAL, ADDR_ERROR).
  error_code named(error_code ec, bool resolving) const noexcept;
  /// Once the address is resolved: the id's device and port are the queue pair's, else @throws system_error
  /// `errc::device_mismatch` naming both (`operation` says whose check failed).
  void check_device(const char* operation) const;
  /// Stops waiting and destroys the id and the channel. Idempotent.
  void close() noexcept;

  /// Whether events are still expected.
  virtual bool expecting() const noexcept = 0;
  /// One event of the id. @throws system_error from the step it starts
  virtual void on_event(const cm_event& e) = 0;
  /// The operation ends with `ec`; `post`: from an initiating function or a cancellation (no inline handler).
  virtual void fail(error_code ec, bool post) = 0;
};

}  // namespace coverbs::detail
