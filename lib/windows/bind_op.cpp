// Binding a memory window (bind_mw, rebind_mw): validation before posting, the work request (IBV_WR_BIND_MW,
// chained after IBV_WR_LOCAL_INV for a rebind of a bound type-2 window; ibv_bind_mw(3) for type 1), and what
// its completion records.
#include <coverbs/detail/bind_check.hpp>
#include <coverbs/detail/ops/bind_op.hpp>

#include "dataplane/qp_impl.hpp"
#include "windows/window_counters.hpp"
#include "windows/window_internal.hpp"

#include <cerrno>

namespace coverbs::detail {

namespace {

void on_bind_complete(wr_node* n, error_code& ec) {
  auto* w = static_cast<window_impl*>(n->context);
  if (!ec) {
    // A rebind over the region the window is bound to (a change of rights or range) leaves the region's count
    // and the count of bound windows as they are: no lock, no map. (A peer's invalidation while the chain was
    // in flight unbinds the window, w->mr is then null and the new binding is counted afresh.)
    const bool same_region = w->prev_state == window_state::bound && w->mr && w->mr == w->pending_mr;
    if (w->prev_state == window_state::bound && !same_region) record_unbound(w);  // the old key is dead
    if (w->type != window_type::type1) w->mw->rkey = n->key.rkey;                 // libibverbs does not (rxe needs it)
    w->key = n->key;
    w->rights = w->pending_rights;
    w->mr = w->pending_mr;
    w->state = window_state::bound;
    const std::uint64_t through = w->type == window_type::type1 ? 0 : w->pending_qp_num;  // type 1: no queue pair
    w->binding.store(through << 32 | w->key.rkey, std::memory_order_release);
    if (!same_region) record_bound(w);
    count(window_counter::binds);
  } else {
    count(window_counter::binds_failed);
    if (w->pending_chain) {
      replace(w);  // the invalidation may or may not have run: make sure the old key is dead
    } else {
      if (w->type == window_type::type1) w->mw->rkey = w->prev_rkey;  // the provider advanced it at post time
      w->state = w->prev_state;
    }
  }
  finish(w);
}

}  // namespace

error_code validate_bind(const bind_check& c, std::size_t& length) noexcept {
  length = 0;
  if (c.window_pd != c.qp_pd || c.region_pd != c.window_pd) return errc::pd_mismatch;
  constexpr access window_rights = access::remote_read | access::remote_write | access::remote_atomic;
  if ((c.rights & ~window_rights) != access::none) return errc::window_access_invalid;
  if (!has(c.region_rights, access::mw_bind)) return errc::region_lacks_mw_bind;
  if ((has(c.rights, access::remote_write) || has(c.rights, access::remote_atomic)) &&
      !has(c.region_rights, access::local_write))
    return errc::window_needs_local_write;
  if (!has(c.region_rights, c.rights)) return errc::access_exceeds_region;
  if (c.range.offset > c.region_length) return errc::range_outside_region;
  const std::size_t len = c.range.length == window_range::all ? c.region_length - c.range.offset : c.range.length;
  if (len > c.region_length - c.range.offset) return errc::range_outside_region;
  if (len == 0) return errc::zero_length_window;
  if (c.type != window_type::type1 && c.state == window_state::bound && !c.rebind) return errc::window_still_bound;
  length = len;
  return {};
}

error_code bind_op::prepare(queue_pair_impl* q, wr_node& n) const {
  window_impl* w = window;
  ibv_mr* mr = region;
  error_code ec = mr ? check_window(q, w) : errno_code(EBADF);
  std::size_t length = 0;
  if (!ec) {
    bind_check c;
    c.type = w->type;
    c.state = w->state;
    c.window_pd = w->pd;
    c.qp_pd = q->qp_->pd;
    c.region_pd = mr->pd;
    c.region_rights = region_rights;
    c.region_length = mr->length;
    c.range = range;
    c.rights = rights;
    c.rebind = rebind;
    ec = validate_bind(c, length);
  }
  if (ec) {
    count(window_counter::binds_failed);
    // Refused before posting: the node still says what it was, for the metrics' kind (kind_of in
    // lib/core/metrics.cpp tells a bind from a type-1 window's zero-length invalidation by its length).
    n.wr.send.opcode = IBV_WR_BIND_MW;
    n.wr.send.bind_mw.bind_info.length = 1;
    return ec;
  }
  const std::uint64_t addr = reinterpret_cast<std::uintptr_t>(mr->addr) + range.offset;
  const bool chain = w->type != window_type::type1 && w->state == window_state::bound;
  const auto wr_id = reinterpret_cast<std::uintptr_t>(&n);
  ibv_send_wr& bind = chain ? n.chain[0] : n.wr.send;
  if (chain) {
    // wr_node leaves chain[0] uninitialized: set every field a provider reads for a bind (not `bind = {}`,
    // whose 128-byte block clear cost a quarter of a rebind's own time natively).
    bind.next = nullptr;
    bind.sg_list = nullptr;
    bind.num_sge = 0;
    bind.imm_data = 0;
    bind.wr = {};
    bind.qp_type = {};
  }
  bind.wr_id = wr_id;
  bind.opcode = IBV_WR_BIND_MW;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_mw.mw = w->mw;
  bind.bind_mw.bind_info.mr = mr;
  bind.bind_mw.bind_info.addr = addr;
  bind.bind_mw.bind_info.length = length;
  bind.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(to_verbs(rights));
  n.key = {addr, length, 0};
  if (w->type == window_type::type1) {
    bind.bind_mw.rkey = 0;  // ibv_bind_mw picks the next key (post_type1_bind)
    n.post = &post_type1_bind;
  } else {
    bind.bind_mw.rkey = n.key.rkey = ibv_inc_rkey(w->mw->rkey);
    if (chain) {
      ibv_send_wr& inv = n.wr.send;
      inv.wr_id = wr_id;
      inv.opcode = IBV_WR_LOCAL_INV;
      inv.send_flags = IBV_SEND_SIGNALED;
      inv.invalidate_rkey = w->key.rkey;
      inv.next = &n.chain[0];
      n.credits = 2;
    }
  }
  w->prev_state = w->state;
  w->prev_rkey = w->mw->rkey;
  w->pending_mr = mr;
  w->pending_rights = rights;
  w->pending_chain = chain;
  w->pending_qp_num = q->qp_->qp_num;
  w->state = window_state::binding;
  n.context = w;
  n.on_complete = &on_bind_complete;
  return {};
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const bind_op&);

}  // namespace coverbs::detail
