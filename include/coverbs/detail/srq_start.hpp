#pragma once
// Internal: what an operation's initiation asks of a shared receive queue (lib/dataplane/shared_receive_queue.cpp).
// Not part of the public API.

#include <coverbs/detail/fwd.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>

namespace coverbs::detail {

/// Starts a receive node (posted when a credit is free, else queued; failed with `ec` when set).
void srq_start(shared_receive_queue_impl* srq, wr_node* node, error_code ec);
/// The shared receive queue's executor (its completion queue's), by reference: it outlives the SRQ.
const boost::asio::any_io_executor& srq_executor(const shared_receive_queue_impl* srq) noexcept;
/// Queues a wait for the next IBV_EVENT_SRQ_LIMIT_REACHED.
void srq_start_wait_limit(shared_receive_queue_impl* srq, wr_node* node);

}  // namespace coverbs::detail
