#pragma once
// Internal: a memory-window bind (`bind_mw`, `rebind_mw`): one operation kind of a queue pair; its handler
// receives the new remote key. `prepare` (lib/windows/bind_op.cpp) validates (detail/bind_check.hpp) and
// fills IBV_WR_BIND_MW, or sets up ibv_bind_mw(3) for type 1. Not part of the public API.

#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/detail/wr_node.hpp>
#include <coverbs/memory_window.hpp>

#include <tuple>

namespace coverbs::detail {

struct bind_op {
  window_impl* window = nullptr;
  ibv_mr* region = nullptr;
  access region_rights = access::none;
  window_range range;
  access rights = access::none;
  bool rebind = false;  ///< rebind_mw: a bound type-2 window is invalidated in the same chain

  error_code prepare(queue_pair_impl* qp, wr_node& n) const;

  /// The completion arguments.
  struct completion {
    using signature = void(error_code, remote_key);
    static auto result(error_code ec, const wr_node& n, const ibv_wc*) { return std::tuple(ec, ec ? remote_key{} : n.key); }
  };
};

}  // namespace coverbs::detail
