// Invalidating a memory window's key (invalidate): IBV_WR_LOCAL_INV for type 2, a zero-length ibv_bind_mw(3)
// for type 1; an unbound window completes at once; a failed invalidation replaces the window.
#include <coverbs/detail/ops/invalidate_op.hpp>

#include "dataplane/qp_impl.hpp"
#include "windows/window_counters.hpp"
#include "windows/window_internal.hpp"
#include "windows/window_registry.hpp"

namespace coverbs::detail {

namespace {

/// A marker error: "nothing to post, complete with success" (an unbound window's invalidation).
const error_code& nothing_to_do() {
  static const error_code ec(0x7fff, coverbs_category());
  return ec;
}

void on_nothing_to_do(wr_node* n, error_code& ec) {
  if (ec == nothing_to_do()) ec = {};
  finish(static_cast<window_impl*>(n->context));
}

void on_invalidate_complete(wr_node* n, error_code& ec) {
  auto* w = static_cast<window_impl*>(n->context);
  if (!ec)
    record_unbound(w);
  else
    replace(w);  // not retired by the device (flushed, cancelled, failed): deallocation kills the key
  count(window_counter::invalidations);
  finish(w);
}

error_code prepare_invalidate(queue_pair_impl* q, wr_node& n, window_impl* w) {
  n.wr.send.opcode = IBV_WR_LOCAL_INV;  // refused or with nothing to do, it still counts as an invalidation
  if (error_code ec = check_window(q, w)) return ec;
  n.context = w;
  if (w->state == window_state::unbound) {
    n.on_complete = &on_nothing_to_do;
    return nothing_to_do();
  }
  n.wr.send.wr_id = reinterpret_cast<std::uintptr_t>(&n);
  n.wr.send.send_flags = IBV_SEND_SIGNALED;
  if (w->type == window_type::type1) {
    // A zero-length bind: the window gets a new key that grants nothing. The provider still reads the
    // region's lkey, so name the region of the current binding.
    n.wr.send.opcode = IBV_WR_BIND_MW;
    n.wr.send.bind_mw = {};  // not cleared by wr_node's constructor
    n.wr.send.bind_mw.bind_info.mr = w->mr;
    n.post = &post_type1_bind;
  } else {
    n.wr.send.opcode = IBV_WR_LOCAL_INV;
    n.wr.send.invalidate_rkey = w->key.rkey;
  }
  w->state = window_state::invalidating;
  n.on_complete = &on_invalidate_complete;
  return {};
}

}  // namespace

error_code invalidate_window_op::prepare(queue_pair_impl* q, wr_node& n) const {
  return prepare_invalidate(q, n, window);
}

error_code invalidate_rkey_op::prepare(queue_pair_impl* q, wr_node& n) const {
  window_impl* w = find_bound(q->qp_->context, rkey);
  if (!w) {
    n.wr.send.opcode = IBV_WR_LOCAL_INV;  // counts as a refused invalidation (metrics)
    return errc::rkey_not_a_window;
  }
  return prepare_invalidate(q, n, w);
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const invalidate_window_op&);
template void qp_start(queue_pair_impl*, wr_node*, const invalidate_rkey_op&);

}  // namespace coverbs::detail
