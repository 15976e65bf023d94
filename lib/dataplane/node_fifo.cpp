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
