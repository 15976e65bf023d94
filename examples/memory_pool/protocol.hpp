#pragma once
// The memory pool's wire protocol: the control `message` both ends send with IBV_WR_SEND over one rdma_cm
// connection (the server's hello, a request, its reply), its commands and refusals, and the queue-pair
// sizes of a control connection. The data itself moves only with RDMA write and read, through the windows
// a reply to get_keys grants.
#include <coverbs/coverbs.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace memory_pool {

namespace cv = coverbs;

/// What a message asks for, or that it is the server's hello or a reply (`message::op`).
enum class command : std::uint32_t {
  get_keys = 1,     ///< client → server: my keys (tenant); granted now if I have none on this connection
  wait_compaction,  ///< client → server: reply when the next compaction is done
  compact,          ///< admin → server: compact once `count` sessions wait for it
  shutdown,         ///< admin → server: stop accepting, end every session, print statistics, exit
  bye,              ///< client → server: I am done; free my slot (a tenant of this connection)
  status,           ///< admin → server: slots per half, free, held for a reconnect
  hello = 0x80,     ///< server → client, first on a connection: the server's receive is posted, go ahead
  reply = 0x100,    ///< server → client, to any of the above
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
  /// The request came as a send-with-invalidate of a key this connection was not granted: the server ends
  /// the connection.
  foreign_invalidation
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
  case refusal::foreign_invalidation:
    return "the request came as a send-with-invalidate naming a key this connection was not granted; the "
           "server ends the connection (send requests with a plain send)";
  }
  return "unknown refusal";
}

/// One control message, either way. Sent as bytes (IBV_WR_SEND), so every field is in host byte order:
/// both ends on machines of one endianness.
struct message {
  static constexpr std::uint32_t magic_value = 0x6d706f6f;  // "mpoo"
  std::uint32_t magic = magic_value;
  command op = command::reply;
  refusal status = refusal::none;
  std::uint32_t count = 0;        ///< compact: sessions to wait for; hello, refused compact: slots per half
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

/// Queue-pair sizes of a control connection: a handful of sends and one receive in flight.
inline cv::queue_pair_options small_queue_pair() {
  cv::queue_pair_options q;
  q.max_send_wr = 16;
  q.max_recv_wr = 4;
  return q;
}

}  // namespace memory_pool
