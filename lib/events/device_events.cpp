#include <coverbs/device.hpp>
#include <coverbs/device_events.hpp>

#include "core/io_owner.hpp"
#include "core/readiness.hpp"
#include "events/qp_registry.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <optional>

#include <fcntl.h>

#include <cerrno>

#include <cstdio>
#include <utility>

namespace coverbs {

namespace detail {

// --- device_events_impl ---

class device_events_impl final : public std::enable_shared_from_this<device_events_impl>, public io_owner {
public:
  device_events_impl(const boost::asio::any_io_executor& ex, ibv_context* context, const device_events_options& o)
      : executor_(ex), context_(context), fd_(std::in_place, ex), limit_(o.queue_limit) {}

  ~device_events_impl() { close(); }

  void open(event_channel& channel) {
    channel_ = &channel;
    if (limit_ == 0)
      throw system_error(errno_code(EINVAL), "device_events: queue_limit must be at least 1");
    if (!claim_async_events(context_))
      throw system_error(make_error_code(errc::device_events_busy),
                         "device_events(" + std::string(ibv_get_device_name(context_->device)) + ")");
    claimed_ = true;
    const int fd = context_->async_fd;
    saved_flags_ = ::fcntl(fd, F_GETFL);
    if (saved_flags_ < 0 || ::fcntl(fd, F_SETFL, saved_flags_ | O_NONBLOCK) < 0) {
      const error_code ec = errno_code(errno);
      release_async_events(context_);
      claimed_ = false;
      throw system_error(ec, "fcntl(O_NONBLOCK) on the device's async fd");
    }
    fd_->assign(fd);
    open_ = true;
    enroll(boost::asio::query(executor_, boost::asio::execution::context));
  }

  /// The io_context is shutting down: stop reading and destroy the descriptor object while its service
  /// still exists (this state may be released later, from inside Asio's service destruction).
  void on_context_shutdown() noexcept override { close(); }

  /// Called once the object is fully owned by a shared_ptr.
  void start() { wait(); }

  /// The reader's wait on the device's async fd, while open (outstanding_work.hpp).
  void describe_work(std::vector<work_holder>& out) const override {
    if (!open_) return;
    out.push_back({"device_events", std::string("device_events of ") + ibv_get_device_name(context_->device), 0,
                   "reading the device's async events (" + std::to_string(received_) + " received so far); it waits "
                   "until the device_events object is destroyed or closed"});
  }

  /// From the owner (the device is still open): stop reading, restore the fd, abort pending waits.
  void close() noexcept {
    if (open_) {
      open_ = false;
      error_code ignored;
      fd_->cancel(ignored);
      fd_->release();  // the context owns the fd
      if (saved_flags_ >= 0 && !(saved_flags_ & O_NONBLOCK)) ::fcntl(context_->async_fd, F_SETFL, saved_flags_);
    }
    if (claimed_) {
      claimed_ = false;
      release_async_events(context_);
    }
    channel_ = nullptr;  // the owner closes and destroys it
    fd_.reset();         // no Asio object outlives the close (see io_owner.hpp)
  }

  bool is_open() const noexcept { return open_; }

  boost::asio::any_io_executor executor_;
  ibv_context* context_;
  std::optional<boost::asio::posix::stream_descriptor> fd_;
  event_channel* channel_ = nullptr;  // the owner's; null once closed
  std::size_t limit_;
  std::uint64_t dropped_ = 0, received_ = 0;

private:
  void wait() {
    if (!fd_) return;
    fd_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                   [self = shared_from_this()](const error_code& ec) { self->on_readable(detail::readiness_result(ec)); });
  }

  void on_readable(const error_code& ec) {
    if (!open_ || ec) return;
    ibv_async_event raw;
    for (;;) {
      if (ibv_get_async_event(context_, &raw) != 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) break;
        // The fd stays readable and every read fails (e.g. the device was disassociated after a fatal
        // error): waiting again would spin. Stop reading; queued events stay readable.
        std::fprintf(stderr, "coverbs: ibv_get_async_event(%s) failed (%s); no more device events are read\n",
                     ibv_get_device_name(context_->device), errno_code(err).message().c_str());
        return;
      }
      device_event e = copy(raw);
      ibv_ack_async_event(&raw);
      ++received_;
      act(e);
      deliver(e);
      if (!open_) return;
    }
    wait();
  }

