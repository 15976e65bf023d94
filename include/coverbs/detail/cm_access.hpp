#pragma once
// How the public rdma_cm types (coverbs/connection.hpp, listener.hpp, connect.hpp, datagram_resolve.hpp,
// multicast.hpp) reach the library: the implementation types they hold, the functions their initiating
// functions start, and `cm_access`, through which the library builds a `connection` or a membership. Not public: names here may change in any release.

#include <coverbs/error.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/system_executor.hpp>

#include <memory>
#include <string_view>
#include <type_traits>

namespace coverbs {
class connection;
struct connection_options;
struct connect_options;
struct datagram_peer;
class multicast_membership;
}  // namespace coverbs

namespace coverbs::detail {

class connection_impl;
class listener_impl;
class multicast_impl;
using connection_handler = boost::asio::any_completion_handler<void(error_code, connection)>;
using disconnect_handler = boost::asio::any_completion_handler<void(error_code)>;
using datagram_peer_handler = boost::asio::any_completion_handler<void(error_code, datagram_peer)>;
using multicast_handler = boost::asio::any_completion_handler<void(error_code, multicast_membership)>;

/// The initiations of `async_connect`, `listener::async_accept` and `connection::async_disconnect`
/// (lib/cm/start.cpp). Each completes its handler once, never inside the call.
void start_connect(const boost::asio::any_io_executor& ex, std::string_view host, std::string_view port,
                   const connect_options& options, connection_handler handler);
void start_accept(listener_impl& l, const boost::asio::any_io_executor& peer, const connection_options& options,
                  connection_handler handler);
void start_disconnect(connection_impl* c, const boost::asio::any_io_executor& ex, disconnect_handler handler);

/// The library's way into `connection` (its friend): builds one around an implementation.
struct cm_access {
  /// A connection holding `impl` (what a connect or accept completes with).
  static connection make_connection(std::shared_ptr<connection_impl> impl) noexcept;
  /// A membership holding `impl` (what a multicast join completes with).
  static multicast_membership make_membership(std::shared_ptr<multicast_impl> impl) noexcept;
};

/// The handler's associated executor as an I/O executor; empty when it has none (a plain callback).
template <class Handler>
boost::asio::any_io_executor associated_io_executor(const Handler& h) {
  using executor = boost::asio::associated_executor_t<Handler>;
  if constexpr (std::is_same_v<executor, boost::asio::system_executor> ||
                !std::is_convertible_v<executor, boost::asio::any_io_executor>)
    return {};
  else
    return boost::asio::get_associated_executor(h);
}

}  // namespace coverbs::detail
