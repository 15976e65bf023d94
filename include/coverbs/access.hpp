#pragma once
/// @file
/// `access`: the rights of a memory region or window (`enum ibv_access_flags`) as a type-safe bitmask.
///
/// Rules the verbs enforce (ibv_reg_mr(3), IBA C10-74): `remote_write` and `remote_atomic` need
/// `local_write` on a region; a window's effective rights are the intersection of its own and its
/// region's.
///
/// Spell it `coverbs::access` (or through a namespace alias): a `using coverbs::access;` at global scope
/// clashes with POSIX `access(2)` from <unistd.h>.

#include <coverbs/config.hpp>
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace coverbs {

/// Access rights; combine with `|`, test with `has(a, b)`. Values equal the verbs flags, so
/// `to_verbs(a)` and `from_verbs(f)` are plain conversions.
enum class access : std::uint32_t {
  none = 0,
  local_write = IBV_ACCESS_LOCAL_WRITE,
  remote_write = IBV_ACCESS_REMOTE_WRITE,
  remote_read = IBV_ACCESS_REMOTE_READ,
  remote_atomic = IBV_ACCESS_REMOTE_ATOMIC,
  mw_bind = IBV_ACCESS_MW_BIND,
  zero_based = IBV_ACCESS_ZERO_BASED,
  on_demand = IBV_ACCESS_ON_DEMAND,
  hugetlb = IBV_ACCESS_HUGETLB,
  relaxed_ordering = IBV_ACCESS_RELAXED_ORDERING,
};

constexpr access operator|(access a, access b) noexcept {
  return static_cast<access>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr access operator&(access a, access b) noexcept {
  return static_cast<access>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
constexpr access operator~(access a) noexcept { return static_cast<access>(~static_cast<std::uint32_t>(a)); }
constexpr access& operator|=(access& a, access b) noexcept { return a = a | b; }
constexpr access& operator&=(access& a, access b) noexcept { return a = a & b; }

/// True when every right in `wanted` is in `a`.
constexpr bool has(access a, access wanted) noexcept { return (a & wanted) == wanted; }

/// The verbs flags (`ibv_access_flags` bits) of `a`.
constexpr int to_verbs(access a) noexcept { return static_cast<int>(a); }
/// The `access` of verbs flags, e.g. `ibv_mr::access` of a region registered elsewhere.
constexpr access from_verbs(unsigned flags) noexcept { return static_cast<access>(flags); }

/// "local_write|remote_read", "none" for no rights; unknown bits as hex.
std::string to_string(access a);

}  // namespace coverbs
