// The rdma_cm event channel: creation (with the cause of a failure spelled out) and the descriptor an executor
// waits on.

#include "cm/event_channel.hpp"

#include <coverbs/device.hpp>

#include <rdma/rdma_cma.h>

#include <fcntl.h>
#include <sys/resource.h>

#include <cerrno>
#include <string>

namespace coverbs::detail {

rdma_event_channel* new_event_channel() {
  rdma_event_channel* channel = rdma_create_event_channel();
  if (!channel) {
    const error_code cause = verbs_null_result(channel);
    // Out of file descriptors: say so first. Listing the devices would fail the same way and call it
    // "no RDMA device", hiding the cause.
    if (cause == boost::system::errc::too_many_files_open ||
        cause == boost::system::errc::too_many_files_open_in_system) {
      rlimit limit{};
      const std::string soft = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                                   ? std::to_string(limit.rlim_cur)
                                   : std::string("?");
      throw system_error(cause, "rdma_create_event_channel: no file descriptor left (RLIMIT_NOFILE soft limit " + soft +
                                    "); every connection and listener holds one or two: raise the limit "
                                    "(ulimit -n, or setrlimit(RLIMIT_NOFILE) up to the hard limit)");
    }
    // No RDMA at all on this host: say so the way device::open does (it points to the guest).
    error_code devices;
    (void)list_devices(devices);
    if (devices == errc::no_device)
      throw system_error(devices, "rdma_create_event_channel failed (" + cause.message() + ")");
    throw system_error(cause, "rdma_create_event_channel (is the rdma_ucm kernel module loaded?)");
  }
  const int flags = ::fcntl(channel->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    const error_code ec = errno_code(errno);
    rdma_destroy_event_channel(channel);
    throw system_error(ec, "fcntl(O_NONBLOCK) on the rdma_cm event channel");
  }
  return channel;
}

cm_channel::cm_channel(const boost::asio::any_io_executor& ex, rdma_event_channel* raw, bool own_on_failure)
    : fd(std::in_place, ex) {
  try {
    fd->assign(raw->fd);
  } catch (...) {
    if (own_on_failure) rdma_destroy_event_channel(raw);
    throw;
  }
  channel = raw;
}

cm_channel::~cm_channel() {
  release_fd();
  rdma_destroy_event_channel(channel);
}

void cm_channel::release_fd() noexcept {
  if (!fd) return;
  error_code ignored;
  fd->cancel(ignored);
  fd->release();
  fd.reset();
}

}  // namespace coverbs::detail
