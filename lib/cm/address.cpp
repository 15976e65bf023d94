// Socket addresses for rdma_cm: numeric hosts and decimal ports in, "host:port" text out.

#include "cm/address.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>

#include <charconv>

namespace coverbs::detail {

error_code parse_port(std::string_view s, std::uint16_t& port, bool allow_zero) {
  if (s.empty() || s.size() > 5) return errc::invalid_port_number;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return errc::invalid_port_number;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > 65535 || (v == 0 && !allow_zero)) return errc::invalid_port_number;
  port = static_cast<std::uint16_t>(v);
  return {};
}

error_code parse_endpoint(std::string_view host, std::uint16_t port, sockaddr_storage& out) {
  std::string h(host);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::string scope;
  if (const auto at = h.find('%'); at != std::string::npos) {
    scope = h.substr(at + 1);
    h.resize(at);
  }
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (scope.empty() && ::inet_pton(AF_INET, h.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return {};
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (::inet_pton(AF_INET6, h.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    if (!scope.empty()) {  // an interface name, or its index
      unsigned index = ::if_nametoindex(scope.c_str());
      if (index == 0 &&
          std::from_chars(scope.data(), scope.data() + scope.size(), index).ptr != scope.data() + scope.size())
        index = 0;
      if (index == 0) return errc::invalid_address;
      v6->sin6_scope_id = index;
    }
    // rdma_bind_addr / rdma_resolve_addr answer a bare EINVAL for a link-local address without one.
    if (IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr) && v6->sin6_scope_id == 0) return errc::link_local_needs_scope;
    return {};
  }
  return errc::invalid_address;
}

error_code parse_active_endpoints(std::string_view host, std::string_view port, std::string_view source,
                                  sockaddr_storage& dst, sockaddr_storage& src) {
  std::uint16_t port_number = 0;
  error_code ec = parse_port(port, port_number, false);
  if (!ec) ec = parse_endpoint(host, port_number, dst);
  if (!ec && !source.empty()) ec = parse_endpoint(source, 0, src);
  return ec;
}

bool loopback_or_wildcard(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const std::uint32_t v4 = ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr);
    return v4 == INADDR_ANY || (v4 >> 24) == 127;
  }
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&v6))
    return v6.s6_addr[12] == 127 || (v6.s6_addr[12] | v6.s6_addr[13] | v6.s6_addr[14] | v6.s6_addr[15]) == 0;
  return IN6_IS_ADDR_LOOPBACK(&v6) || IN6_IS_ADDR_UNSPECIFIED(&v6);
}

std::string endpoint_string(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (!sa) return {};
  if (sa->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return {};
}

}  // namespace coverbs::detail
