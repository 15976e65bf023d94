#pragma once
// The datagram_rpc protocol: a request and its reply each fit one datagram (a header and up to
// `max_payload` bytes). The reply's payload is the request's, every byte plus one, so a client can check
// that the reply it got answers the request it sent. Requests carry the client's id and a sequence number:
// a retransmission repeats both, so the server answers a duplicate from its reply cache instead of doing the
// work again, and a client recognizes a late reply to a request it already completed.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace datagram_rpc {

inline constexpr std::uint32_t request_magic = 0x64677251;  // "dgrQ"
inline constexpr std::uint32_t reply_magic = 0x64677250;    // "dgrP"
/// Payload bytes per message: with the header, well below the 1024-byte path MTU of Soft-RoCE over a
/// 1500-byte Ethernet MTU (the smallest RoCE MTU is 256; a datagram longer than the path MTU is refused).
inline constexpr std::size_t max_payload = 512;

/// The first bytes of a request and of a reply (host byte order: both ends of this example are one build).
struct header {
  std::uint32_t magic = 0;
  std::uint32_t client = 0;  ///< the client's id (random per client process)
  std::uint64_t seq = 0;     ///< the request's number, from 0; a reply repeats it
  std::uint32_t length = 0;  ///< payload bytes that follow
  std::uint32_t status = 0;  ///< a reply's: 0 done
};
inline constexpr std::size_t header_size = sizeof(header);
inline constexpr std::size_t max_message = header_size + max_payload;

/// Writes a message of `kind` (request_magic or reply_magic) into `out` (at least max_message bytes).
/// @returns its length in bytes.
inline std::size_t write(std::span<std::byte> out, std::uint32_t kind, std::uint32_t client, std::uint64_t seq,
                         std::span<const std::byte> payload) {
  const header h{kind, client, seq, static_cast<std::uint32_t>(payload.size()), 0};
  std::memcpy(out.data(), &h, header_size);
  if (!payload.empty()) std::memcpy(out.data() + header_size, payload.data(), payload.size());
  return header_size + payload.size();
}

/// The header of a received message of `kind`, or nothing when it is not one: too short, another magic, or a
/// length that does not match the bytes received (a peer breaking the protocol is counted, never trusted).
inline std::optional<header> read(std::span<const std::byte> in, std::uint32_t kind) {
  if (in.size() < header_size) return std::nullopt;
  header h;
  std::memcpy(&h, in.data(), header_size);
  if (h.magic != kind || h.length > max_payload || header_size + h.length != in.size()) return std::nullopt;
  return h;
}

/// Payload byte `j` of request `seq` of `client`: differs between requests, so a misplaced reply is caught.
inline std::byte request_byte(std::uint32_t client, std::uint64_t seq, std::size_t j) {
  return static_cast<std::byte>((client * 31 + seq * 131 + j * 7) & 0xff);
}
/// The work: what a reply carries for a request's payload byte.
inline std::byte answer_byte(std::byte b) { return static_cast<std::byte>((static_cast<unsigned>(b) + 1) & 0xff); }
/// Request `seq`'s payload length: 0 .. max_payload, varying.
inline std::size_t request_length(std::uint64_t seq) { return (seq * 37) % (max_payload + 1); }

}  // namespace datagram_rpc