  static device_event copy(const ibv_async_event& raw) noexcept {
    device_event e;
    e.type = raw.event_type;
    switch (raw.event_type) {
    case IBV_EVENT_CQ_ERR: e.cq = raw.element.cq; break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: e.srq = raw.element.srq; break;
    case IBV_EVENT_DEVICE_FATAL: break;
    case IBV_EVENT_WQ_FATAL: break;
    default:
      if (e.port_event())
        e.port = static_cast<std::uint8_t>(raw.element.port_num);
      else if (e.qp_event() && raw.element.qp) {
        e.qp = raw.element.qp;
        e.qp_num = raw.element.qp->qp_num;
      }
    }
    return e;
  }

  /// What the runtime does (see the table in device_events.hpp).
  void act(device_event& e) noexcept {
    switch (e.type) {
    case IBV_EVENT_PORT_ERR: {
      const std::uint8_t port = e.port;
      e.queue_pairs_failed = fail_queue_pairs(
          context_, [port](const qp_registration& r) { return r.port == port; }, errc::port_error);
      break;
    }
    case IBV_EVENT_DEVICE_FATAL:
      e.queue_pairs_failed = fail_queue_pairs(
          context_, [](const qp_registration&) { return true; }, errc::device_fatal);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: {
      const errc cause = e.type == IBV_EVENT_QP_FATAL     ? errc::qp_fatal
                         : e.type == IBV_EVENT_QP_REQ_ERR ? errc::qp_request_error
                                                          : errc::qp_access_error;
      ibv_qp* qp = e.qp;
      e.queue_pairs_failed =
          fail_queue_pairs(context_, [qp](const qp_registration& r) { return r.qp == qp; }, cause);
      break;
    }
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = e.cq;
      e.queue_pairs_failed = fail_queue_pairs(
          context_, [cq](const qp_registration& r) { return r.send_cq == cq || r.recv_cq == cq; }, errc::cq_error);
      break;
    }
    case IBV_EVENT_SRQ_LIMIT_REACHED: notify_srq_limit(context_, e.srq); break;
    default: break;
    }
  }

  /// To the oldest waiter, or into the bounded queue (dropping the oldest when it is full).
  void deliver(const device_event& e) {
    // Waiters are served first by try_send; the buffer holds what nobody took.
    if (!channel_) return;
    if (channel_->try_send(error_code{}, e)) return;
    channel_->try_receive([](error_code, device_event) {});
    ++dropped_;
    channel_->try_send(error_code{}, e);
  }

  bool open_ = false;
  bool claimed_ = false;
  int saved_flags_ = -1;
};

}  // namespace detail

device_events::device_events(const executor_type& ex, device& dev, const device_events_options& options) {
  if (!dev) throw system_error(errno_code(EBADF), "device_events: the device is not open");
  channel_ = std::make_unique<detail::event_channel>(ex, options.queue_limit);
  impl_ = std::make_shared<detail::device_events_impl>(ex, dev.native_handle(), options);
  impl_->open(*channel_);
  impl_->start();
}

device_events::device_events(device_events&&) noexcept = default;
device_events& device_events::operator=(device_events&& other) noexcept {
  if (this != &other) {
    close();
    impl_ = std::move(other.impl_);
    channel_ = std::move(other.channel_);
  }
  return *this;
}
device_events::~device_events() { close(); }

device_events::executor_type device_events::get_executor() const noexcept { return impl_->executor_; }

detail::event_channel& device_events::checked_channel() const {
  if (!channel_) throw system_error(errno_code(EBADF), "device_events: moved-from object");
  return *channel_;
}

std::uint64_t device_events::dropped() const noexcept { return impl_ ? impl_->dropped_ : 0; }
std::uint64_t device_events::received() const noexcept { return impl_ ? impl_->received_ : 0; }
void device_events::close() noexcept {
  if (impl_) impl_->close();
  if (channel_) channel_->close();
}
bool device_events::is_open() const noexcept { return impl_ && impl_->is_open(); }

}  // namespace coverbs
