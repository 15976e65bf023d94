#pragma once
/// @file
/// The two ends of a one-sided operation: `registered_span` (local memory a work request may name, with
/// its lkey) and `remote_key` (a peer's memory: address, length and rkey, as exchanged out of band).

#include <coverbs/error.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace coverbs {

/// Registered local memory: bytes inside one memory region plus that region's lkey. This is what a
/// scatter/gather entry (`ibv_sge`) needs. Cheap to copy; does not own anything — the region must stay
/// registered until every work request naming the span has completed.
struct registered_span {
  std::span<std::byte> bytes;
  std::uint32_t lkey = 0;

  std::byte* data() const noexcept { return bytes.data(); }
  /// Length in bytes.
  std::size_t size() const noexcept { return bytes.size(); }
  /// The sub-span [offset, offset + length), clamped to the span (like std::span::subspan, but never UB).
  registered_span subspan(std::size_t offset, std::size_t length = SIZE_MAX) const noexcept {
    offset = offset < bytes.size() ? offset : bytes.size();
    length = length < bytes.size() - offset ? length : bytes.size() - offset;
    return {bytes.subspan(offset, length), lkey};
  }
  ibv_sge to_sge() const noexcept {
    return {reinterpret_cast<std::uint64_t>(bytes.data()), static_cast<std::uint32_t>(bytes.size()), lkey};
  }
};

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
