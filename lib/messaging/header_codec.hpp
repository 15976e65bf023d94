#pragma once
// Private to lib/: the endpoint's per-message header work, inline (message_header.hpp has the layout). The
// public encode_header / decode_header are out of line and decode_header builds its answer as a string; a
// message paid both calls and an empty string. Here a valid header costs a few loads and compares, and only
// a malformed one goes to decode_header for the text that says what was wrong.
#include <coverbs/message_header.hpp>

#include <bit>
#include <cstring>

namespace coverbs::detail {

inline constexpr bool little_endian_host = std::endian::native == std::endian::little;

template <class T>
T load_le(const std::byte* at) noexcept {
  T value;
  if constexpr (little_endian_host) {
    std::memcpy(&value, at, sizeof value);
  } else {
    value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(at[i]) << (8 * i));
  }
  return value;
}

template <class T>
void store_le(std::byte* at, T value) noexcept {
  if constexpr (little_endian_host) {
    std::memcpy(at, &value, sizeof value);
  } else {
    for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
  }
}

/// As encode_header.
inline void encode_header_inline(const message_header& h, std::byte* p) noexcept {
  store_le<std::uint32_t>(p, std::uint32_t{message_header::magic} | std::uint32_t{message_header::version} << 8 |
                                 std::uint32_t{static_cast<std::uint8_t>(h.type)} << 16 |
                                 std::uint32_t{h.flags} << 24);
  store_le<std::uint32_t>(p + 4, h.length);
  store_le<std::uint64_t>(p + 8, h.correlation_id);
  store_le<std::uint32_t>(p + 16, std::uint32_t{h.data_credits} | std::uint32_t{h.control_credits} << 16);
  store_le<std::uint32_t>(p + 20, h.slot_size);
}

/// The checks of decode_header, without the text: true when the header of the `bytes` received at `p` is valid
/// (then `out` holds it); false sends the caller to decode_header for what was wrong.
inline bool decode_header_inline(const std::byte* p, std::size_t bytes, std::size_t slot_size,
                                 message_header& out) noexcept {
  if (bytes < message_header::size) return false;
  const std::uint32_t first = load_le<std::uint32_t>(p);  // magic, version, type, flags
  const unsigned type = (first >> 16) & 0xFF;
  if ((first & 0xFF00FFFF) != (std::uint32_t{message_header::magic} | std::uint32_t{message_header::version} << 8) ||
      type < 1 || type > 4)
    return false;
  const std::uint32_t length = load_le<std::uint32_t>(p + 4);
  const std::uint32_t credits = load_le<std::uint32_t>(p + 16);
  const std::uint32_t sender_slot_size = load_le<std::uint32_t>(p + 20);
  if (length > slot_size || length != bytes - message_header::size || sender_slot_size == 0 ||
      (type == static_cast<unsigned>(message_type::credit) && length != 0))
    return false;
  out.type = static_cast<message_type>(type);
  out.flags = 0;
  out.length = length;
  out.correlation_id = load_le<std::uint64_t>(p + 8);
  out.data_credits = static_cast<std::uint16_t>(credits);
  out.control_credits = static_cast<std::uint16_t>(credits >> 16);
  out.slot_size = sender_slot_size;
  return true;
}

}  // namespace coverbs::detail
