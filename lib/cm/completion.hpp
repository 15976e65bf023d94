#pragma once
// Private to lib/: how the rdma_cm operations end. A handler runs on its associated executor, posted or
// dispatched (`deliver`); an accept or connect completes once with a connection, an empty one bound to its
// peer executor on failure (`connection_completion`); per-operation cancellation reaches the operation through
// a weak pointer (`install_cancellation`); an exception caught on the way becomes the operation's error
// (`current_error`).

#include <coverbs/connection.hpp>
#include <coverbs/detail/cm_access.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <utility>

namespace coverbs::detail {

/// Runs `h(args...)` on its associated executor: posted (from an initiating function or a cancellation,
/// never inline) or dispatched (from the loop). (Asio 1.81's append() re-wraps an any_completion_handler
/// endlessly, hence the explicit binding.)
/// The cancellation slot is cleared there too, on the handler's executor (the thread that may emit its
/// signal), not on the thread completing the operation.
template <class Handler, class... Args>
void deliver(Handler h, const boost::asio::any_io_executor& io_ex, bool post, Args... args) {
  namespace asio = boost::asio;
  auto handler_ex = asio::get_associated_executor(h, io_ex);
  auto f = asio::bind_executor(std::move(handler_ex), [h = std::move(h), ... args = std::move(args)]() mutable {
    if (auto slot = h.get_cancellation_slot(); slot.is_connected()) slot.clear();
    std::move(h)(std::move(args)...);
  });
  if (post)
    asio::post(io_ex, std::move(f));
  else
    asio::dispatch(io_ex, std::move(f));
}

/// The handler of an accept or a connect, and where it completes.
struct connection_completion {
  connection_handler handler;
  /// Handlers without an associated executor complete here: the listener's (accept) or the one given to
  /// async_connect.
  boost::asio::any_io_executor io_ex;
  /// Where the connection is (to be) bound: async_connect's executor, or the accept's peer executor (an
  /// accept's connection made for another accept of the same pool is on that one's: the handshake's `peer`);
  /// a failure's empty connection is bound here.
  boost::asio::any_io_executor peer;

  /// Completes (once), on the handler's associated executor, else `io_ex`. A failure's empty connection is
  /// bound to `peer`, the executor the connection would have had.
  void complete(error_code ec, connection c, bool post);
};

/// Installed in the handler's cancellation slot of operation `Op`: calls `Op::cancel(weak)` for a terminal,
/// partial or total cancellation, on the thread that emits it.
template <class Op>
struct op_cancellation {
  std::weak_ptr<Op> op;
  void operator()(boost::asio::cancellation_type type) const {
    using boost::asio::cancellation_type;
    if ((type & (cancellation_type::terminal | cancellation_type::partial | cancellation_type::total)) ==
        cancellation_type::none)
      return;
    Op::cancel(std::weak_ptr<Op>(op));  // a copy: completing clears the slot, destroying *this
  }
};

/// Connects `op`'s handler's cancellation slot, if it has one, to `Op::cancel`.
template <class Op>
void install_cancellation(const std::shared_ptr<Op>& op) {
  if (auto slot = op->handler.get_cancellation_slot(); slot.is_connected())
    slot.template emplace<op_cancellation<Op>>(op_cancellation<Op>{op});
}

/// The error of the exception being handled: a system_error's code, ENOMEM for bad_alloc, else
/// `errc::unspecified_verbs_failure`. Call inside a catch block only.
error_code current_error() noexcept;

}  // namespace coverbs::detail
