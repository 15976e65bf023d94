#pragma once
// The memory pool's admin roles, each on a connection of its own: an --admin request (compact, status,
// shutdown) and --grab N, which asks keys for N fresh tenant ids on one connection.
#include "client.hpp"

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <random>
#include <string>

namespace memory_pool {

/// Prints why the admin request failed: one JSON line on stdout with --json, else a line on stderr.
void print_admin_failure(const client_config& c, const std::string& why);

/// An admin request on a connection of its own; prints the reply. @returns true when the server agreed.
boost::asio::awaitable<bool> admin(const client_config& c, client_stats& st);

/// A tenant id no one else picks: 64 random bits, never 0.
std::uint64_t fresh_tenant_id(std::random_device& seed);

/// --grab N: one connection asks keys for N fresh tenant ids, one after another, and prints how many the
/// server granted and why it refused the rest (one line; JSON with --json); then it holds them, waiting for
/// a compaction, until one comes or the connection ends. Sets `ok` once the line is out (so a process
/// stopped while holding knows) when every refusal was the server's per-connection limit.
boost::asio::awaitable<void> grab(const client_config& c, client_stats& st, bool& ok);

}  // namespace memory_pool
