// The exporter's server sockets around civetweb's mg_stop (server_sockets.hpp).
#include "server_sockets.hpp"

#include <arpa/inet.h>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coverbs::metrics::detail {
namespace {

/// This process's open descriptors (from /proc/self/fd); empty when it cannot be read.
std::vector<int> open_descriptors() noexcept {
  std::vector<int> fds;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return fds;
  const int own = ::dirfd(d);
  try {
    while (const dirent* e = ::readdir(d)) {
      char* end = nullptr;
      const long fd = std::strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0' && fd != own) fds.push_back(static_cast<int>(fd));
    }
  } catch (...) {  // out of memory: the descriptors found so far
  }
  ::closedir(d);
  return fds;
}

int socket_option(int fd, int name) noexcept {
  int v = -1;
  socklen_t len = sizeof v;
  return ::getsockopt(fd, SOL_SOCKET, name, &v, &len) == 0 ? v : -1;
}

/// `address`:`port` as a socket address; family AF_UNSPEC when `address` is not a numeric IPv4 or IPv6 address.
sockaddr_storage socket_address(const std::string& address, std::uint16_t port) noexcept {
  sockaddr_storage s{};
  s.ss_family = AF_UNSPEC;
  auto& v4 = reinterpret_cast<sockaddr_in&>(s);
  auto& v6 = reinterpret_cast<sockaddr_in6&>(s);
  if (::inet_pton(AF_INET, address.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
  }
  return s;
}

/// Whether `fd` is a TCP socket bound to `want`: the same family and port, and the same address unless
/// `want`'s is the wildcard (a connection accepted on a wildcard listener is bound to the address it came to).
bool bound_to(int fd, const sockaddr_storage& want) noexcept {
  sockaddr_storage got{};
  socklen_t len = sizeof got;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len) != 0) return false;  // not a socket
  if (got.ss_family != want.ss_family || socket_option(fd, SO_TYPE) != SOCK_STREAM ||
      socket_option(fd, SO_PROTOCOL) != IPPROTO_TCP)
    return false;
  if (want.ss_family == AF_INET) {
    const auto& g = reinterpret_cast<const sockaddr_in&>(got);
    const auto& w = reinterpret_cast<const sockaddr_in&>(want);
    return g.sin_port == w.sin_port &&
           (w.sin_addr.s_addr == htonl(INADDR_ANY) || g.sin_addr.s_addr == w.sin_addr.s_addr);
  }
  const auto& g = reinterpret_cast<const sockaddr_in6&>(got);
  const auto& w = reinterpret_cast<const sockaddr_in6&>(want);
  return g.sin6_port == w.sin6_port &&
         (IN6_IS_ADDR_UNSPECIFIED(&w.sin6_addr) || std::memcmp(&g.sin6_addr, &w.sin6_addr, sizeof w.sin6_addr) == 0);
}

}  // namespace

server_sockets::server_sockets(const std::string& address, std::uint16_t port) noexcept {
  const sockaddr_storage name = socket_address(address, port);
  if (name.ss_family == AF_UNSPEC || port == 0) return;
  // The listener first: once it is shut down no connection joins those recorded below (but one whose
  // accept(2) is under way at this instant).
  const std::vector<int> fds = open_descriptors();
  for (const int fd : fds)
    if (socket_option(fd, SO_ACCEPTCONN) == 1 && bound_to(fd, name)) {
      ::shutdown(fd, SHUT_RDWR);  // a listener: it stops listening; its descriptor stays the server's
      found_listener_ = true;
    }
  if (!found_listener_) return;
  for (const int fd : open_descriptors()) {
    // A worker may close `fd` meanwhile and the number be reused: what is checked and shut down is the
    // socket the duplicate holds, whatever happens to `fd`.
    const int held = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (held < 0) continue;
    struct stat st {};
    if (socket_option(held, SO_ACCEPTCONN) == 0 && bound_to(held, name) && ::fstat(held, &st) == 0) {
      ::shutdown(held, SHUT_RDWR);  // the scraper reads end of file; a worker waiting on it wakes at once
      try {
        accepted_.push_back({fd, st.st_dev, st.st_ino});
      } catch (...) {  // out of memory: shut down, but left for the server to close
      }
    }
    ::close(held);
  }
}

std::size_t server_sockets::close_left_open() noexcept {
  std::size_t closed = 0;
  for (const accepted& a : accepted_) {
    struct stat st {};
    if (::fstat(a.fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == a.dev && st.st_ino == a.ino) {
      ::close(a.fd);
      ++closed;
    }
  }
  accepted_.clear();
  return closed;
}

}  // namespace coverbs::metrics::detail
