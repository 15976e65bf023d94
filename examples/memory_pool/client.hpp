#pragma once
// The memory pool's client side: what --connect and its options configure, the statistics its sessions add
// up to, and `run_client`, the process: --clients sessions (client.cpp), or an --admin request or --grab
// (admin.cpp), each bounded by --timeout.
#include "samples.hpp"

#include "common/device_watch.hpp"

#include <coverbs/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memory_pool {

/// What --connect and its options configure.
struct client_config {
  std::string host;
  std::uint16_t port = 0;
  int clients = 2;
  std::size_t ops = 16;
  std::size_t size = 4096;  ///< bytes per operation
  bool after_compaction = false;
  std::string admin;  ///< "", "compact", "status" or "shutdown"
  std::uint32_t waiting = 0;
  std::uint32_t grab = 0;  ///< --grab N: fresh tenant ids to ask keys for on one connection
  unsigned timeout = 80;   ///< seconds the whole process may take
  bool json = false;
};

/// Everything a client session's statistics add up to (summed over sessions).
struct client_stats {
  std::uint64_t sessions = 0, sessions_ok = 0, connections = 0, reconnects = 0;
  std::uint64_t ops_verified = 0, verify_failures = 0, bytes_written = 0, bytes_read = 0, control_bytes = 0;
  std::uint64_t expected_errors = 0, expected_errors_seen = 0;
  std::uint64_t recovered = 0, fresh_keys = 0, data_intact = 0, moved = 0;
  samples connect_us, registration_us, keys_us, recover_us, phase1_us, phase2_us;
  std::vector<std::string> unexpected;
  bool told_waiting = false;         ///< the note that the sessions wait for a compaction is out
  coverbs::error_code last_connect;  ///< the last connect try's error (see timeout_reason)
  /// Where open_link registers each connection's device: a port going down then fails the sessions on it at
  /// once, as errc::port_error. None for --admin and --grab (one connection, bounded by --timeout).
  example::device_watch* watch = nullptr;
};

/// Runs what `config` asks for until it is done or --timeout has passed, then prints the statistics (the
/// sessions') or the reply (an admin request's, --grab's). @returns the exit status: 0 when every step held.
int run_client(const client_config& config);

}  // namespace memory_pool
