// Bulk descriptors on the wire and the checks of the callee's helpers (bulk.hpp).
#include <coverbs/bulk.hpp>

#include <algorithm>
#include <limits>
#include <string>

namespace coverbs {

namespace {

constexpr std::byte magic[4] = {std::byte{'C'}, std::byte{'B'}, std::byte{'B'}, std::byte{'K'}};
constexpr access transfer_rights = access::remote_read | access::remote_write;

void put(std::byte* at, std::uint64_t v, int bytes) noexcept {
  for (int i = 0; i < bytes; ++i)
    at[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint64_t get(const std::byte* at, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= std::uint64_t(std::to_integer<std::uint8_t>(at[i])) << (8 * i);
  return v;
}

/// Why `message` holds no descriptor; empty when it does.
std::string refusal(std::span<const std::byte> message) {
  if (message.size() < bulk_descriptor::wire_size)
    return "a message of " + std::to_string(message.size()) + " bytes is shorter than a bulk descriptor (" +
           std::to_string(bulk_descriptor::wire_size) + " bytes)";
  if (!std::equal(magic, magic + 4, message.begin())) return "the message does not start with the magic \"CBBK\"";
  const auto rights = static_cast<access>(get(message.data() + 4, 4));
  if ((rights & ~transfer_rights) != access::none)
    return "the descriptor's rights " + to_string(rights) + " are not remote_read and/or remote_write";
  return {};
}

}  // namespace

std::array<std::byte, bulk_descriptor::wire_size> bulk_descriptor::encode() const noexcept {
  std::array<std::byte, wire_size> out{};
  std::copy(magic, magic + 4, out.begin());
  put(out.data() + 4, static_cast<std::uint32_t>(rights), 4);
  put(out.data() + 8, key.addr, 8);
  put(out.data() + 16, key.length, 8);
  put(out.data() + 24, key.rkey, 4);
  return out;
}

bulk_request parse_bulk_request(std::span<const std::byte> message, error_code& ec) noexcept {
  ec = {};
  bool bad = message.size() < bulk_descriptor::wire_size || !std::equal(magic, magic + 4, message.begin());
  const auto rights = bad ? access::none : static_cast<access>(get(message.data() + 4, 4));
  if (bad || (rights & ~transfer_rights) != access::none) {
    ec = errc::bad_bulk_descriptor;
    return {};
  }
  const std::byte* p = message.data();
  return {{{get(p + 8, 8), get(p + 16, 8), static_cast<std::uint32_t>(get(p + 24, 4))}, rights},
          message.subspan(bulk_descriptor::wire_size)};
}

bulk_request parse_bulk_request(std::span<const std::byte> message) {
  error_code ec;
  bulk_request r = parse_bulk_request(message, ec);
  if (ec) throw system_error(ec, "parse_bulk_request: " + refusal(message));
  return r;
}

namespace detail {

error_code check_bulk(const bulk_descriptor& d, access right, std::uint64_t bytes, std::uint64_t limit) noexcept {
  if (!has(d.rights, right)) return errc::bad_bulk_descriptor;
  // A range past the end of the address space: the responder would NAK it and fail this queue pair.
  if (d.key.length > 0 && d.key.addr > std::numeric_limits<std::uint64_t>::max() - (d.key.length - 1))
    return errc::bad_bulk_descriptor;
  if (bytes > limit) return errc::bulk_too_large;
  return {};
}

}  // namespace detail

}  // namespace coverbs
