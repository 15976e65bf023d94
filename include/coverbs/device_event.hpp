#pragma once
/// @file
/// `device_event`: one asynchronous event of a device, as `device_events::async_wait_event` reports it.

#include <coverbs/config.hpp>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace coverbs {

/// One asynchronous event of a device (a copy of `ibv_async_event`, taken before it was acknowledged).
struct device_event {
  ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
  /// Port events (port_event()): the port, 1 .. phys_port_cnt. 0 otherwise.
  std::uint8_t port = 0;
  /// Queue-pair events (qp_event()): the queue pair's number (`queue_pair::qp_num()`). 0 otherwise.
  std::uint32_t qp_num = 0;
  /// Which object, for comparison with `native_handle()` only: it may be destroyed by the time the event
  /// is read. Null unless the event is about that kind of object.
  ibv_qp* qp = nullptr;
  ibv_cq* cq = nullptr;
  ibv_srq* srq = nullptr;
  /// coverbs queue pairs the runtime moved to the error state because of this event.
  std::size_t queue_pairs_failed = 0;

  /// The verbs name, e.g. "port error" (ibv_event_type_str(3)).
  const char* name() const noexcept { return name_of(type); }
  bool port_event() const noexcept;
  bool qp_event() const noexcept;
  bool cq_event() const noexcept { return type == IBV_EVENT_CQ_ERR; }
  bool srq_event() const noexcept { return type == IBV_EVENT_SRQ_ERR || type == IBV_EVENT_SRQ_LIMIT_REACHED; }

  /// ibv_event_type_str(3) of any value ("unknown" for values verbs does not know).
  static const char* name_of(ibv_event_type type) noexcept;
};

}  // namespace coverbs
