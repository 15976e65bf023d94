#pragma once
/// @file
/// `datagram_listener`: the passive side of rdma_cm for datagrams. It binds and listens on an id of rdma_cm's
/// UDP port space and answers every service ID resolution request (`async_resolve_datagram_peer`, udaddy's
/// client, any RDMA_PS_UDP rdma_connect) with the number of one of the datagram queue pairs it serves, round
/// robin — so peers spread over the queue pairs of a `loop_pool`'s members. A resolution leaves no connection
/// behind: the request's id is destroyed once answered, and the listener holds nothing per peer.

#include <coverbs/datagram_queue_pair.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

struct rdma_cm_id;

namespace coverbs {

namespace detail {
class datagram_listener_impl;
}

/// How a datagram listener is set up.
struct datagram_listener_options {
  datagram_listener_options() = default;  // not an aggregate: see connection_options
  /// Requests the kernel queues before the listener reads them (rdma_listen(3)).
  int backlog = 64;
  /// Sent with every answer (at most 136 bytes, a SIDR REP's room; peers see all 136, zero-padded).
  std::vector<std::byte> private_data;
};

/// What a datagram listener did with the requests it read (`datagram_listener::stats()`).
struct datagram_listener_stats {
  std::uint64_t answered = 0;  ///< requests answered with a queue pair number
  /// Requests refused: none of the queue pairs is on the request's device and port (the requester sees
  /// `errc::connection_refused`), or rdma_accept failed.
  std::uint64_t refused = 0;
};

/// A passive rdma_cm endpoint of the UDP port space, answering resolutions with its queue pairs' numbers.
/// Move-only.
///
/// Lifetime: the queue pairs it answers with outlive it (peers that resolve it send to them); it keeps their
/// numbers, read once at construction, so it never touches them and may run on another loop than they do.
/// Destroying it destroys its id: later requests to the port are answered "no such service" by the kernel.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; call `stats()` and `error()` from its executor.
class datagram_listener {
public:
  using executor_type = boost::asio::any_io_executor;

  /// Binds to `address` (numeric IPv4/IPv6; "" or "0.0.0.0": every RDMA device) and `port` (0: one is picked,
  /// see `local_port()`), listens, and from then on answers every request on `ex`.
  /// @param answer_with at least one queue pair; each request is answered with the next one (round robin)
  /// on the request's device and port.
  /// @throws system_error `errc::qkey_mismatch` (a queue pair whose Q_Key is not `rdma_cm_udp_qkey`: rdma_cm
  /// would announce its own Q_Key for it), `errc::device_mismatch` (bound to one device, and a queue pair is
  /// on another), `errc::private_data_too_long`, EINVAL (no queue pair, or a null or empty one),
  /// `errc::invalid_address`, `errc::link_local_needs_scope`, and the errno of rdma_create_event_channel /
  /// rdma_create_id / rdma_bind_addr / rdma_listen, as `listener`'s constructor.
  template <detail::executor_or_context ExecutorOrContext>
  datagram_listener(ExecutorOrContext&& ex, std::span<datagram_queue_pair* const> answer_with,
                    std::string_view address, std::uint16_t port = 0, const datagram_listener_options& options = {})
      : datagram_listener(executor_type(detail::executor_of(ex)), answer_with, address, port, options, 0) {}
  /// As above, answering with one queue pair.
  template <detail::executor_or_context ExecutorOrContext>
  datagram_listener(ExecutorOrContext&& ex, datagram_queue_pair& answer_with, std::string_view address,
                    std::uint16_t port = 0, const datagram_listener_options& options = {})
      : datagram_listener(executor_type(detail::executor_of(ex)), std::array<datagram_queue_pair*, 1>{&answer_with},
                          address, port, options, 0) {}

  datagram_listener(datagram_listener&&) noexcept = default;
  datagram_listener& operator=(datagram_listener&& other) noexcept;
  datagram_listener(const datagram_listener&) = delete;
  datagram_listener& operator=(const datagram_listener&) = delete;
  ~datagram_listener();

  executor_type get_executor() const noexcept;
  std::uint16_t local_port() const noexcept;
  /// A non-owning view of the device the listener is bound to; empty when bound to every device.
  coverbs::device& get_device() const noexcept;
  rdma_cm_id* native_handle() const noexcept;
  /// Counts of answered and refused requests.
  datagram_listener_stats stats() const noexcept;
  /// Why the listener stopped answering (`errc::device_removed`, or a failed read of its event channel);
  /// empty while it answers.
  error_code error() const noexcept;

private:
  datagram_listener(const executor_type& ex, std::span<datagram_queue_pair* const> answer_with,
                    std::string_view address, std::uint16_t port, const datagram_listener_options& options, int);
  std::shared_ptr<detail::datagram_listener_impl> impl_;
};

}  // namespace coverbs
