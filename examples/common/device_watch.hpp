#pragma once
// `device_watch`: the asynchronous events of the devices an example uses, read for as long as it runs, so a
// port going down fails that port's queue pairs at once (errc::port_error) and says so on stderr.
#include "common/prelude.hpp"

#include <coverbs/device.hpp>
#include <coverbs/device_events.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace example {

/// The asynchronous events (coverbs::device_events) of the devices this program's listener and connections
/// use, read for as long as the watch exists. With it, a port going down moves every queue pair of this
/// process on that port to the error state at once: their operations flush and `queue_pair::error()` says
/// `errc::port_error` (see `cause`). Without a reader nothing does: a posted receive waits forever, and a
/// send fails only after the transport's retries, as a local error that does not name the port. Each port
/// and fatal event is printed once on stderr, as "`who`: rxe0 port 1 went down (port error) ...".
/// @par Lifetime Destroy it (or `close()` it) before its io_context: a pending read keeps the loop busy.
/// @par Thread Safety Use from its executor.
class device_watch {
public:
  device_watch(asio::any_io_executor ex, std::string who) : ex_(std::move(ex)), who_(std::move(who)) {}
  device_watch(const device_watch&) = delete;
  device_watch& operator=(const device_watch&) = delete;
  ~device_watch() { close(); }

  /// Reads the events of `dev`'s context from now on; once per context (rdma_cm's contexts are shared by
  /// every connection of a process to one device, and a context has one reader), later calls do nothing.
  /// @throws coverbs::system_error as device_events' constructor.
  void watch(coverbs::device& dev) {
    ibv_context* const context = dev.native_handle();
    if (closed_ || !context || readers_.count(context)) return;
    auto r = std::make_shared<reader>(ex_, context, who_);
    readers_.emplace(context, r);
    wait_next(r);
  }

  /// IBV_EVENT_PORT_ERR events seen so far.
  std::size_t ports_down() const noexcept {
    std::size_t n = 0;
    for (const auto& [context, r] : readers_)
      n += r->ports_down;
    return n;
  }

  /// Stops reading (pending reads end with operation_aborted). Idempotent.
  void close() noexcept {
    closed_ = true;
    readers_.clear();
  }

private:
  struct reader {
    reader(const asio::any_io_executor& ex, ibv_context* context, const std::string& w)
        : view(coverbs::device::adopt(context)), events(ex, view), who(w) {}
    coverbs::device view;  // adopted: rdma_cm keeps its contexts open for the life of the process
    coverbs::device_events events;
    std::string who;
    std::size_t ports_down = 0;
  };

  static void wait_next(const std::shared_ptr<reader>& r) {
    r->events.async_wait_event([weak = std::weak_ptr<reader>(r)](error_code ec, coverbs::device_event e) {
      const std::shared_ptr<reader> r = weak.lock();
      if (ec || !r) return;  // closed
      report(*r, e);
      wait_next(r);
    });
  }

  static void report(reader& r, const coverbs::device_event& e) {
    const std::string where = r.view.name() + (e.port_event() ? " port " + std::to_string(e.port) : std::string());
    if (e.type == IBV_EVENT_PORT_ERR) {
      ++r.ports_down;
      std::fprintf(stderr,
                   "%s: %s went down (%s): %zu queue pair(s) of this process moved to the error state "
                   "(errc::port_error), their operations flushed\n",
                   r.who.c_str(), where.c_str(), e.name(), e.queue_pairs_failed);
    } else if (e.type == IBV_EVENT_PORT_ACTIVE) {
      std::fprintf(stderr, "%s: %s is active again (%s)\n", r.who.c_str(), where.c_str(), e.name());
    } else if (e.type == IBV_EVENT_DEVICE_FATAL) {
      std::fprintf(stderr, "%s: %s: %s: every queue pair on it moved to the error state\n", r.who.c_str(),
                   where.c_str(), e.name());
    }
  }

  asio::any_io_executor ex_;
  std::string who_;
  std::map<ibv_context*, std::shared_ptr<reader>> readers_;
  bool closed_ = false;
};

}  // namespace example
