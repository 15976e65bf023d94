#pragma once
// Internal: the pure part of memory-window bind validation (no device needed; unit-tested). Not part of the
// public API.

#include <coverbs/access.hpp>
#include <coverbs/error.hpp>
#include <coverbs/memory_window.hpp>

#include <cstddef>

namespace coverbs::detail {

/// What a bind is checked against.
struct bind_check {
  window_type type = window_type::type2;
  window_state state = window_state::unbound;
  const void* window_pd = nullptr;
  const void* qp_pd = nullptr;
  const void* region_pd = nullptr;
  access region_rights = access::none;
  std::size_t region_length = 0;
  window_range range;
  access rights = access::none;
  bool rebind = false;  ///< rebind_mw: a bound window is invalidated in the same chain
};

/// The first rule `c` breaks (see `bind_mw`), or success with the resolved length in `length`.
error_code validate_bind(const bind_check& c, std::size_t& length) noexcept;

}  // namespace coverbs::detail
