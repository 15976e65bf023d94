#pragma once
// Internal: the operation node whose address is a work request's wr_id, and how a finished operation reaches
// its handler. The templated operation that owns a handler is wr_op.hpp; the operation kinds are ops/.
// Not part of the public API.

#include <coverbs/buffer.hpp>
#include <coverbs/detail/fwd.hpp>
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

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace coverbs {

namespace detail {

/// How a finished operation reaches its handler. The completion queue decides once per dispatch turn, so
/// a completion costs no executor query of its own.
enum class completion_mode : std::uint8_t {
  post,      ///< always posted: an initiating function, a queue pair's destructor, a failure before posting
  dispatch,  ///< `asio::dispatch` to the handler's executor (a turn that is not on the I/O executor's loop thread)
  invoke,    ///< the turn runs on this thread inside the I/O executor's io_context: a handler associated with that
             ///< executor is called directly, as Asio calls its own I/O operations' handlers
};

/// Where a node is in its life: waiting for a send- or receive-queue credit; holding one in its queue pair's
/// list of the running dispatch turn, not posted yet (`batched`); posted; completed.
enum class node_state : std::uint8_t { waiting_credit, batched, posted, done };

/// Base of every operation: its address is the wr_id of the (last) work request it posts.
struct wr_node {
  /// Completes the operation: frees the node, then hands `ec` and the result to the handler on its
  /// executor as `mode` says. `ec` may be the node's own `first_error`: it is read before the node is freed.
  using complete_fn = void (*)(wr_node*, const error_code& ec, const ibv_wc* wc, completion_mode mode);

  complete_fn complete = nullptr;
  queue_pair_impl* qp = nullptr;
  shared_receive_queue_impl* srq = nullptr;  // set instead of `qp` for a shared receive queue's operations
  wr_node* next = nullptr;  // credit wait queue, turn list, or posted send requests (FIFOs of the queue pair)
  wr_node* prev = nullptr;  // a shared receive queue's list of posted receives (with `next`)
  node_state state = node_state::waiting_credit;
  bool is_recv = false;
  bool cancelled = false;  // terminal cancellation requested while posted
  /// Work requests this operation posts (a chain: wr.send -> chain[0]). Each holds a send-queue credit
  /// and is signaled with wr_id = this node; the operation completes with its last completion, reporting
  /// the first error of the chain.
  std::uint32_t credits = 1;
  std::uint32_t pending = 0;  // completions still to come
  error_code first_error;
  /// Cleared up to `wr_cleared` by the constructor: every field a work request but a window bind reads. The
  /// bind's fields (`send.bind_mw`, which shares the tail with `send.tso`) are left to the operations that
  /// post a bind, which set them all (lib/windows/bind_op.cpp, invalidate_op.cpp): clearing the whole 128 bytes
  /// cost a write 16 more instructions (a `rep stos`).
  union {
    ibv_send_wr send;
    ibv_recv_wr recv;
  } wr;
  static constexpr std::size_t wr_cleared = offsetof(ibv_send_wr, bind_mw);
  static_assert(sizeof(ibv_recv_wr) <= wr_cleared, "a receive's work request is cleared whole");
  union {
    ibv_send_wr chain[1];  // a second work request, for chains of two (invalidate + bind): left uninitialized
                           // here (it is large and rarely used); whoever chains it fills it whole
    ibv_sge sg[max_spans_per_operation];  // the scatter/gather list of an operation over several spans
  };
  static_assert(sizeof(chain) >= sizeof(sg), "the scatter/gather list shares the chain's room");
  /// The one SGE of a single-span operation; for one over several spans (`sg`), `sge.length` is their total,
  /// which its completion reports.
  ibv_sge sge{};
  std::uint64_t* atomic_result = nullptr;  // local 8-byte buffer of fetch_add / compare_swap
  remote_key key{};                        // result of a window bind (ops/bind_op.hpp)

  /// Posts instead of ibv_post_send (e.g. ibv_bind_mw for type-1 windows); returns 0 or an errno.
  int (*post)(ibv_qp* qp, wr_node* self) = nullptr;
  /// Runs once the last completion arrived (or the operation failed before posting), before the handler:
  /// may adjust `ec` and record state (e.g. a type-2 window's new rkey on success, the old one on failure).
  void (*on_complete)(wr_node* self, error_code& ec) = nullptr;
  void* context = nullptr;  // for post / on_complete

  wr_node() noexcept { std::memset(static_cast<void*>(&wr), 0, wr_cleared); }
};

/// Cancellation: called from the handler's cancellation slot.
void cancel_node(wr_node* node, boost::asio::cancellation_type type) noexcept;

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

}  // namespace detail
}  // namespace coverbs
