#pragma once
// `link`: a client's connection to the server with its registered memory, and the steps every client role
// takes on it: open (connect, register, await the hello), a request and its reply, close.
#include "client.hpp"
#include "protocol.hpp"
#include "receiver.hpp"

#include <coverbs/coverbs.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

namespace memory_pool {

namespace asio = boost::asio;
using asio::awaitable;

/// A connection plus the client's registered memory in its protection domain:
/// [inbox | outbox | out: size bytes | in: size bytes]. The region goes before the connection.
struct link {
  cv::connection conn;
  std::vector<std::byte> memory;
  cv::memory_region mr;
  std::optional<receiver> in;
  std::size_t size = 0;
  std::uint32_t slots = 0;  ///< the server's slots per half (from its hello)

  cv::registered_span inbox() const { return cv::span_of(mr, 0, message_bytes); }
  cv::registered_span outbox() const { return cv::span_of(mr, message_bytes, message_bytes); }
  cv::registered_span out() const { return cv::span_of(mr, 2 * message_bytes, size); }
  cv::registered_span in_data() const { return cv::span_of(mr, 2 * message_bytes + size, size); }
};

/// Thrown for whatever ends a session early; `what()` says which step.
struct step_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Connects to the server (a refused connect is tried again for up to 10 s, at most half of --timeout),
/// registers the link's memory, and waits for the server's hello. @throws step_failed naming the step.
awaitable<std::unique_ptr<link>> open_link(const client_config& c, client_stats& st);

/// Disconnects, when still connected.
awaitable<void> close_link(link& l);

/// Sends `request` and waits for the reply, granted or refused. @throws step_failed on a transport error
/// or a malformed reply.
awaitable<message> exchange(link& l, message request, client_stats& st);

/// Sends `request` and waits for the reply. @throws step_failed on a transport error or a refusal.
awaitable<message> call(link& l, message request, client_stats& st);

}  // namespace memory_pool
