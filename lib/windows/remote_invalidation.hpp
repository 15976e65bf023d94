#pragma once
// Private to lib/: what a peer's send-with-invalidate (IBV_WC_WITH_INV) does to memory windows, and what a
// queue pair's reset and destruction do to the windows bound through it. Called by the data path (queue
// pairs' and shared receive queues' receive completions, reset, destruction).

#include <coverbs/error.hpp>

#include <infiniband/verbs.h>

#include <cstdint>

namespace coverbs::detail {

class window_impl;

/// A receive on queue pair `qp_num` of `context` reported that the peer invalidated `rkey` (IBV_WC_WITH_INV;
/// for an SRQ receive, `qp_num` is the completion's). Runs on that queue pair's executor.
/// - `rkey` is the live key of a type-2 window bound through `qp_num`: marks it unbound (counted in
///   `remote_invalidations`, a lease's hook told) and returns success.
/// - anything else is refused (the rule: accept only a window bound through the queue pair it arrived on):
///   returns `errc::foreign_remote_invalidation` and counts `foreign_invalidations` — a key that is no live
///   window (stale, unknown), the live key of a type-1 window (IBA: only a type-2 window may be invalidated
///   remotely, and only through its own queue pair), of a window bound through another queue pair, or of a
///   window of another context of the same device (rxe checks neither queue pair nor protection domain).
///   A device that enforces the rule fails such a receive instead, so a live window gets here only from one
///   that did not (rxe), which has killed its key: on the window's own executor (dispatched there when it is
///   another), it is replaced (deallocated and allocated anew, so the key is dead on any device) and its
///   lease's hook told.
error_code note_remote_invalidation(ibv_context* context, std::uint32_t rkey, std::uint32_t qp_num) noexcept;

/// Queue pair `qp_num` of `context` was reset (a new connection, perhaps to another peer) or is being destroyed:
/// every type-2 window bound through it now is replaced (its key dead) and its lease's hook told
/// (operation_aborted). On that queue pair's executor.
void forget_windows_bound_through(ibv_context* context, std::uint32_t qp_num) noexcept;
/// Queue pair `qp_num` of `context` is being destroyed (its number may be reused): the windows bound through
/// it keep their keys but no longer count as bound through any queue pair, so a later remote invalidation of
/// them is foreign. Any thread (under the registry's mutex; a binding stored meanwhile stands).
void unlink_windows_from(ibv_context* context, std::uint32_t qp_num) noexcept;

/// A peer invalidated `w`'s live key through the queue pair it is bound through: records it (counted, the
/// lease's hook told). On `w`'s executor.
void accept_remote_invalidation(window_impl* w) noexcept;

}  // namespace coverbs::detail
