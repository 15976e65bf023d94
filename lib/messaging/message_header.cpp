#include <coverbs/message_header.hpp>

#include <cstring>

namespace coverbs {

namespace {

template <class T>
void put(std::byte* at, T value) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}

template <class T>
T get(const std::byte* at) noexcept {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(at[i]) << (8 * i));
  return value;
}

}  // namespace

void encode_header(const message_header& h, std::span<std::byte, message_header::size> out) noexcept {
  std::byte* p = out.data();
  p[0] = std::byte{message_header::magic};
  p[1] = std::byte{message_header::version};
  p[2] = static_cast<std::byte>(h.type);
  p[3] = std::byte{h.flags};
  put<std::uint32_t>(p + 4, h.length);
  put<std::uint64_t>(p + 8, h.correlation_id);
  put<std::uint16_t>(p + 16, h.data_credits);
  put<std::uint16_t>(p + 18, h.control_credits);
  put<std::uint32_t>(p + 20, h.slot_size);
}

std::string decode_header(std::span<const std::byte> received, std::size_t slot_size, message_header& out) {
  if (received.size() < message_header::size)
    return "a message of " + std::to_string(received.size()) + " bytes is shorter than the " +
           std::to_string(message_header::size) + "-byte header";
  const std::byte* p = received.data();
  const auto magic = std::to_integer<unsigned>(p[0]), version = std::to_integer<unsigned>(p[1]);
  if (magic != message_header::magic)
    return "bad magic 0x" + [&] {
      static const char* digits = "0123456789ABCDEF";
      return std::string{digits[magic >> 4], digits[magic & 15]};
    }() + " (expected 0xCB)";
  if (version != message_header::version)
    return "protocol version " + std::to_string(version) + " (this side speaks version " +
           std::to_string(message_header::version) + ")";
  const auto type = std::to_integer<unsigned>(p[2]);
  if (type < 1 || type > 4) return "unknown message type " + std::to_string(type) + " (1 data .. 4 credit)";
  message_header h;
  h.type = static_cast<message_type>(type);
  h.flags = std::to_integer<std::uint8_t>(p[3]);
  h.length = get<std::uint32_t>(p + 4);
  h.correlation_id = get<std::uint64_t>(p + 8);
  h.data_credits = get<std::uint16_t>(p + 16);
  h.control_credits = get<std::uint16_t>(p + 18);
  h.slot_size = get<std::uint32_t>(p + 20);
  if (h.flags != 0) return "reserved header bits are set (flags " + std::to_string(h.flags) + ")";
  if (h.length > slot_size)
    return "payload length " + std::to_string(h.length) + " is above the slot size " + std::to_string(slot_size);
  const std::size_t arrived = received.size() - message_header::size;
  if (h.length != arrived)
    return "payload length " + std::to_string(h.length) + " differs from the " + std::to_string(arrived) +
           " bytes that arrived after the header";
  if (h.type == message_type::credit && h.length != 0) return "a credit message carries a payload";
  if (h.slot_size == 0) return "the sender's slot size is 0 (a header names the slot size of its sender)";
  out = h;
  return {};
}

}  // namespace coverbs
