#pragma once
// Internal: the completion arguments that several operation kinds share. An operation kind (a struct of this
// folder) names its completion as `using completion = ...`: one of these, or its own struct with `signature`
// (the handler's) and `result` (the arguments, as a tuple, from the node and its work completion). Not part of the public API.

#include <coverbs/detail/wr_node.hpp>

#include <cstddef>
#include <tuple>

namespace coverbs::detail {

/// `void(error_code, std::size_t bytes)`: the posted length (sends, writes, reads).
struct length_result {
  using signature = void(error_code, std::size_t);
  static auto result(error_code ec, const wr_node& n, const ibv_wc*) {
    return std::tuple(ec, ec ? std::size_t{0} : std::size_t{n.sge.length});
  }
};

/// `void(error_code)`: success or the first error, nothing else.
struct status_result {
  using signature = void(error_code);
  static auto result(error_code ec, const wr_node&, const ibv_wc*) { return std::tuple(ec); }
};

}  // namespace coverbs::detail
