#pragma once
/// @file
/// `message_header`: the fixed 24-byte header in front of every message a `message_endpoint` sends.
///
/// Layout (little-endian, offsets in bytes):
///
/// | offset | size | field | value |
/// |---|---|---|---|
/// | 0 | 1 | magic | 0xCB |
/// | 1 | 1 | version | 2 |
/// | 2 | 1 | type | `message_type`: 1 data, 2 request, 3 reply, 4 credit |
/// | 3 | 1 | flags | 0 (reserved) |
/// | 4 | 4 | length | payload bytes after the header (0 for a credit message) |
/// | 8 | 8 | correlation id | a call's id (request and reply), else 0 |
/// | 16 | 2 | data credits | data receives the sender reposted since its last report |
/// | 18 | 2 | control credits | control receives the sender reposted since its last report |
/// | 20 | 4 | slot size | the sender's `message_options::slot_size`: the longest payload its receives hold |
///
/// A message is one RC send of header + payload into one receive slot of the peer (`message_endpoint.hpp`
/// explains the credits). Version 1 had no slot size (bytes 20..23 were reserved, 0): a sender could not
/// know that a message was longer than the peer's slots.

#include <coverbs/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace coverbs {

/// What a message is; the value of the header's type byte.
enum class message_type : std::uint8_t {
  data = 1,     ///< a one-way message (`async_send_message`)
  request = 2,  ///< a call's request (`async_call`), answered by a reply with the same correlation id
  reply = 3,    ///< the answer to a request (`async_reply`)
  credit = 4,   ///< a standalone credit update: no payload, consumes a control receive
};

/// One decoded header (the table above).
struct message_header {
  static constexpr std::size_t size = 24;          ///< bytes on the wire
  static constexpr std::uint8_t magic = 0xCB;      ///< byte 0
  static constexpr std::uint8_t version = 2;       ///< byte 1

  message_type type = message_type::data;
  std::uint8_t flags = 0;
  std::uint32_t length = 0;               ///< payload bytes
  std::uint64_t correlation_id = 0;
  std::uint16_t data_credits = 0;         ///< data credits returned to the receiver of this header
  std::uint16_t control_credits = 0;      ///< control credits returned
  std::uint32_t slot_size = 0;            ///< the sender's slot size (payload bytes), at least 1
};

/// Writes `h` into the first `message_header::size` bytes of `out`.
void encode_header(const message_header& h, std::span<std::byte, message_header::size> out) noexcept;

/// Decodes the header at the start of `received` (the bytes one receive got) and checks it against what
/// arrived: at least `message_header::size` bytes, magic, version, a known type, zero flags, a length of at
/// most `slot_size` and equal to what follows the header, no payload in a credit message, a sender's slot
/// size of at least 1. @returns an empty string when the header is valid (then `out` holds it), else what was wrong,
/// with the numbers (the text `message_endpoint::diagnostic()` reports with `errc::protocol_violation`).
std::string decode_header(std::span<const std::byte> received, std::size_t slot_size, message_header& out);

}  // namespace coverbs
