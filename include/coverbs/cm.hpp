#pragma once
/// @file
/// Connections through rdma_cm (librdmacm), as Asio asynchronous operations — the whole layer in one include:
/// - coverbs/connection_options.hpp: `connection_options` (queue pair, resources, connection parameters)
/// - coverbs/connection.hpp: `connection` and `connection::async_disconnect` (event channels, devices,
///   queue pair transitions, disconnects, thread safety of the layer)
/// - coverbs/listener.hpp: `listener`, `listener::async_accept`, `listener_options`, `listener_stats`
/// - coverbs/connect.hpp: `async_connect`, `connect_options`
/// Needs coverbs built with librdmacm (`COVERBS_HAS_RDMACM` in coverbs/config.hpp).

#include <coverbs/connect.hpp>
#include <coverbs/connection.hpp>
#include <coverbs/connection_options.hpp>
#include <coverbs/listener.hpp>
