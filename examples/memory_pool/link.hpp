#pragma once
// `link`: a client's session with the server and its registered data blocks, and the steps every client role
// takes on it: open (connect, register), a call (a request and its reply), close.
#include "client.hpp"
#include "protocol.hpp"

#include "common/prelude.hpp"

#include <coverbs/coverbs.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <vector>

namespace memory_pool {

namespace asio = boost::asio;
using asio::awaitable;
using example::tuple;

/// A session plus the client's data blocks in its protection domain, [out: size bytes | in: size bytes]. The
/// region goes before the session.
struct link {
  cv::session s;
  std::vector<std::byte> memory;
  cv::memory_region mr;
  std::size_t size = 0;

  cv::registered_span out() const { return cv::span_of(mr, 0, size); }
  cv::registered_span in_data() const { return cv::span_of(mr, size, size); }
};

/// Thrown for whatever ends a session early; `what()` says which step.
struct step_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Connects to the server (a refused connect is tried again for up to 10 s, at most half of --timeout) and
/// registers the link's blocks. @throws step_failed naming the step.
awaitable<std::unique_ptr<link>> open_link(const client_config& c, client_stats& st);

/// Deregisters the blocks and closes the session (coverbs::session::async_close).
awaitable<void> close_link(link& l);

/// Calls with `request` and returns the reply, granted or refused. @throws step_failed on a failed call (the
/// session's error) or a malformed reply.
awaitable<message> exchange(link& l, message request, client_stats& st);

/// As `exchange`. @throws step_failed also on a refusal.
awaitable<message> call(link& l, message request, client_stats& st);

}  // namespace memory_pool
