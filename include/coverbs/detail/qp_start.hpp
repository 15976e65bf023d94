#pragma once
// Internal: what an operation's initiation asks of a queue pair (lib/dataplane/queue_pair.cpp): its executor,
// and taking the prepared node (credits, posting, or failing it with `ec` — posted, never inline). Not part
// of the public API.

#include <coverbs/detail/fwd.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>

namespace coverbs::detail {

/// Starts `node`: posts it when a send- or receive-queue credit is free, else queues it (FIFO); with `ec`
/// set (its `prepare` refused it), completes it with `ec` through the executor.
void qp_start(queue_pair_impl* qp, wr_node* node, error_code ec);
/// The queue pair's executor (its send completion queue's), by reference: it outlives the queue pair.
const boost::asio::any_io_executor& qp_executor(const queue_pair_impl* qp) noexcept;

}  // namespace coverbs::detail
