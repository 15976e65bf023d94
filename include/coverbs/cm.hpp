#pragma once
/// @file
/// Connections through rdma_cm (librdmacm), as Asio asynchronous operations — the whole layer in one include:
/// - coverbs/connection_options.hpp: `connection_options` (queue pair, resources, connection parameters)
/// - coverbs/connection.hpp: `connection` and `connection::async_disconnect` (event channels, devices,
///   queue pair transitions, disconnects, thread safety of the layer)
/// - coverbs/listener.hpp: `listener`, `listener::async_accept`, `listener_options`, `listener_stats`
/// - coverbs/connect.hpp: `async_connect`, `connect_options`
/// - coverbs/session.hpp: `session` (a connection with its message endpoint, made before it was established),
///   `async_connect_session`, `session_options`
/// - coverbs/session_server.hpp: `async_serve` (one coroutine per session, on a listener or a loop pool),
///   `server_options`, `session_report`
/// - coverbs/datagram_resolve.hpp: `async_resolve_datagram_peer`, `datagram_peer`, `datagram_resolve_options`
///   (the active side for datagram queue pairs)
/// - coverbs/datagram_listener.hpp: `datagram_listener`, `datagram_listener_options`, `datagram_listener_stats`
///   (the passive side)
/// - coverbs/multicast.hpp: `async_join_multicast`, `multicast_membership`, `multicast_options`
/// Needs coverbs built with librdmacm (`COVERBS_HAS_RDMACM` in coverbs/config.hpp).

#include <coverbs/connect.hpp>
#include <coverbs/connection.hpp>
#include <coverbs/connection_options.hpp>
#include <coverbs/datagram_listener.hpp>
#include <coverbs/datagram_resolve.hpp>
#include <coverbs/listener.hpp>
#include <coverbs/multicast.hpp>
#include <coverbs/session.hpp>
#include <coverbs/session_server.hpp>
