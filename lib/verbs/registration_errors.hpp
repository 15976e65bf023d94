#pragma once
// Private to lib/: what a failed ibv_reg_mr(3) means in the terms of the request — the one classification of
// registration errors, for memory_region (synchronous), reg_mr and the buffer pool.

#include <coverbs/access.hpp>
#include <coverbs/error.hpp>

#include <cstddef>
#include <span>

namespace coverbs::detail {

/// The error of a failed ibv_reg_mr in the terms of the request: `errc::rights_need_local_write`,
/// `empty_buffer`, `invalid_registration` (EINVAL); `mw_bind_needs_writable_memory`, `buffer_not_mapped`
/// (EFAULT); `memlock_exhausted` (ENOMEM); any other errno as it is.
error_code classify_registration_error(const error_code& ec, std::span<std::byte> buffer, access rights) noexcept;

}  // namespace coverbs::detail
