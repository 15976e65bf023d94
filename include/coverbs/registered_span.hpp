#pragma once
/// @file
/// `registered_span`: local memory a work request may name (bytes inside one registered region, with its
/// lkey), and sequences of them (an operation's scatter/gather list).

#include <coverbs/error.hpp>

#include <infiniband/verbs.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
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

/// The most registered spans one operation takes (its scatter/gather list); a queue pair's
/// `queue_pair_options::max_send_sge` / `max_recv_sge` may allow fewer.
inline constexpr std::size_t max_spans_per_operation = 8;

/// A sequence of registered spans, in the manner of an Asio buffer sequence: any range whose elements
/// convert to `registered_span` (`std::array<registered_span, 2>`, `std::vector<registered_span>`,
/// `std::span<const registered_span>`). An operation reads it when it is initiated; the memory it names
/// must stay registered until the operation completes.
template <class T>
concept registered_span_sequence =
    std::ranges::input_range<const T> && std::convertible_to<std::ranges::range_reference_t<const T>, registered_span>;

}  // namespace coverbs
