#pragma once
/// @file
/// Everything coverbs offers, in one include.
#include <coverbs/config.hpp>
#include <coverbs/access.hpp>
#include <coverbs/address_handle.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/buffer_pool.hpp>
#include <coverbs/cancel_after.hpp>
#include <coverbs/completion_queue.hpp>
#include <coverbs/datagram_queue_pair.hpp>
#include <coverbs/device.hpp>
#include <coverbs/device_event.hpp>
#include <coverbs/device_events.hpp>
#include <coverbs/error.hpp>
#include <coverbs/inbound_message.hpp>
#include <coverbs/inbound_request.hpp>
#include <coverbs/loop_pool.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/memory_window.hpp>
#include <coverbs/bulk.hpp>
#include <coverbs/message_endpoint.hpp>
#include <coverbs/message_header.hpp>
#include <coverbs/metrics.hpp>
#include <coverbs/outstanding_work.hpp>
#include <coverbs/protection_domain.hpp>
#include <coverbs/queue_pair.hpp>
#include <coverbs/received.hpp>
#include <coverbs/registered_buffer.hpp>
#include <coverbs/registered_span.hpp>
#include <coverbs/registrar.hpp>
#include <coverbs/registration_cache.hpp>
#include <coverbs/registration_service.hpp>
#include <coverbs/remote_key.hpp>
#include <coverbs/shared_region.hpp>
#include <coverbs/shared_receive_queue.hpp>
#include <coverbs/window_counters.hpp>
#include <coverbs/window_lease.hpp>
#include <coverbs/window_operations.hpp>
#include <coverbs/window_pool.hpp>
#if defined(COVERBS_HAS_RDMACM)  // coverbs/config.hpp: built with librdmacm
#include <coverbs/cm.hpp>
#endif

// The Asio pieces every guide snippet uses with coverbs' operations (completion tokens, spawning), so that
// this one include is enough: asio::as_tuple, use_awaitable, deferred, co_spawn, detached, this_coro.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
