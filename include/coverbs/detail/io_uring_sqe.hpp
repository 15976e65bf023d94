#pragma once
/// @file
/// Included ahead of every translation unit (`--include=coverbs/detail/io_uring_sqe.hpp`, which the Meson
/// dependency, `pkg-config --cflags coverbs` and the CMake target coverbs::coverbs add) when coverbs is built on
/// Asio's io_uring backend with a Boost older than 1.82. Not for direct use.
///
/// Boost 1.81's io_uring service (Asio 1.26) takes its submission entries from `io_uring_get_sqe` and sets
/// `user_data` only for the requests whose completions it wants back; its cancellations (after `cancel()`, a
/// cancellation slot, a descriptor's destruction) and timeout removals (each `run_for` woken before its time) keep
/// whatever value the entry held before, since liburing 2.3 does not clear it. Their completion then reaches the
/// operation that last used the entry, with a result that is not its own: a readiness wait ends with ENOENT, a read
/// with 0 bytes (end of file), and two completions for one operation corrupt Asio's queue of completed operations,
/// losing a third's (docs/troubleshooting.md, "Stray io_uring completions"). Asio 1.27 clears `user_data` in its
/// `get_sqe`; this header does the same for 1.26: below, `io_uring_get_sqe(ring)` returns an entry whose
/// `user_data` is 0, and Asio ignores a completion with no user data.
///
/// It must be seen by every translation unit that includes Asio, before Asio, as the backend flags must: mixed,
/// the program links two versions of Asio's inline `io_uring_service::get_sqe` and keeps one of them.
/// coverbs/config.hpp stops a translation unit that includes coverbs without it.

#if defined(__cplusplus) && !defined(COVERBS_IO_URING_SQE_CLEARED)
#define COVERBS_IO_URING_SQE_CLEARED 1

#include <liburing.h>

/// `io_uring_get_sqe` with the entry's `user_data` cleared (liburing 2.3 leaves the previous request's there).
inline ::io_uring_sqe* coverbs_io_uring_get_sqe(::io_uring* ring) noexcept {
  ::io_uring_sqe* sqe = ::io_uring_get_sqe(ring);
  if (sqe) ::io_uring_sqe_set_data(sqe, nullptr);
  return sqe;
}

// Asio calls `::io_uring_get_sqe(&ring_)`: the macro makes that `::coverbs_io_uring_get_sqe(&ring_)`.
#define io_uring_get_sqe(ring) coverbs_io_uring_get_sqe(ring)

#endif
