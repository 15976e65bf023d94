#pragma once
// Private to lib/: the socket addresses rdma_cm takes and gives — parsing a numeric host and a decimal port,
// recognizing what only some devices resolve, and printing one as "a.b.c.d:port" / "[v6]:port".

#include <coverbs/error.hpp>

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace coverbs::detail {

/// A decimal port into `port`; 0 only when `allow_zero`. @return `errc::invalid_port_number` or empty
error_code parse_port(std::string_view s, std::uint16_t& port, bool allow_zero);

/// A numeric IPv4 or IPv6 address ("[v6]" too; "v6%interface" for a link-local one) and a port as a socket
/// address. @return `errc::invalid_address`, `errc::link_local_needs_scope` or empty
error_code parse_endpoint(std::string_view host, std::uint16_t port, sockaddr_storage& out);

/// An active side's addresses: `host`:`port` into `dst`, and `source` (empty: none) into `src`.
/// @return `errc::invalid_port_number`, `errc::invalid_address`, `errc::link_local_needs_scope` or empty
error_code parse_active_endpoints(std::string_view host, std::string_view port, std::string_view source,
                                  sockaddr_storage& dst, sockaddr_storage& src);

/// A loopback or wildcard address: rdma_cm reaches it only on devices that resolve it themselves (InfiniBand).
bool loopback_or_wildcard(const sockaddr_storage& a);

/// "a.b.c.d:port" or "[v6]:port"; empty for null or another family.
std::string endpoint_string(const sockaddr* sa);

}  // namespace coverbs::detail
