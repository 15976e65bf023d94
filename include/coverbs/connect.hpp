#pragma once
/// @file
/// `async_connect`: the active side of an rdma_cm connection, with its options (`connect_options`). The
/// connection it completes with: coverbs/connection.hpp.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/connection.hpp>
#include <coverbs/connection_options.hpp>
#include <coverbs/detail/cm_access.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace coverbs {

/// What `async_connect` does and how long each step may take.
struct connect_options : connection_options {
  connect_options() = default;  // not an aggregate: see connection_options
  std::chrono::milliseconds resolve_address_timeout{2000};  ///< rdma_resolve_addr(3) timeout_ms
  std::chrono::milliseconds resolve_route_timeout{2000};    ///< rdma_resolve_route(3) timeout_ms
  /// The whole operation, resolution included; zero: no limit beyond rdma_cm's own retries.
  std::chrono::milliseconds connect_timeout{10000};
  /// Numeric local address to connect from; empty: the route decides.
  std::string source_address;
};

/// Connects to `host`:`port`: resolves the address (rdma_resolve_addr(3)) and the route
/// (rdma_resolve_route(3)), creates the queue pair per `options` on the device rdma_cm chose, moves it
/// to INIT, requests the connection (rdma_connect(3)), and on the reply moves it to RTR and RTS and
/// completes the handshake (rdma_establish(3)).
/// @param host numeric IPv4 or IPv6 address (no name lookup); an IPv6 link-local one with its interface
/// ("fe80::1%eth0"). Loopback and wildcard addresses (127.0.0.0/8, ::1, 0.0.0.0, ::) work only where the
/// device resolves them (InfiniBand); on RoCE / rxe connect to the address of the RDMA device's interface.
/// @param port decimal 1..65535
/// @par Completion Signature `void(error_code, connection)`
/// @par Errors `errc::invalid_address`, `errc::link_local_needs_scope`, `errc::invalid_port_number`,
/// `errc::private_data_too_long` (checked before anything starts); `errc::loopback_address` (a loopback or
/// wildcard host the device could not resolve or route); `errc::address_resolution_failed` (RDMA_CM_EVENT_ADDR_ERROR: no RDMA device
/// reaches the host, or it did not answer within resolve_address_timeout), `errc::route_resolution_failed`
/// (RDMA_CM_EVENT_ROUTE_ERROR), `errc::connection_refused` (RDMA_CM_EVENT_REJECTED: nobody listens on that
/// port, or the server refused), `errc::connection_unreachable` (RDMA_CM_EVENT_UNREACHABLE: no reply to the
/// request), `errc::connection_failed` (RDMA_CM_EVENT_CONNECT_ERROR), `boost::asio::error::timed_out`
/// (connect_timeout elapsed), `errc::device_mismatch`, `errc::executor_mismatch` (options.cq serviced by
/// another executor than `ex`; checked before anything starts), errno of the rdma_* calls (-1/errno) and
/// of ibv_create_qp / ibv_modify_qp.
/// @par Per-Operation Cancellation terminal, partial, total: completes with `operation_aborted`; the cm_id
/// and queue pair are destroyed (a request already sent is withdrawn by the peer's CM).
/// @par Thread Safety The connection is bound to `ex`, which may be another loop than the caller's: the
/// connect runs there; the handler runs on its associated executor, else `ex`.
/// @param ex where the connection is bound: an executor, or an execution context (e.g. an `io_context`)
/// standing for its executor. The default token is the executor's (`asio::default_completion_token_t`,
/// e.g. from `asio::as_tuple(asio::use_awaitable).as_default_on(ex)`), else `asio::deferred` (awaited by `co_await`).
template <detail::executor_or_context ExecutorOrContext,
          completion_token_or_handler<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::string_view port,
                   const connect_options& options, Token&& token = Token{}) {
  return detail::initiate_checked<Token, void(error_code, connection)>(
      [ex = boost::asio::any_io_executor(detail::executor_of(ex))](auto handler, const std::string& h,
                                                                    const std::string& p, const connect_options& o) {
        detail::start_connect(ex, h, p, o, std::move(handler));
      },
      token, std::string(host), std::string(port), options);
}

/// As above with a numeric port.
template <detail::executor_or_context ExecutorOrContext,
          completion_token_or_handler<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::uint16_t port, const connect_options& options,
                   Token&& token = Token{}) {
  return async_connect(ex, host, std::string_view(std::to_string(port)), options, std::forward<Token>(token));
}

/// As above with default `connect_options` (no options argument to write inside a `co_await`).
template <detail::executor_or_context ExecutorOrContext,
          completion_token_or_handler<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::string_view port, Token&& token = Token{}) {
  return async_connect(ex, host, port, connect_options(), std::forward<Token>(token));
}

/// As above with a numeric port.
template <detail::executor_or_context ExecutorOrContext,
          completion_token_or_handler<void(error_code, connection)> Token =
              detail::default_token_t<detail::executor_of_t<ExecutorOrContext>>>
auto async_connect(ExecutorOrContext&& ex, std::string_view host, std::uint16_t port, Token&& token = Token{}) {
  return async_connect(ex, host, std::string_view(std::to_string(port)), connect_options(),
                       std::forward<Token>(token));
}

}  // namespace coverbs
