#include "dataplane/qp_impl.hpp"

namespace coverbs::detail {

bool node_fifo::remove(wr_node* n) noexcept {
  wr_node* prev = nullptr;
  for (wr_node* p = head; p; prev = p, p = p->next) {
    if (p != n) continue;
    (prev ? prev->next : head) = p->next;
    if (tail == p) tail = prev;
    p->next = nullptr;
    --size;
    return true;
  }
  return false;
}

}  // namespace coverbs::detail

// --- the per-thread cache of freed operation nodes (detail/wr_op.hpp, node_allocator) ---

#include <coverbs/detail/wr_op.hpp>

namespace coverbs::detail {

constinit thread_local node_block_cache node_blocks{};

namespace {

/// Gives the cached blocks back to the heap when its thread ends; a node freed after that goes straight back.
struct node_blocks_release {
  ~node_blocks_release() {
    node_block_cache& c = node_blocks;
    c.state = 2;
    for (void*& b : c.block)
      if (b) ::operator delete(static_cast<unsigned char*>(std::exchange(b, nullptr)) - node_block_header);
  }
};

}  // namespace

void node_blocks_register() noexcept {
  static thread_local node_blocks_release release;
  (void)&release;
  node_blocks.state = 1;
}

}  // namespace coverbs::detail
