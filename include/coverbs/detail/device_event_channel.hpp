#pragma once
// Internal: the channel a `device_events` object queues its events in, and their waits. Not part of the public
// API.

#include <coverbs/device_event.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/channel.hpp>

#include <deque>

namespace coverbs::detail {

class device_events_impl;

/// The channel's traits: a cancelled or closed wait completes with `operation_aborted`, as Asio's own
/// I/O objects do (instead of the channel's channel_cancelled / channel_closed).
template <class... Signatures>
struct event_channel_traits {
  template <class... NewSignatures>
  struct rebind {
    using other = event_channel_traits<NewSignatures...>;
  };
  template <class Element>
  struct container {
    using type = std::deque<Element>;
  };
  using receive_cancelled_signature = void(error_code, device_event);
  template <class F>
  static void invoke_receive_cancelled(F f) {
    static_cast<F&&>(f)(error_code(boost::asio::error::operation_aborted), device_event{});
  }
  using receive_closed_signature = void(error_code, device_event);
  template <class F>
  static void invoke_receive_closed(F f) {
    static_cast<F&&>(f)(error_code(boost::asio::error::operation_aborted), device_event{});
  }
};

using event_channel = boost::asio::experimental::basic_channel<boost::asio::any_io_executor, event_channel_traits<>,
                                                               void(error_code, device_event)>;

}  // namespace coverbs::detail
