#pragma once
// Internal: the operation node whose address is a work request's wr_id, and the templated operation that
// owns a completion handler. Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/recycling_allocator.hpp>

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace coverbs {

/// What a receive completion reports (`ibv_wc` of an IBV_WC_RECV / IBV_WC_RECV_RDMA_WITH_IMM).
struct received {
  std::size_t bytes = 0;                          ///< bytes placed in the receive buffer
  std::optional<std::uint32_t> imm;               ///< immediate data (host byte order), if the peer sent any
  std::optional<std::uint32_t> invalidated_rkey;  ///< rkey the peer invalidated with send_with_invalidate
  bool rdma_with_imm = false;                     ///< true for the receive side of write_with_imm
};

namespace detail {

class queue_pair_impl;
class shared_receive_queue_impl;

/// How a finished work request is turned into completion arguments.
enum class result_kind : std::uint8_t {
  length,   ///< void(error_code, std::size_t): the posted length (send, write, read)
  receive,  ///< void(error_code, received)
  atomic,   ///< void(error_code, std::uint64_t): the old value, read from the local result buffer
  key,     ///< void(error_code, remote_key): wr_node::key (memory-window binds)
  none,     ///< void(error_code)
  srq_receive,  ///< void(error_code, srq_received): a receive posted on a shared receive queue
};

/// How a finished operation reaches its handler. The completion queue decides once per dispatch turn, so
/// a completion costs no executor query of its own.
enum class completion_mode : std::uint8_t {
  post,      ///< always posted: an initiating function, a queue pair's destructor, a failure before posting
  dispatch,  ///< `asio::dispatch` to the handler's executor (a turn that is not on the I/O executor's loop thread)
  invoke,    ///< the turn runs on this thread inside the I/O executor's io_context: a handler associated with that
             ///< executor is called directly, as Asio calls its own I/O operations' handlers
};

/// Where a node is in its life.
enum class node_state : std::uint8_t { waiting_credit, posted, done };

/// Base of every operation: its address is the wr_id of the (last) work request it posts.
struct wr_node {
  /// Completes the operation: frees the node, then hands `ec` and the result to the handler on its
  /// executor as `mode` says.
  using complete_fn = void (*)(wr_node*, error_code ec, const ibv_wc* wc, completion_mode mode);

  complete_fn complete = nullptr;
  queue_pair_impl* qp = nullptr;
  shared_receive_queue_impl* srq = nullptr;  // set instead of `qp` for a shared receive queue's operations
  wr_node* next = nullptr;  // credit wait queue (FIFO)
  wr_node* prev = nullptr;  // a shared receive queue's list of posted receives (with `next`)
  node_state state = node_state::waiting_credit;
  result_kind kind = result_kind::length;
  bool is_recv = false;
  bool cancelled = false;  // terminal cancellation requested while posted
  /// Work requests this operation posts (a chain: wr.send -> chain[0]). Each holds a send-queue credit
  /// and is signaled with wr_id = this node; the operation completes with its last completion, reporting
  /// the first error of the chain.
  std::uint32_t credits = 1;
  std::uint32_t pending = 0;  // completions still to come
  error_code first_error;
  union {
    ibv_send_wr send;
    ibv_recv_wr recv;
  } wr{};
  static_assert(sizeof(ibv_send_wr) >= sizeof(ibv_recv_wr));
  ibv_send_wr chain[1];  // a second work request, for chains of two (invalidate + bind): left uninitialized
                        // here (it is large and rarely used); whoever chains it fills it whole
  ibv_sge sge{};
  std::uint64_t* atomic_result = nullptr;  // local 8-byte buffer of fetch_add / compare_swap
  remote_key key{};                        // result of result_kind::key

  /// Posts instead of ibv_post_send (e.g. ibv_bind_mw for type-1 windows); returns 0 or an errno.
  int (*post)(ibv_qp* qp, wr_node* self) = nullptr;
  /// Runs once the last completion arrived (or the operation failed before posting), before the handler:
  /// may adjust `ec` and record state (e.g. a type-2 window's new rkey on success, the old one on failure).
  void (*on_complete)(wr_node* self, error_code& ec) = nullptr;
  void* context = nullptr;  // for post / on_complete

  wr_node() noexcept {}  // `wr` is zeroed by its initializer (its first member is the larger)
};

/// The completion arguments of `kind` from a work completion (`wc` may be null: cancelled or failed to post).
std::size_t result_length(const wr_node& n) noexcept;
received result_received(const ibv_wc* wc) noexcept;
std::uint64_t result_atomic(const wr_node& n) noexcept;

/// Cancellation: called from the handler's cancellation slot.
void cancel_node(wr_node* node, boost::asio::cancellation_type type) noexcept;

/// The completion arguments of each kind of operation, as a tuple.
template <result_kind Kind>
struct result_for;
template <>
struct result_for<result_kind::length> {
  static auto args(error_code ec, const wr_node& n, const ibv_wc*) {
    return std::tuple(ec, ec ? std::size_t{0} : result_length(n));
  }
};
template <>
struct result_for<result_kind::receive> {
  static auto args(error_code ec, const wr_node&, const ibv_wc* wc) {
    return std::tuple(ec, ec ? received{} : result_received(wc));
  }
};
template <>
struct result_for<result_kind::atomic> {
  static auto args(error_code ec, const wr_node& n, const ibv_wc*) {
    return std::tuple(ec, ec ? std::uint64_t{0} : result_atomic(n));
  }
};
template <>
struct result_for<result_kind::key> {
  static auto args(error_code ec, const wr_node& n, const ibv_wc*) {
    return std::tuple(ec, ec ? remote_key{} : n.key);
  }
};
template <>
struct result_for<result_kind::none> {
  static auto args(error_code ec, const wr_node&, const ibv_wc*) {
    return std::tuple(ec);
  }
};

/// The cancellation handler installed in a handler's slot.
struct node_cancellation {
  wr_node* node;
  void operator()(boost::asio::cancellation_type type) const noexcept { cancel_node(node, type); }
};

/// The handler with its completion arguments, as a completion handler for `dispatch` / `post`.
template <class Handler, class Args>
auto bind_args(Handler&& handler, Args&& args) {
  return std::apply(
      [&](auto&&... a) { return boost::asio::append(std::forward<Handler>(handler), std::forward<decltype(a)>(a)...); },
      std::forward<Args>(args));
}

/// Completes `handler` with `args` on `ex`, the I/O object's executor, which is the handler's associated
/// executor (or the handler has none): posted (`completion_mode::post`), dispatched, or — when the dispatch
/// turn runs on this thread inside `ex`'s io_context (`completion_mode::invoke`, never in an initiating
/// function) — invoked directly, as Asio's own I/O operations invoke theirs when their executor is the
/// io_context's (the operation is already running as a handler of that executor): no type-erased
/// `executor_function`, no work-tracking copies, no fence. An exception it throws leaves through the
/// completion queue, which finishes its turn and rethrows it (cq_impl::drain).
template <class Executor, class Handler, class Args>
void complete_on(const Executor& ex, Handler&& handler, Args&& args, completion_mode mode) {
  if (mode == completion_mode::invoke)
    return (void)std::apply(std::forward<Handler>(handler), std::forward<Args>(args));
  if (mode == completion_mode::post)
    return (void)boost::asio::post(ex, bind_args(std::forward<Handler>(handler), std::forward<Args>(args)));
  boost::asio::dispatch(ex, bind_args(std::forward<Handler>(handler), std::forward<Args>(args)));
}

/// An operation owning its handler, allocated with the handler's associated allocator. Outstanding work:
/// as in Asio's own I/O operations, the I/O object's executor needs none per operation — the completion
/// queue's readiness wait or posted step keeps it busy while any work request is outstanding — so a
/// handler whose associated executor is the I/O executor (the default: plain callbacks; a coroutine on
/// the queue's executor) costs no tracked-work executor copy. A handler with an executor of its own (a
/// strand, another loop, `use_future`'s) keeps that one busy (outstanding_work.tracked) until it runs.
///
/// `io_ex` is the I/O object's executor; it outlives the operation (a completion queue outlives its queue
/// pairs and shared receive queues, whose destructors complete every operation).
template <result_kind Kind, class Handler, class IoExecutor>
class wr_op final : public wr_node {
public:
  using handler_executor = boost::asio::associated_executor_t<Handler, IoExecutor>;
  using work_executor = std::decay_t<decltype(boost::asio::prefer(std::declval<handler_executor>(),
                                                                  boost::asio::execution::outstanding_work.tracked))>;
  using allocator_type = typename std::allocator_traits<boost::asio::associated_allocator_t<
      Handler, boost::asio::recycling_allocator<void>>>::template rebind_alloc<wr_op>;

  /// `handler`: the handler, moved from an rvalue, copied from an lvalue (a callback passed by name).
  template <class H>
  static wr_op* create(H&& handler, const IoExecutor& io_ex) {
    allocator_type alloc(boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>()));
    wr_op* p = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    try {
      return ::new (static_cast<void*>(p)) wr_op(std::forward<H>(handler), io_ex);
    } catch (...) {
      std::allocator_traits<allocator_type>::deallocate(alloc, p, 1);
      throw;
    }
  }

  /// Connects the handler's cancellation slot (if any) to this node.
  void install_cancellation() {
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) slot.template emplace<node_cancellation>(node_cancellation{this});
  }

  /// Frees the node without running the handler (the initiation failed before anything was posted).
  void destroy() noexcept { destroy(allocator()); }

private:
  allocator_type allocator() const noexcept {
    return allocator_type(boost::asio::get_associated_allocator(handler_, boost::asio::recycling_allocator<void>()));
  }
  void destroy(allocator_type alloc) noexcept {
    this->~wr_op();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  template <class H>
  wr_op(H&& h, const IoExecutor& io_ex) : handler_(std::forward<H>(h)), io_ex_(&io_ex) {
    this->complete = &do_complete;
    this->kind = Kind;
    if constexpr (has_associated_executor_v<Handler>) {
      decltype(auto) ex = boost::asio::get_associated_executor(handler_, io_ex);
      if constexpr (std::is_same_v<handler_executor, IoExecutor>) {
        if (ex == io_ex) return;  // the I/O executor: no work of its own (above)
      }
      work_.emplace(boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked));
    }
  }

  static void do_complete(wr_node* base, error_code ec, const ibv_wc* wc, completion_mode mode) {
    auto* self = static_cast<wr_op*>(base);
    auto slot = boost::asio::get_associated_cancellation_slot(self->handler_);
    if (slot.is_connected()) slot.clear();
    // Take what the handler needs, free the node, then run the handler: its memory can be reused by
    // the next operation the handler starts (the recycling allocator makes the steady state allocation-free).
    allocator_type alloc = self->allocator();
    auto args = result_for<Kind>::args(ec, *self, wc);
    Handler handler(std::move(self->handler_));
    const IoExecutor& io_ex = *self->io_ex_;
    if constexpr (has_associated_executor_v<Handler>) {
      if (self->work_) {
        work_executor work(std::move(*self->work_));
        self->destroy(alloc);
        if (mode != completion_mode::post)
          boost::asio::dispatch(work, bind_args(std::move(handler), std::move(args)));
        else
          boost::asio::post(work, bind_args(std::move(handler), std::move(args)));
        return;
      }
    }
    self->destroy(alloc);
    complete_on(io_ex, std::move(handler), std::move(args), mode);
  }

  struct no_work {};
  Handler handler_;
  const IoExecutor* io_ex_;
  [[no_unique_address]] std::conditional_t<has_associated_executor_v<Handler>, std::optional<work_executor>, no_work>
      work_;
};

}  // namespace detail
}  // namespace coverbs
