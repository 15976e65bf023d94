// A window's life: bound, unbound, replaced (its key killed for sure), destroyed (at once, or when its
// operation in flight completes).
#include "windows/window_internal.hpp"

#include "dataplane/qp_impl.hpp"
#include "windows/window_counters.hpp"
#include "windows/window_registry.hpp"

#include <cerrno>
#include <cstdio>

namespace coverbs::detail {

void record_bound(window_impl* w) noexcept { note_bound(w->region_entry, w->mr); }

void record_unbound(window_impl* w) noexcept {
  note_unbound(w->region_entry);
  w->binding.store(0, std::memory_order_release);
  w->key = {};
  w->rights = access::none;
  w->mr = nullptr;
  w->state = window_state::unbound;
}

ibv_mw_type verbs_type(window_type t) noexcept { return t == window_type::type1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2; }

void dealloc(window_impl* w) noexcept {
  if (!w->mw) return;
  unfile_window(w);
  if (const error_code ec = verbs_status_result(ibv_dealloc_mw(w->mw)))
    std::fprintf(stderr, "coverbs: ibv_dealloc_mw failed (%s); the window is leaked\n", ec.message().c_str());
  w->mw = nullptr;
  count_deallocated();
}

void replace(window_impl* w) noexcept {
  if (w->state == window_state::bound || w->mr) record_unbound(w);
  w->state = window_state::unbound;
  dealloc(w);
  count(window_counter::windows_replaced);
  if (w->orphaned) return;
  w->mw = ibv_alloc_mw(w->pd, verbs_type(w->type));
  if (w->mw) {
    count(window_counter::windows_allocated);
    try {
      file_window(w);
    } catch (...) {  // out of memory: the window works, only lookups by rkey will not find it
    }
  } else
    std::fprintf(stderr, "coverbs: ibv_alloc_mw failed while replacing a window; the window is now empty\n");
}

void destroy_now(window_impl* w) noexcept {
  if (w->state == window_state::bound) record_unbound(w);
  dealloc(w);
  drop_binding(w->region_entry);
  delete w;
}

void finish(window_impl* w) noexcept {
  if (w->orphaned) destroy_now(w);
}

int post_type1_bind(ibv_qp* qp, wr_node* n) {
  auto* w = static_cast<window_impl*>(n->context);
  ibv_mw_bind bind{};
  bind.wr_id = n->wr.send.wr_id;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = n->wr.send.bind_mw.bind_info;
  const int rc = ibv_bind_mw(qp, w->mw, &bind);  // the provider moves mw->rkey to the next key
  if (rc == 0) n->key.rkey = w->mw->rkey;
  return rc;
}

error_code check_window(queue_pair_impl* q, window_impl* w) {
  if (!w || !w->mw) return errno_code(EBADF);
  if (w->state == window_state::binding || w->state == window_state::invalidating) return errc::window_busy;
  if (q->qp_->pd != w->pd) return errc::pd_mismatch;
  return {};
}

void window_impl_deleter::operator()(window_impl* w) const noexcept {
  if (!w) return;
  if (w->state == window_state::binding || w->state == window_state::invalidating) {
    w->orphaned = true;  // the operation's completion deallocates it
    w->on_remote_invalidation = nullptr;
    return;
  }
  destroy_now(w);
}

}  // namespace coverbs::detail
