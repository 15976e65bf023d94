#pragma once
// Internal: a memory-window invalidation (`invalidate`): IBV_WR_LOCAL_INV for type 2, a zero-length
// ibv_bind_mw(3) for type 1. One operation kind of a queue pair, named by window or by rkey. `prepare` is in
// lib/windows/invalidate_op.cpp. Not part of the public API.

#include <coverbs/detail/ops/results.hpp>

#include <cstdint>

namespace coverbs::detail {

/// Invalidates the window's current key.
struct invalidate_window_op {
  using completion = status_result;
  window_impl* window = nullptr;
  error_code prepare(queue_pair_impl* qp, wr_node& n) const;
};

/// Invalidates the window whose live key is `rkey` (`errc::rkey_not_a_window` when coverbs knows none).
struct invalidate_rkey_op {
  using completion = status_result;
  std::uint32_t rkey = 0;
  error_code prepare(queue_pair_impl* qp, wr_node& n) const;
};

}  // namespace coverbs::detail
