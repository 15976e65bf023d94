#pragma once
// Internal: the templated operation that owns a completion handler; its base, wr_node, is what the library
// sees. Not part of the public API.

#include <coverbs/detail/wr_node.hpp>

#include <cstddef>
#include <new>
#include <utility>

namespace coverbs::detail {

/// The blocks a thread keeps of operation nodes it freed (node_allocator): two, each with its capacity in the
/// 16 bytes in front of it. Plain data, constant-initialized, so that reading it costs a thread-pointer-relative
/// load (no TLS wrapper call); the blocks go back to the heap when the thread ends (lib/dataplane/node_fifo.cpp).
inline constexpr std::size_t node_block_header = 16;  // a block's capacity, in front of it (16: the node stays aligned)
struct node_block_cache {
  void* block[2];
  std::size_t capacity[2];
  /// 0: nothing cached yet (the thread-exit release is not registered); 1: registered; 2: the thread is ending
  /// (freed nodes go straight back to the heap).
  unsigned char state;
};
[[gnu::tls_model("initial-exec")]] extern constinit thread_local node_block_cache node_blocks;
/// Registers the thread-exit release of `node_blocks` (the first block a thread caches). Out of line, cold.
void node_blocks_register() noexcept;

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool node_allocator_sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool node_allocator_sanitized = true;
#else
inline constexpr bool node_allocator_sanitized = false;
#endif
#else
inline constexpr bool node_allocator_sanitized = false;
#endif

/// The allocator of operation nodes whose handler names none: as Asio's recycling allocator (a freed node's
/// memory serves the next operation on the same thread, the steady state allocates nothing), with a cache of
/// its own that costs a few instructions a node (Asio's looks up its thread's call stack and scans its slots).
template <class T>
class node_allocator {
public:
  using value_type = T;
  node_allocator() noexcept = default;
  template <class U>
  node_allocator(const node_allocator<U>&) noexcept {}
  template <class U>
  struct rebind {
    using other = node_allocator<U>;
  };
  template <class U>
  bool operator==(const node_allocator<U>&) const noexcept {
    return true;
  }

  T* allocate(std::size_t n) {
    const std::size_t size = n * sizeof(T);
    if constexpr (!cached()) {
      if constexpr (alignof(T) > header)
        return static_cast<T*>(::operator new (size, std::align_val_t{alignof(T)}));
      else
        return static_cast<T*>(::operator new(size));
    } else {
      node_block_cache& c = node_blocks;
      for (int i = 0; i < 2; ++i) {
        if (c.block[i] && c.capacity[i] >= size) {
          void* b = std::exchange(c.block[i], nullptr);
          return static_cast<T*>(b);
        }
      }
      auto* raw = static_cast<unsigned char*>(::operator new(size + header));
      *reinterpret_cast<std::size_t*>(raw) = size;
      return reinterpret_cast<T*>(raw + header);
    }
  }
  void deallocate(T* p, std::size_t) noexcept {
    if constexpr (!cached()) {
      if constexpr (alignof(T) > header)
        ::operator delete (p, std::align_val_t{alignof(T)});
      else
        ::operator delete(p);
    } else {
      unsigned char* raw = reinterpret_cast<unsigned char*>(p) - header;
      node_block_cache& c = node_blocks;
      if (c.state == 1) [[likely]] {
        for (int i = 0; i < 2; ++i) {
          if (!c.block[i]) {
            c.block[i] = p;
            c.capacity[i] = *reinterpret_cast<std::size_t*>(raw);
            return;
          }
        }
      } else if (c.state == 0) {
        node_blocks_register();
        c.block[0] = p;
        c.capacity[0] = *reinterpret_cast<std::size_t*>(raw);
        return;
      }
      ::operator delete(raw);
    }
  }

private:
  static constexpr std::size_t header = node_block_header;
  /// Nodes aligned beyond the block header (a handler holding an over-aligned object) come from the aligned
  /// `operator new`; under AddressSanitizer every node does, so that a use of a freed node is reported instead
  /// of landing in the next operation's node.
  static constexpr bool cached() noexcept { return alignof(T) <= header && !node_allocator_sanitized; }
};

/// An operation of kind `Op` (a type of ops/: `Op::completion::result` makes the completion arguments) owning its
/// handler, allocated with the handler's associated allocator. Outstanding work: as in Asio's own I/O operations, the
/// I/O object's executor needs none per operation — the completion queue's readiness wait or posted step keeps it busy
/// while any work request is outstanding — so a handler whose associated executor is the I/O executor (the default:
/// plain callbacks; a coroutine on the queue's executor) costs no tracked-work executor copy. A handler with an
/// executor of its own (a strand, another loop, `use_future`'s) keeps that one busy (outstanding_work.tracked) until it
/// runs.
///
/// `io_ex` is the I/O object's executor; it outlives the operation (a completion queue outlives its queue
/// pairs and shared receive queues, whose destructors complete every operation).
template <class Op, class Handler, class IoExecutor>
class wr_op final : public wr_node {
public:
  using handler_executor = boost::asio::associated_executor_t<Handler, IoExecutor>;
  using work_executor = std::decay_t<decltype(boost::asio::prefer(std::declval<handler_executor>(),
                                                                  boost::asio::execution::outstanding_work.tracked))>;
  using allocator_type = typename std::allocator_traits<
      boost::asio::associated_allocator_t<Handler, node_allocator<void>>>::template rebind_alloc<wr_op>;

  /// `handler`: the handler, moved from an rvalue, copied from an lvalue (a callback passed by name).
  template <class H>
  static wr_op* create(H&& handler, const IoExecutor& io_ex) {
    allocator_type alloc(boost::asio::get_associated_allocator(handler, node_allocator<void>()));
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
    return allocator_type(boost::asio::get_associated_allocator(handler_, node_allocator<void>()));
  }
  void destroy(allocator_type alloc) noexcept {
    this->~wr_op();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  template <class H>
  wr_op(H&& h, const IoExecutor& io_ex) : handler_(std::forward<H>(h)), io_ex_(&io_ex) {
    this->complete = &do_complete;
    if constexpr (has_associated_executor_v<Handler>) {
      decltype(auto) ex = boost::asio::get_associated_executor(handler_, io_ex);
      if constexpr (std::is_same_v<handler_executor, IoExecutor>) {
        if (same_executor(ex, io_ex)) return;  // the I/O executor: no work of its own (above)
      }
      work_.emplace(boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked));
    }
  }

  static void do_complete(wr_node* base, const error_code& ec, const ibv_wc* wc, completion_mode mode) {
    auto* self = static_cast<wr_op*>(base);
    auto slot = boost::asio::get_associated_cancellation_slot(self->handler_);
    if (slot.is_connected()) slot.clear();
    // Take what the handler needs, free the node, then run the handler: its memory can be reused by
    // the next operation the handler starts (node_allocator's per-thread blocks make the steady state allocation-free).
    allocator_type alloc = self->allocator();
    auto args = Op::completion::result(ec, *self, wc);
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

}  // namespace coverbs::detail
