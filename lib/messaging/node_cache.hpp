#pragma once
// Private to lib/: the allocator of a message endpoint's own receive and send operations (endpoint_impl.cpp).
//
// An endpoint keeps every receive slot posted, so hundreds of its operation nodes are alive at once and one
// is freed and made again per message. Asio's recycling allocator, the default, keeps two free blocks per
// thread: past those, each message paid a malloc and a free (natively ~300 instructions a call of its ~8,300).
// This one keeps up to `capacity` free nodes of one type per thread; a node freed on another thread goes to
// that thread's list. Each thread's list frees what it holds when the thread ends.
#include <cstddef>
#include <new>

namespace coverbs::detail {

template <class T>
class node_cache_allocator {
public:
  using value_type = T;
  static constexpr std::size_t capacity = 64;

  node_cache_allocator() noexcept = default;
  template <class U>
  node_cache_allocator(const node_cache_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n == 1)
      if (void* p = list().pop()) return static_cast<T*>(p);
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{alignof(T)}));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1 && list().push(p)) return;
    ::operator delete(p, std::align_val_t{alignof(T)});
  }

  template <class U>
  bool operator==(const node_cache_allocator<U>&) const noexcept { return true; }

private:
  // A thread's list lives on the heap, made by its first use; the thread reaches it through one initial-exec
  // thread-local pointer (8 bytes of static TLS per node type, where a list of its own would take ~0.5 KiB; the
  // library needs static TLS already: docs/architecture.md). Through the default model
  // each access was a `__tls_get_addr` call, ~130 instructions per call and reply. When the thread ends, its
  // drainer frees the nodes and the list and points the thread at `closed_`: a node freed after that (by another
  // thread-local object's destructor) goes back to the heap.
  struct free_list {
    void* items[capacity];
    std::size_t size;
    bool closed;
    bool push(void* p) noexcept {
      if (closed || size == capacity) return false;
      items[size++] = p;
      return true;
    }
    void* pop() noexcept { return !closed && size ? items[--size] : nullptr; }
  };
  struct drainer {
    free_list* l;
    ~drainer() {
      current_ = &closed_;
      if (!l) return;
      while (l->size) ::operator delete(l->items[--l->size], std::align_val_t{alignof(T)});
      delete l;
    }
  };
  [[gnu::noinline, gnu::cold]] static free_list& make() noexcept {
    static thread_local drainer d{new (std::nothrow) free_list{}};  // frees the list when the thread ends
    current_ = d.l ? d.l : &closed_;  // no memory for a list: this thread uses the heap only
    return *current_;
  }
  static free_list& list() noexcept {
    if (free_list* l = current_) [[likely]]
      return *l;
    return make();
  }
  [[gnu::tls_model("initial-exec")]] static inline constinit thread_local free_list* current_ = nullptr;
  static inline constinit free_list closed_{{}, 0, true};  // shared by every thread, never written
};

}  // namespace coverbs::detail
