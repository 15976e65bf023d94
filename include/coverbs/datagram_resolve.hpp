#pragma once
/// @file
/// `async_resolve_datagram_peer`: the active side of rdma_cm for datagrams. It finds the queue pair that serves
/// an address and port (a `datagram_listener`, or any rdma_cm UDP-port-space listener such as udaddy's) and
/// completes with a `datagram_peer`: an address handle, the peer's queue pair number and Q_Key — what
/// `datagram_queue_pair::async_send_to` needs.
///
/// How: an id of rdma_cm's UDP port space (RDMA_PS_UDP) resolves the address (rdma_resolve_addr(3), which ARPs
/// on RoCE) and the route (rdma_resolve_route(3)), then rdma_connect(3) sends a service ID resolution request
/// (IBA 12.11, SIDR REQ); the listener's reply (SIDR REP) carries the queue pair number and Q_Key, and rdma_cm
/// the path (RDMA_CM_EVENT_ESTABLISHED, `param.ud`). No connection exists afterwards: the id is destroyed and
/// the peer's queue pair number stays valid as long as the peer keeps that queue pair.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/address_handle.hpp>
#include <coverbs/datagram_queue_pair.hpp>
#include <coverbs/detail/cm_access.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/async_result.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coverbs {

class protection_domain;

/// A datagram peer found through rdma_cm: where to send (`destination()`), and what its listener said.
/// Move-only (it owns its address handle).
struct datagram_peer {
  /// The path to the peer's port, in the protection domain given to the resolution.
  address_handle ah;
  /// The peer's queue pair number and Q_Key (from the listener's reply).
  std::uint32_t qp_num = 0;
  std::uint32_t qkey = 0;
  /// The listener's reply private data. The reply has room for 136 bytes and rdma_cm reports all of them:
  /// what the listener sent, then zeros.
  std::vector<std::byte> private_data;

  /// What a send names to reach the peer. Valid while this object lives (it points at `ah`).
  datagram_destination destination() const noexcept { return {&ah, qp_num, qkey}; }
};

/// How `async_resolve_datagram_peer` resolves, and how long each step may take.
struct datagram_resolve_options {
  datagram_resolve_options() = default;  // not an aggregate: see connection_options
  std::chrono::milliseconds resolve_address_timeout{2000};  ///< rdma_resolve_addr(3) timeout_ms
  std::chrono::milliseconds resolve_route_timeout{2000};    ///< rdma_resolve_route(3) timeout_ms
  /// The whole operation; zero: no limit beyond rdma_cm's own (a service ID request nobody answers — a
  /// listener that never reads its events — ends after the kernel's retries: about 70 s on Soft-RoCE).
  std::chrono::milliseconds timeout{10000};
  /// Numeric local address to resolve from; empty: the route decides.
  std::string source_address;
  /// Sent to the listener with the request (at most 180 bytes: 216 in a SIDR REQ, less rdma_cm's header).
  std::vector<std::byte> private_data;
};

namespace detail {
/// The initiation (lib/cm/start.cpp).
void start_resolve_datagram_peer(protection_domain& pd, const datagram_queue_pair& via, std::string_view host,
                                 std::string_view port, const datagram_resolve_options& options,
                                 datagram_peer_handler handler);
}  // namespace detail

/// Finds the datagram queue pair serving `host`:`port` through rdma_cm (see the file comment), for sends from
/// `via`, and makes the address handle to it in `pd`.
/// @param pd `via`'s protection domain (else `errc::address_handle_mismatch`, checked before anything starts);
/// it must outlive the operation and the peer's address handle.
/// @param via the queue pair that will send to the peer: the resolution runs on its executor, and rdma_cm's
/// route must leave from its device and port.
/// @param host numeric IPv4 or IPv6 address (no name lookup), as for `async_connect`: on RoCE / rxe the address
/// of the RDMA device's interface, never a loopback one.
/// @param port decimal 1..65535
/// @par Completion Signature `void(error_code, datagram_peer)`
/// @par Errors Before anything starts: `errc::invalid_address`, `errc::link_local_needs_scope`,
/// `errc::invalid_port_number`, `errc::private_data_too_long` (over 180 bytes), `errc::address_handle_mismatch`
/// (`pd` is not `via`'s), EBADF (`pd` not open). Then: `errc::loopback_address`,
/// `errc::address_resolution_failed` (RDMA_CM_EVENT_ADDR_ERROR), `errc::route_resolution_failed`
/// (RDMA_CM_EVENT_ROUTE_ERROR), `errc::device_mismatch` (rdma_cm routes through another device or port than
/// `via`'s), `errc::connection_refused` (nobody serves that port, or the listener refused: the reply's status,
/// RDMA_CM_EVENT_UNREACHABLE with a SIDR status, or RDMA_CM_EVENT_REJECTED), `errc::connection_unreachable` (no
/// reply to the request: RDMA_CM_EVENT_UNREACHABLE with -ETIMEDOUT), `boost::asio::error::timed_out`
/// (`options.timeout` elapsed), errno of the rdma_* calls and of ibv_create_ah.
/// @par Per-Operation Cancellation terminal, partial, total: completes with `operation_aborted`; the id is
/// destroyed (a reply that comes later is dropped by the kernel).
/// @throws system_error EBADF when `via` is empty (moved from): there is no executor to complete on.
/// @par Thread Safety Call from `via`'s executor. The handler runs on its associated executor, else `via`'s.
template <completion_token_or_handler<void(error_code, datagram_peer)> Token =
              datagram_queue_pair::default_token>
auto async_resolve_datagram_peer(protection_domain& pd, const datagram_queue_pair& via, std::string_view host,
                                 std::string_view port, const datagram_resolve_options& options,
                                 Token&& token = Token{}) {
  return detail::initiate_checked<Token, void(error_code, datagram_peer)>(
      [&pd, &via](auto handler, const std::string& h, const std::string& p, const datagram_resolve_options& o) {
        detail::start_resolve_datagram_peer(pd, via, h, p, o, std::move(handler));
      },
      token, std::string(host), std::string(port), options);
}

/// As above with a numeric port.
template <completion_token_or_handler<void(error_code, datagram_peer)> Token =
              datagram_queue_pair::default_token>
auto async_resolve_datagram_peer(protection_domain& pd, const datagram_queue_pair& via, std::string_view host,
                                 std::uint16_t port, const datagram_resolve_options& options,
                                 Token&& token = Token{}) {
  return async_resolve_datagram_peer(pd, via, host, std::string_view(std::to_string(port)), options,
                                     std::forward<Token>(token));
}

/// As above with default options.
template <completion_token_or_handler<void(error_code, datagram_peer)> Token =
              datagram_queue_pair::default_token>
auto async_resolve_datagram_peer(protection_domain& pd, const datagram_queue_pair& via, std::string_view host,
                                 std::uint16_t port, Token&& token = Token{}) {
  return async_resolve_datagram_peer(pd, via, host, std::string_view(std::to_string(port)),
                                     datagram_resolve_options(), std::forward<Token>(token));
}

}  // namespace coverbs
