#pragma once
/// @file
/// What is done with a memory window (memory_window.hpp) on the data path: `bind_mw`, `rebind_mw` and
/// `invalidate`, queue-pair operations like those of queue_pair.hpp (credits, flushing, cancellation).

#include <coverbs/detail/token_check.hpp>
#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/detail/ops/bind_op.hpp>
#include <coverbs/detail/ops/invalidate_op.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/memory_window.hpp>
#include <coverbs/queue_pair.hpp>

#include <cstdint>
#include <utility>

namespace coverbs {

/// Binds `window` to `range` of `region` with `rights` and produces the remote key a peer uses.
///
/// Type 2 posts IBV_WR_BIND_MW with the next key (ibv_inc_rkey(3) of the current one) and records it in the
/// window (`ibv_mw::rkey`) on success; type 1 calls ibv_bind_mw(3), which makes the previous key of a bound
/// window die. On failure the window keeps the key state it had.
///
/// @param qp a queue pair in the window's protection domain; for type 2 the key then works only for
/// peers connected to this queue pair.
/// @param range bytes of `region` from its start (`length` may be `window_range::all`).
/// @param rights any of remote_read, remote_write, remote_atomic.
/// @par Completion Signature `void(error_code, remote_key)`: {address, length in bytes, rkey}.
/// @par Errors Before posting (the queue pair stays healthy), in this order: EBADF (empty window or
/// unregistered region), `errc::window_busy` (another operation on the window is in flight),
/// `errc::pd_mismatch` (window, queue pair and region not in one domain, C10-72),
/// `errc::window_access_invalid` (a right other than the three remote ones),
/// `errc::region_lacks_mw_bind` (C10-73), `errc::window_needs_local_write` (C10-74),
/// `errc::access_exceeds_region` (a right the region does not grant), `errc::range_outside_region` (C10-75),
/// `errc::zero_length_window` (o10-37.2.40), `errc::window_still_bound` (type 2, o10-37.2.30: use
/// `rebind_mw`). From the device: `wc_errc::mw_bind_err`, `wr_flush_err`, the errno of ibv_post_send(3) /
/// ibv_bind_mw(3).
/// @par Per-Operation Cancellation As every queue-pair operation (queue_pair.hpp): terminal only once
/// posted. A cancelled or flushed bind leaves no live key.
/// @see ibv_bind_mw(3), ibv_post_send(3) (IBV_WR_BIND_MW), ibv_inc_rkey(3)
template <completion_token_or_handler<void(error_code, remote_key)> Token = queue_pair::default_token>
auto bind_mw(queue_pair& qp, memory_window& window, const memory_region& region, window_range range, access rights,
             Token&& token = {}) {
  return detail::impl_access::initiate(
      qp, std::forward<Token>(token),
      detail::bind_op{detail::impl_of(window), region.native_handle(), region.rights(), range, rights, false});
}

/// As `bind_mw`, for a window that may be bound already: its old key dies and the new binding (for example
/// with other rights) takes its place. A bound type-2 window is invalidated and bound again in one chain of
/// two work requests (IBV_WR_LOCAL_INV + IBV_WR_BIND_MW, one completion); a type-1 window simply rebinds.
/// If the chain fails, the window is replaced (deallocated and allocated again), so the old key is dead.
/// @par Completion Signature `void(error_code, remote_key)`
/// @par Errors As `bind_mw`, without `errc::window_still_bound`.
template <completion_token_or_handler<void(error_code, remote_key)> Token = queue_pair::default_token>
auto rebind_mw(queue_pair& qp, memory_window& window, const memory_region& region, window_range range, access rights,
               Token&& token = {}) {
  return detail::impl_access::initiate(
      qp, std::forward<Token>(token),
      detail::bind_op{detail::impl_of(window), region.native_handle(), region.rights(), range, rights, true});
}

/// Kills the window's key and completes once the device has retired it: IBV_WR_LOCAL_INV for type 2, a
/// zero-length ibv_bind_mw(3) for type 1. An unbound window completes at once with success (nothing to do).
/// Should the invalidation fail or be flushed, the window is replaced (ibv_dealloc_mw + ibv_alloc_mw), so in
/// every case the old key is dead when the handler runs.
/// @param qp a queue pair of the window's protection domain.
/// @par Completion Signature `void(error_code)`
/// @par Errors Before posting: EBADF (empty window), `errc::window_busy`, `errc::pd_mismatch`. After: the
/// work completion's `wc_errc`, `wr_flush_err` (the key is dead all the same).
/// @par Per-Operation Cancellation Terminal once posted (the queue pair goes to the error state; the key is
/// still dead when the handler runs).
/// @see ibv_post_send(3) (IBV_WR_LOCAL_INV), ibv_bind_mw(3)
template <completion_token_or_handler<void(error_code)> Token = queue_pair::default_token>
auto invalidate(queue_pair& qp, memory_window& window, Token&& token = {}) {
  return detail::impl_access::initiate(qp, std::forward<Token>(token),
                                      detail::invalidate_window_op{detail::impl_of(window)});
}

/// As above, for the window whose current key is `rkey` (in the queue pair's domain).
/// @par Errors `errc::rkey_not_a_window` (no window coverbs knows has that live key; nothing is posted),
/// then as above.
template <completion_token_or_handler<void(error_code)> Token = queue_pair::default_token>
auto invalidate(queue_pair& qp, std::uint32_t rkey, Token&& token = {}) {
  return detail::impl_access::initiate(qp, std::forward<Token>(token), detail::invalidate_rkey_op{rkey});
}

}  // namespace coverbs
