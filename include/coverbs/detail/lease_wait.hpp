#pragma once
// Internal: waiting for a lease's key to die (lib/windows/window_pool.cpp). Not part of the public API.

#include <coverbs/error.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>

#include <memory>

namespace coverbs::detail {

struct lease_state;
using revoke_handler = boost::asio::any_completion_handler<void(error_code)>;

/// Queues `handler` until the key is dead; `hold == false` (async_revoke) starts the revocation too. With no
/// state (an empty lease), completes with EBADF through `ex` (the handler's associated executor, else `ex`).
void add_waiter(const std::shared_ptr<lease_state>& state, const boost::asio::any_io_executor& ex,
                revoke_handler handler, bool hold);

}  // namespace coverbs::detail
