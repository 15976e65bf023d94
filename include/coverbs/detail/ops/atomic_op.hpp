#pragma once
// Internal: the atomic family of a queue pair (IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP): one
// operation kind; its handler receives the old value. `prepare` is in lib/dataplane/ops/atomic_op.cpp.
// Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/wr_node.hpp>

#include <cstdint>
#include <tuple>

namespace coverbs::detail {

/// The 8-byte old value the device wrote to the operation's local result buffer.
std::uint64_t atomic_old_value(const wr_node& n) noexcept;

struct atomic_op {
  registered_span result_buffer;  ///< 8 bytes of a local_write region: the old value lands here
  remote_key remote;
  ibv_wr_opcode opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  std::uint64_t compare_add = 0;  ///< the addend, or the value compared with
  std::uint64_t swap = 0;         ///< compare_swap's new value

  /// `errc::misaligned_atomic`, `errc::buffer_too_small`, `errc::atomics_unsupported` before posting.
  errc prepare(queue_pair_impl* qp, wr_node& n) const;  // errc{}: accepted

  /// The completion arguments.
  struct completion {
    using signature = void(error_code, std::uint64_t);
    static auto result(error_code ec, const wr_node& n, const ibv_wc*) {
      return std::tuple(ec, ec ? std::uint64_t{0} : atomic_old_value(n));
    }
  };
};

}  // namespace coverbs::detail
