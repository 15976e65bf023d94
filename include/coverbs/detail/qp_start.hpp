#pragma once
// Internal: what an operation's initiation asks of a queue pair: filling its work request and taking the node
// (credits, posting, or failing it — posted, never inline). Not part of the public API.

#include <coverbs/detail/fwd.hpp>

namespace coverbs::detail {

/// Fills `node`'s work request for the operation `op` (`Op::prepare`, which validates it: nothing is posted
/// yet) and starts it: posts it when a send- or receive-queue credit is free, else queues it (FIFO). An
/// operation `prepare` refuses completes with its error through the executor (posted, never inline).
/// One call from an initiating function into the library: defined in lib/dataplane/qp_impl.hpp, instantiated
/// beside each operation kind's `prepare`.
template <class Op>
void qp_start(queue_pair_impl* qp, wr_node* node, const Op& op);

}  // namespace coverbs::detail
