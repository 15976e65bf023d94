#pragma once
// Private to lib/prometheus/: what the exporter's destructor does around civetweb's mg_stop, which by itself
// (civetweb 1.15, Debian's) is slow and leaves connections open. Measured (prometheus_exporter_test): the
// master thread waits in poll(2) on the listening socket for up to 2 s before it sees the stop flag (the
// destructor took 1.9 s with or without scrapers connected), and a connection it accepted that no worker
// thread had taken yet is never closed (its scraper waits for ever, the process keeps the descriptor).

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace coverbs::metrics::detail {

/// The server's sockets, found by their names among this process's descriptors (/proc/self/fd).
class server_sockets {
public:
  /// Shuts down the TCP socket listening on `address`:`port` (a numeric IPv4 or IPv6 address, as the
  /// server was given it; the wildcard too): it accepts no more connections, and the master thread's poll(2)
  /// on it returns at once. Then shuts down every connection accepted on it that is still open (its scraper
  /// reads end of file, a worker thread waiting on it wakes at once) and records it (descriptor, device and
  /// inode). Finds nothing, quietly, when /proc/self/fd cannot be read or the address
  /// does not parse: the server then stops as slowly as before. Call before the server stops.
  server_sockets(const std::string& address, std::uint16_t port) noexcept;

  /// Closes each recorded connection whose descriptor still holds the same socket (device and inode): one
  /// the server left open. Call once the server has stopped (its threads joined): a socket it closed, and
  /// a descriptor reused since for another socket, are left alone. Returns how many it closed.
  std::size_t close_left_open() noexcept;

  /// Whether the listening socket was found (and shut down).
  bool found_listener() const noexcept { return found_listener_; }

private:
  struct accepted {
    int fd;
    dev_t dev;
    ino_t ino;
  };
  std::vector<accepted> accepted_;
  bool found_listener_ = false;
};

}  // namespace coverbs::metrics::detail
