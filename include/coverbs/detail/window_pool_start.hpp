#pragma once
// Internal: starting a lease on a window pool (lib/windows/window_pool.cpp). Not part of the public API.

#include <coverbs/access.hpp>
#include <coverbs/error.hpp>
#include <coverbs/memory_window.hpp>

#include <boost/asio/any_completion_handler.hpp>

#include <chrono>
#include <memory>

namespace coverbs {
class memory_region;
class queue_pair;
class window_lease;
}  // namespace coverbs

namespace coverbs::detail {

struct pool_impl;
using lease_handler = boost::asio::any_completion_handler<void(error_code, window_lease)>;

/// Binds a window of `pool` and completes `handler` with the lease (or the bind's error).
void start_lease(const std::shared_ptr<pool_impl>& pool, queue_pair& qp, const memory_region& region,
                 window_range range, access rights, std::chrono::steady_clock::duration ttl, lease_handler handler);

}  // namespace coverbs::detail
