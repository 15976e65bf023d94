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
  // Trivially destructible and constant-initialized, so reaching it costs one thread-local access and no guard
  // (the drainer, which has a destructor, is made by the first push only); a node freed after the thread's drainer
  // ran (another thread-local object's destructor) still finds the list, closed, and goes back to the heap.
  struct free_list {
    void* items[capacity];
    std::size_t size;
    bool closed;
    bool armed;
    bool push(void* p) noexcept {
      if (closed || size == capacity) return false;
      if (!armed) arm(this);
      items[size++] = p;
      return true;
    }
    void* pop() noexcept { return !closed && size ? items[--size] : nullptr; }
  };
  struct drainer {
    free_list* l;
    ~drainer() {
      l->closed = true;
      while (l->size) ::operator delete(l->items[--l->size], std::align_val_t{alignof(T)});
    }
  };
  [[gnu::noinline]] static void arm(free_list* l) noexcept {
    l->armed = true;
    static thread_local drainer d{l};  // empties the list when the thread ends
    (void)d;
  }
  static free_list& list() noexcept {
    static thread_local constinit free_list l{};
    return l;
  }
};

}  // namespace coverbs::detail
