#pragma once
// The memory pool's wire protocol: the control `message`, a call's request and its reply on a coverbs
// session (docs/messaging.md), its commands and refusals, and the sizes of a control connection. The data
// itself moves only with RDMA write and read, through the windows a reply to get_keys grants.
#include <coverbs/coverbs.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>

namespace memory_pool {

namespace cv = coverbs;

/// What a request asks for (`message::op`).
enum class command : std::uint32_t {
  get_keys = 1,     ///< client → server: my keys (tenant); granted now if I have none on this connection
  wait_compaction,  ///< client → server: reply when the next compaction is done
  compact,          ///< admin → server: compact once `count` sessions wait for it
  shutdown,         ///< admin → server: stop accepting, end every session, print statistics, exit
  bye,              ///< client → server: I am done; free my slot (a tenant of this connection)
  status,           ///< admin → server: slots per half, free, held for a reconnect
};

/// Why the server refused a request (`message::status`).
enum class refusal : std::int32_t {
  none = 0,
  bad_request,
  no_free_slot,
  barrier_timed_out,
  no_compaction,
  shutting_down,
  grant_failed,
  too_many_waiting,   ///< compact: more sessions to wait for than the pool has slots (`count`: the slots)
  tenant_limit,       ///< get_keys: this connection holds --tenants-per-connection tenants (`count`: that)
  tenant_taken_over,  ///< get_keys: another connection presented the same id meanwhile and took it
  not_your_tenant,    ///< bye: no tenant of this id belongs to this connection
  connection_ended,   ///< the connection ended while the request waited (never delivered)
};

/// What refusal `r` means, for messages.
inline const char* to_string(refusal r) {
  switch (r) {
  case refusal::none: return "ok";
  case refusal::bad_request: return "bad request";
  case refusal::no_free_slot: return "no free slot in the pool (raise --pool-size or lower --slot-size)";
  case refusal::barrier_timed_out: return "not enough sessions waited for the compaction within 60 s";
  case refusal::no_compaction: return "no compaction came within 120 s";
  case refusal::shutting_down: return "the server is shutting down";
  case refusal::grant_failed: return "binding a window failed (see the server's output)";
  case refusal::too_many_waiting: return "more sessions to wait for than the pool has slots";
  case refusal::tenant_limit:
    return "this connection already holds as many tenants as the server allows one connection (its "
           "--tenants-per-connection): say bye for one, or use another connection";
  case refusal::tenant_taken_over: return "another connection presented this tenant's id and took it over";
  case refusal::not_your_tenant: return "no tenant of this id belongs to this connection";
  case refusal::connection_ended: return "the connection ended";
  }
  return "unknown refusal";
}

/// One control message, a request or its reply. Sent as its bytes, so every field is in host byte order: both
/// ends on machines of one endianness.
struct message {
  command op{};  ///< request: what it asks for
  refusal status = refusal::none;
  std::uint32_t count = 0;        ///< compact: sessions to wait for; status, refused compact: slots per half
  std::uint64_t tenant = 0;       ///< get_keys / bye: the client's id (kept across reconnects)
  std::uint64_t generation = 0;   ///< reply: compactions done so far
  cv::remote_key write_key{};     ///< reply to get_keys: {address, length in bytes, rkey}, remote_write
  cv::remote_key read_key{};      ///< reply to get_keys: the same bytes, remote_read
  std::uint64_t revoked = 0;      ///< reply to compact: windows revoked
  std::uint64_t granted = 0;      ///< reply to compact: windows bound afresh
  std::uint64_t moved_bytes = 0;  ///< reply to compact: bytes copied to the other half
  std::uint64_t took_us = 0;      ///< reply to compact: revoke + copy + re-grant, microseconds
  std::uint32_t free_slots = 0;   ///< reply to status: slots of the current half no tenant holds
  std::uint32_t held_slots = 0;   ///< reply to status: slots held for a reconnect (their connection ended)
};

static_assert(std::is_trivially_copyable_v<message>, "a message is sent as its bytes");

/// The size of every control message, either way.
inline constexpr std::size_t message_bytes = sizeof(message);

/// `m` as the bytes a call or a reply sends.
inline std::span<const std::byte> bytes_of(const message& m) { return std::as_bytes(std::span(&m, 1)); }

/// The message in `bytes` (a request or a reply as received); nothing when they are not one (their size).
inline std::optional<message> message_in(std::span<const std::byte> bytes) {
  message m;
  if (bytes.size() != message_bytes) return std::nullopt;
  std::memcpy(&m, bytes.data(), message_bytes);
  return m;
}

/// Both sides' sessions: slots of one message, one call at a time with room to spare; send work requests for
/// the messages, the client's RDMA writes and reads, and the server's binds and invalidations.
inline cv::session_options session_options() {
  cv::session_options o;
  o.messages.slot_size = message_bytes;
  o.messages.recv_slots = 4;
  o.messages.send_slots = 4;
  o.connection.qp.max_send_wr = 16;
  o.connection.qp.max_recv_wr = o.messages.recv_slots + 4;  // and the 4 control receives of the credits
  return o;
}

}  // namespace memory_pool
