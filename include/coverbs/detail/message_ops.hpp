#pragma once
// The operations of a message endpoint (message_endpoint.hpp): a type-erased base the library queues and
// completes, and the templated operation that owns the handler, its work guard, its cancellation slot and
// the caller's buffers (copied into a registered send slot when the message is posted).

#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/error.hpp>
#include <coverbs/inbound_message.hpp>
#include <coverbs/inbound_request.hpp>
#include <coverbs/message_header.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/recycling_allocator.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace coverbs::detail {

class endpoint_impl;

enum class message_op_kind : std::uint8_t { call, send, receive_request, receive_message };

/// What the endpoint keeps of an operation: the queue links, what to send, and two virtual calls.
struct message_op {
  message_op* prev = nullptr;  // links of the list the operation waits in
  message_op* next = nullptr;
  endpoint_impl* owner = nullptr;  // set while the endpoint holds the operation
  message_op_kind kind = message_op_kind::send;
  message_type type = message_type::data;
  std::uint64_t correlation_id = 0;  // a reply's (the request's id); a call's once sent
  std::size_t length = 0;            // payload bytes to send
  std::uint32_t call_index = std::numeric_limits<std::uint32_t>::max();  // a sent call's entry

  /// Copies the caller's bytes (`length` of them) to `dst`.
  virtual void copy_payload(std::byte* dst) const noexcept = 0;
  /// Frees the operation and completes its handler. `io_ex` is the endpoint's executor. `in_place`: the
  /// caller runs as a handler of `io_ex` (a completion of the endpoint's queue pair, never an initiating
  /// function), so a handler whose executor is `io_ex` (a plain callback, a coroutine on the endpoint's loop)
  /// is called directly, as Asio's own I/O operations call theirs (an exception it throws leaves the loop's
  /// `run()`), and one with an executor of its own is dispatched there; else the handler is posted.
  virtual void complete(error_code ec, inbound_message m, std::uint64_t id, const boost::asio::any_io_executor& io_ex,
                        bool in_place) noexcept = 0;
  /// Frees the operation without running its handler (the execution context is shutting down).
  virtual void destroy() noexcept = 0;

protected:
  ~message_op() = default;
};

/// Hands `op` to the endpoint (null: a closed or moved-from endpoint, which completes it with
/// errc::endpoint_closed, posted on `io_ex`, the endpoint's executor).
void start_message_op(endpoint_impl* impl, message_op* op, const boost::asio::any_io_executor& io_ex) noexcept;
/// Per-operation cancellation: abandons `op` if the endpoint still holds it.
void cancel_message_op(message_op* op) noexcept;

/// The completion signature of an operation whose handler receives `Result` after the error code.
template <class Result>
struct message_signature {
  using type = void(error_code, Result);
};
template <>
struct message_signature<void> {
  using type = void(error_code);
};

/// The handler's result besides the error code: nothing (sends, replies), the message, or the request.
template <class Result, class Executor, class Handler, class Buffers>
class message_op_impl final : public message_op {
public:
  using work_executor = std::decay_t<decltype(boost::asio::prefer(
      std::declval<boost::asio::associated_executor_t<Handler, Executor>>(),
      boost::asio::execution::outstanding_work.tracked))>;

  /// Makes the operation in memory from the handler's associated allocator (Asio's recycling allocator by
  /// default, so the steady state does not allocate).
  static message_op_impl* create(Handler&& h, const Executor& ex, const Buffers& buffers) {
    allocator_type alloc(boost::asio::get_associated_allocator(h, boost::asio::recycling_allocator<void>()));
    message_op_impl* op = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    try {
      return ::new (static_cast<void*>(op)) message_op_impl(std::move(h), ex, buffers);
    } catch (...) {
      std::allocator_traits<allocator_type>::deallocate(alloc, op, 1);
      throw;
    }
  }

  /// Outstanding work, as for the queue pair's operations (wr_op.hpp): a handler whose executor is the
  /// endpoint's (`ex`) needs none of its own — the endpoint's posted receives keep its loop busy while it holds
  /// an operation, and an operation it does not hold is being posted — so only a handler with an executor of
  /// its own (a strand, another loop, `use_future`'s) keeps that one busy until it runs.
  message_op_impl(Handler&& h, const Executor& ex, const Buffers& buffers) : handler_(std::move(h)), buffers_(buffers) {
    if constexpr (has_associated_executor_v<Handler>) {
      decltype(auto) hex = boost::asio::get_associated_executor(handler_, ex);
      bool own = true;
      if constexpr (std::is_same_v<std::decay_t<decltype(hex)>, Executor>) own = !same_executor(hex, ex);
      if (own) work_.emplace(boost::asio::prefer(hex, boost::asio::execution::outstanding_work.tracked));
    }
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) slot.template emplace<canceller>(this);
  }

  void copy_payload(std::byte* dst) const noexcept override {
    boost::asio::buffer_copy(boost::asio::buffer(dst, length), buffers_);
  }

  void complete(error_code ec, inbound_message m, std::uint64_t id, const boost::asio::any_io_executor& io_ex,
                bool in_place) noexcept override {
    clear_slot();
    allocator_type alloc = get_allocator();
    auto fn = [h = std::move(handler_), ec, m = std::move(m), id]() mutable {
      (void)id;  // a request's only
      if constexpr (std::is_void_v<Result>)
        std::move(h)(ec);
      else if constexpr (std::is_same_v<Result, inbound_request>)
        std::move(h)(ec, inbound_request(std::move(m), id));
      else
        std::move(h)(ec, std::move(m));
    };
    if constexpr (has_associated_executor_v<Handler>) {
      if (work_) {
        work_executor w = std::move(*work_);
        free(alloc);  // before the upcall: the handler may start the next operation
        if (in_place)
          boost::asio::dispatch(w, std::move(fn));
        else
          boost::asio::post(w, std::move(fn));
        return;
      }
    }
    free(alloc);
    if (!in_place) return (void)boost::asio::post(io_ex, std::move(fn));
    // As the io_context's own dispatch would: an exception the handler throws leaves the loop's run().
    try {
      fn();
    } catch (...) {
      boost::asio::post(io_ex, [e = std::current_exception()] { std::rethrow_exception(e); });
    }
  }

  void destroy() noexcept override {
    clear_slot();
    free(get_allocator());
  }

private:
  using allocator_type = typename std::allocator_traits<
      boost::asio::associated_allocator_t<Handler, boost::asio::recycling_allocator<void>>>::template rebind_alloc<message_op_impl>;

  allocator_type get_allocator() const noexcept {
    return allocator_type(boost::asio::get_associated_allocator(handler_, boost::asio::recycling_allocator<void>()));
  }
  void free(allocator_type alloc) noexcept {
    this->~message_op_impl();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  struct canceller {
    message_op* op;
    void operator()(boost::asio::cancellation_type type) const {
      if (type != boost::asio::cancellation_type::none) cancel_message_op(op);
    }
  };

  void clear_slot() noexcept {
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) slot.clear();
  }

  struct no_work {};
  Handler handler_;
  [[no_unique_address]] std::conditional_t<has_associated_executor_v<Handler>, std::optional<work_executor>, no_work>
      work_;
  Buffers buffers_;
};

}  // namespace coverbs::detail
