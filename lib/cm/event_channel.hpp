#pragma once
// Private to lib/: an rdma_cm event channel (rdma_create_event_channel(3)) whose fd, made O_NONBLOCK, an
// executor waits on as an Asio descriptor. Every listener and every connection owns one.

#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <optional>

struct rdma_event_channel;

namespace coverbs::detail {

/// A new rdma_cm event channel with its fd made O_NONBLOCK. @throws system_error (naming the cause: no file
/// descriptor left, no RDMA device on the host, the rdma_ucm kernel module not loaded)
rdma_event_channel* new_event_channel();

/// An rdma_cm event channel whose fd (O_NONBLOCK) an executor waits on.
struct cm_channel {
  rdma_event_channel* channel = nullptr;
  /// Waited on while events are expected; destroyed by `release_fd` at close or when the io_context shuts
  /// down (see core/io_owner.hpp), never later.
  std::optional<boost::asio::posix::stream_descriptor> fd;

  explicit cm_channel(const boost::asio::any_io_executor& ex) : cm_channel(ex, new_event_channel(), true) {}
  /// Takes over `raw` (from new_event_channel). When this throws, `raw` is destroyed only if `own_on_failure`.
  cm_channel(const boost::asio::any_io_executor& ex, rdma_event_channel* raw, bool own_on_failure);
  ~cm_channel();
  /// Stops waiting and destroys the descriptor object (the channel keeps its fd).
  void release_fd() noexcept;
  cm_channel(const cm_channel&) = delete;
  cm_channel& operator=(const cm_channel&) = delete;
};

}  // namespace coverbs::detail
