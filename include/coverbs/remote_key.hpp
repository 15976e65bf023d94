#pragma once
/// @file
/// `remote_key`: a peer's memory as the wire names it (address, length, rkey).

#include <coverbs/config.hpp>

#include <cstdint>

namespace coverbs {

/// A peer's memory as the wire names it: virtual address (or offset, for zero-based regions), length in
/// bytes, and the rkey of the region or window that grants access. Trivially copyable, so it can be sent
/// as bytes (fields in host byte order; convert when peers differ in endianness).
struct remote_key {
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t rkey = 0;

  /// The part [offset, offset + n) of this remote range (clamped to it).
  remote_key slice(std::uint64_t offset, std::uint64_t n) const noexcept {
    offset = offset < length ? offset : length;
    n = n < length - offset ? n : length - offset;
    return {addr + offset, n, rkey};
  }
  friend bool operator==(const remote_key&, const remote_key&) = default;
};

}  // namespace coverbs
