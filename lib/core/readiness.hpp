#pragma once
// Private to lib/: what the end of a readiness wait (`async_wait(wait_read)` on a descriptor coverbs owns) means.
//
// Boost 1.81's io_uring backend (Asio 1.26) prepares its own cancellation (IORING_OP_ASYNC_CANCEL, from
// `cancel()`, a cancellation slot or a descriptor's destruction) and timeout-removal (IORING_OP_TIMEOUT_REMOVE,
// from every `run_for` / `run_one_for` woken before its time) submission entries without setting their
// user_data, and liburing 2.3's prep functions leave the entry's old value in place. The completion of such a
// request — 0, or an error such as ENOENT ("No such file or directory": nothing left to cancel) or EALREADY —
// is then handed to whichever operation last used that entry of the ring: often a readiness wait on a
// completion channel or an rdma_cm event channel. Asio fixed it in 1.27 (Boost 1.82, "Fix initialization of
// sqe->user_data", chriskohlhoff/asio commit 0080ec1c). Measured here (issue 37's wire suite, 100,000 calls
// on rxe, loops driven by `run_for`): completion queues ended their wait with ENOENT after about 11,000 calls,
// stopped waiting, and their connections stalled for good.
//
// So a wait that ends with an error other than cancellation (our own) or a bad descriptor (closed under us)
// proves nothing about the descriptor: treat it as a wake-up, read the descriptor without blocking (every
// reader here does: the descriptors are O_NONBLOCK), and wait again. A stray success is a spurious wake-up of
// the same kind, already harmless.

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

namespace coverbs::detail {

/// True when a readiness wait that ended with `ec` (non-zero) was ended by something other than the
/// descriptor: neither a cancellation (operation_aborted) nor a closed descriptor (bad_descriptor).
inline bool stray_wait_error(const boost::system::error_code& ec) noexcept {
  return ec && ec != boost::asio::error::operation_aborted && ec != boost::asio::error::bad_descriptor;
}

/// `ec` as the caller of a readiness wait should act on it: a stray error (above) becomes success — look at the
/// descriptor, as after any wake-up.
inline boost::system::error_code readiness_result(const boost::system::error_code& ec) noexcept {
  return stray_wait_error(ec) ? boost::system::error_code{} : ec;
}

}  // namespace coverbs::detail
