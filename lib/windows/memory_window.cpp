#include <coverbs/memory_window.hpp>
#include <coverbs/protection_domain.hpp>

#include "dataplane/qp_impl.hpp"
#include "events/qp_registry.hpp"
#include "windows/window_internal.hpp"

#include <boost/asio/dispatch.hpp>

#include <cerrno>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace coverbs {
namespace detail {

/// The windows that were bound to one region last (see window_registry).
struct region_cell {
  const ibv_mr* mr = nullptr;
  std::atomic<bool> retired{false};
  window_impl* first = nullptr;  // the windows keeping this cell, linked through window_impl::cell_next/prev;
                                 // guarded by the registry's mutex
};

namespace {

/// Which window has which live key, how many windows each region has bound, and each device's window
/// types. Windows of different threads meet here, hence the mutex.
///
/// A window's rkey changes only in its low 8 bits (the key IBA lets the consumer choose; ibv_inc_rkey), so
/// windows are filed once, at allocation, under (device, rkey >> 8); binds then touch no map.
///
/// Each region has a cell listing the windows that were bound to it last, and a window keeps the cell of
/// the region it was bound to last: a bind over that region again, and every invalidation, only sets the
/// window's own `counted` flag — no lock, no map, no locked instruction (natively the lock and map lookup
/// of every bind and invalidation were about a quarter of a bind's bookkeeping, a locked add ~15 ns). A
/// bind over another region than last time takes the lock once, to move the window to that region's list.
/// Deregistration counts the flags of the region's list. A deregistered region's cell is retired (a new
/// region can get the same ibv_mr address) and freed when no window keeps it.
struct window_registry {
  std::mutex mutex;
  std::map<std::pair<const ibv_context*, std::uint32_t>, window_impl*> by_index;
  std::unordered_map<const ibv_mr*, region_cell*> regions;
  std::unordered_map<const ibv_context*, unsigned long long> cap_flags;
};

window_registry& registry() {
  static window_registry r;
  return r;
}

constexpr auto relaxed = std::memory_order_relaxed;

std::pair<const ibv_context*, std::uint32_t> index_of(const ibv_mw* mw) noexcept {
  return {mw->context, mw->rkey >> 8};
}

void file_window(window_impl* w) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_index[index_of(w->mw)] = w;
}

void unfile_window(window_impl* w) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_index.find(index_of(w->mw));
  if (it != r.by_index.end() && it->second == w) r.by_index.erase(it);
}

/// The window whose live key is `rkey`, if coverbs knows one.
window_impl* find_bound(const ibv_context* context, std::uint32_t rkey) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_index.find({context, rkey >> 8});
  if (it == r.by_index.end()) return nullptr;
  window_impl* w = it->second;
  return w->state == window_state::bound && w->key.rkey == rkey ? w : nullptr;
}

/// Takes `w` off its cell's list (freeing a retired cell left empty); the caller holds the registry's mutex.
void drop_cell_locked(window_impl* w) noexcept {
  region_cell* c = std::exchange(w->region, nullptr);
  if (!c) return;
  if (w->cell_prev)
    w->cell_prev->cell_next = w->cell_next;
  else
    c->first = w->cell_next;
  if (w->cell_next) w->cell_next->cell_prev = w->cell_prev;
  w->cell_prev = w->cell_next = nullptr;
  if (!c->first && c->retired.load(relaxed)) delete c;
}

/// Windows of cell `c` whose binding is live; the caller holds the registry's mutex.
std::size_t bound_in_locked(const region_cell* c) noexcept {
  std::size_t n = 0;
  for (const window_impl* w = c->first; w; w = w->cell_next)
    n += w->counted.load(std::memory_order_acquire);
  return n;
}

/// Moves `w` to the cell of `w->mr` (made if the region has none yet); null when out of memory.
region_cell* switch_cell(window_impl* w) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  drop_cell_locked(w);
  region_cell* c = nullptr;
  try {
    auto it = r.regions.find(w->mr);
    if (it == r.regions.end()) {
      auto fresh = std::make_unique<region_cell>();
      fresh->mr = w->mr;
      it = r.regions.emplace(w->mr, fresh.get()).first;
      fresh.release();
    }
    c = it->second;
  } catch (...) {  // out of memory: the binding goes uncounted (the device still refuses the deregistration)
    return nullptr;
  }
  w->cell_next = c->first;
  if (c->first) c->first->cell_prev = w;
  c->first = w;
  w->region = c;
  return c;
}

/// Records `w`'s current binding (w->key, w->mr) as live: flags it in its region's list (moving it there first
/// when it was last bound to another region).
void record_bound(window_impl* w) noexcept {
  region_cell* c = w->region;
  if (!c || c->mr != w->mr || c->retired.load(std::memory_order_acquire)) c = switch_cell(w);
  w->counted.store(c != nullptr, std::memory_order_release);
}

/// Forgets `w`'s current binding (the key is dead) and marks the window unbound.
void record_unbound(window_impl* w) noexcept {
  w->counted.store(false, std::memory_order_release);
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
  count(window_counter::windows_allocated, ~std::uint64_t{0});
}

/// Kills the window's key for sure: deallocates it and allocates a fresh one (empty if that fails).
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
  if (w->region) {
    std::lock_guard lock(registry().mutex);
    drop_cell_locked(w);
  }
  delete w;
}

/// Runs after the last completion (or a failure before posting): settles the window's state.
void finish(window_impl* w) noexcept {
  if (w->orphaned) destroy_now(w);
}

/// A marker error: "nothing to post, complete with success" (an unbound window's invalidation).
const error_code& nothing_to_do() {
  static const error_code ec(0x7fff, coverbs_category());
  return ec;
}

void on_nothing_to_do(wr_node* n, error_code& ec) {
  if (ec == nothing_to_do()) ec = {};
  finish(static_cast<window_impl*>(n->context));
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

void on_invalidate_complete(wr_node* n, error_code& ec) {
  auto* w = static_cast<window_impl*>(n->context);
  if (!ec)
    record_unbound(w);
  else
    replace(w);  // not retired by the device (flushed, cancelled, failed): deallocation kills the key
  count(window_counter::invalidations);
  finish(w);
}

error_code check_window(queue_pair_impl* q, window_impl* w) {
  if (!w || !w->mw) return errno_code(EBADF);
  if (w->state == window_state::binding || w->state == window_state::invalidating) return errc::window_busy;
  if (q->qp_->pd != w->pd) return errc::pd_mismatch;
  return {};
}

}  // namespace

namespace {

constexpr std::size_t counter_count = static_cast<std::size_t>(window_counter::count_);

/// One thread's counts. Only its thread writes them (load + store, no read-modify-write); readers load.
struct counter_block {
  std::atomic<std::uint64_t> v[counter_count] = {};
};

/// Every live thread's block and what threads that ended had counted. Never destroyed: threads may still
/// count during static destruction.
struct counter_totals {
  std::mutex mutex;
  std::uint64_t ended[counter_count] = {};
  std::vector<counter_block*> live;
};
counter_totals& totals() {
  static auto* t = new counter_totals;
  return *t;
}

counter_block* const thread_ended = reinterpret_cast<counter_block*>(alignof(counter_block));
// initial-exec: one load through the thread pointer (the default model for a shared library calls
// __tls_get_addr on every count); 8 bytes of static TLS, which glibc reserves room for.
[[gnu::tls_model("initial-exec")]] thread_local counter_block* this_thread_counts = nullptr;

/// Folds the thread's block into the totals when the thread ends.
struct counter_block_owner {
  counter_block* block = nullptr;
  ~counter_block_owner() {
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    for (std::size_t i = 0; i < counter_count; ++i)
      t.ended[i] += block->v[i].load(relaxed);
    std::erase(t.live, block);
    delete block;
    this_thread_counts = thread_ended;
  }
};

/// The calling thread's block, made on its first count; null when out of memory or the thread is ending.
counter_block* attach_counts() noexcept {
  try {
    thread_local counter_block_owner owner;
    auto block = std::make_unique<counter_block>();
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    t.live.push_back(block.get());
    owner.block = block.release();
    return this_thread_counts = owner.block;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

void count(window_counter c, std::uint64_t delta) noexcept {
  const auto i = static_cast<std::size_t>(c);
  counter_block* b = this_thread_counts;
  if (!b) [[unlikely]]
    b = attach_counts();
  if (!b || b == thread_ended) [[unlikely]] {  // counted straight into the totals
    auto& t = totals();
    std::lock_guard lock(t.mutex);
    t.ended[i] += delta;
    return;
  }
  b->v[i].store(b->v[i].load(relaxed) + delta, relaxed);
}

std::uint64_t counted(window_counter c) noexcept {
  const auto i = static_cast<std::size_t>(c);
  auto& t = totals();
  std::lock_guard lock(t.mutex);
  std::uint64_t n = t.ended[i];
  for (const counter_block* b : t.live)
    n += b->v[i].load(relaxed);
  return n;
}

std::size_t windows_bound_to(const ibv_mr* mr) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.regions.find(mr);
  return it == r.regions.end() ? 0 : bound_in_locked(it->second);
}

std::size_t windows_bound_now() noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::size_t n = 0;
  for (const auto& [mr, cell] : r.regions)
    n += bound_in_locked(cell);
  return n;
}

void forget_region(const ibv_mr* mr) noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.regions.find(mr);
  if (it == r.regions.end()) return;
  region_cell* c = it->second;
  r.regions.erase(it);
  c->retired.store(true, std::memory_order_release);
  if (!c->first) delete c;
}

namespace {

/// A peer invalidated `w`'s live key through the queue pair it is bound through: records it. On `w`'s executor.
void accept_remote_invalidation(window_impl* w) noexcept {
  record_unbound(w);
  count(window_counter::remote_invalidations);
  if (w->on_remote_invalidation) w->on_remote_invalidation(w->hook_context);
}

/// On the window's executor: a foreign send-with-invalidate named the window of `context` whose binding word
/// was `binding`. If the window still has that binding, its key is dead (rxe) or must be killed (any device
/// that reported the invalidation): the window is replaced and its lease's hook told.
void settle_foreign_invalidation(ibv_context* context, std::uint64_t binding) noexcept {
  window_impl* w = nullptr;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.by_index.find({context, static_cast<std::uint32_t>(binding) >> 8});
    if (it != r.by_index.end() && it->second->binding.load(std::memory_order_acquire) == binding) w = it->second;
  }
  // Not bound any more (destroyed, or an invalidation or rebind in flight, whose failure replaces it): done.
  if (!w || w->state != window_state::bound) return;
  replace(w);
  if (w->on_remote_invalidation) w->on_remote_invalidation(w->hook_context);
}

}  // namespace

error_code note_remote_invalidation(ibv_context* context, std::uint32_t rkey, std::uint32_t qp_num) noexcept {
  window_impl* w = nullptr;
  ibv_context* owner = context;  // the context of the window named (another of the same device, if need be)
  std::uint64_t binding = 0;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.by_index.find({context, rkey >> 8});
    if (it != r.by_index.end()) {
      w = it->second;
      binding = w->binding.load(std::memory_order_acquire);
    }
    if (!w || static_cast<std::uint32_t>(binding) != rkey || binding == 0) {
      // Not a live key of this context. A device that checks neither queue pair nor protection domain (rxe)
      // may have killed a live window of another context of the same device: find it (rare path, O(windows)).
      w = nullptr;
      binding = 0;
      for (const auto& [index, other] : r.by_index) {
        if (index.first == context || index.second != rkey >> 8 || !index.first ||
            index.first->device != context->device)
          continue;
        const std::uint64_t b = other->binding.load(std::memory_order_acquire);
        if (b != 0 && static_cast<std::uint32_t>(b) == rkey) {
          w = other;
          owner = const_cast<ibv_context*>(index.first);
          binding = b;
          break;
        }
      }
    }
  }
  const auto through = static_cast<std::uint32_t>(binding >> 32);
  if (w && owner == context && through != 0 && through == qp_num) {
    // Bound through this queue pair, so used on this executor: it cannot have been freed meanwhile.
    if (w->state == window_state::bound) accept_remote_invalidation(w);
    return {};
  }
  // Anything else is an attack (or a peer's bug): a key of no live window, a stale key, a type-1 window, a
  // window bound through another queue pair, or one of another context.
  count(window_counter::foreign_invalidations);
  if (!w) return errc::foreign_remote_invalidation;
  // The window belongs to another queue pair's executor (perhaps another thread): settle it there. A type-1
  // window, or one whose queue pair is gone, belongs to none: settled here.
  const auto settle = [owner, binding] { settle_foreign_invalidation(owner, binding); };
  if (auto ex = through ? executor_of_qp(owner, through) : boost::asio::any_io_executor{}) {
    try {
      boost::asio::dispatch(ex, settle);  // runs here at once when this is that executor
    } catch (...) {
      std::fprintf(stderr,
                   "coverbs: out of memory while recording a foreign remote invalidation; window key %#x "
                   "stays on record as live\n",
                   rkey);
    }
  } else {
    settle();
  }
  return errc::foreign_remote_invalidation;
}

void forget_windows_bound_through(ibv_context* context, std::uint32_t qp_num) noexcept {
  if (qp_num == 0) return;  // QP0 is never an RC queue pair; 0 is what type-1 and unbound windows carry
  std::vector<window_impl*> bound;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& [index, w] : r.by_index)
      if (index.first == context && w->binding.load(std::memory_order_acquire) >> 32 == qp_num) try {
          bound.push_back(w);
        } catch (...) {  // out of memory: this one keeps its key (a later invalidation of it is still foreign
        }               // once the queue pair is destroyed, see unlink_windows_from)
  }
  for (window_impl* w : bound) {
    if (w->state != window_state::bound) continue;
    replace(w);  // deallocated and allocated anew: the key is dead on any device
    if (w->on_remote_invalidation) w->on_remote_invalidation(w->hook_context);
  }
}

void unlink_windows_from(ibv_context* context, std::uint32_t qp_num) noexcept {
  if (qp_num == 0) return;
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& [index, w] : r.by_index) {
    if (index.first != context) continue;
    std::uint64_t b = w->binding.load(std::memory_order_acquire);
    // A compare-exchange: the window's executor may store a new binding meanwhile, which then stands.
    while (b >> 32 == qp_num && !w->binding.compare_exchange_weak(b, b & 0xffffffffu, std::memory_order_acq_rel))
      ;
  }
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

error_code prepare_bind(queue_pair_impl* q, wr_node& n, window_impl* w, ibv_mr* mr, access region_rights,
                        window_range range, access rights, bool rebind) {
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

error_code prepare_invalidate(queue_pair_impl* q, wr_node& n, window_impl* w) {
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

error_code prepare_invalidate_rkey(queue_pair_impl* q, wr_node& n, std::uint32_t rkey) {
  window_impl* w = find_bound(q->qp_->context, rkey);
  if (!w) return errc::rkey_not_a_window;
  return prepare_invalidate(q, n, w);
}

namespace {

bool device_has(ibv_context* context, window_type type, error_code& ec) {
  auto& r = registry();
  unsigned long long flags = 0;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.cap_flags.find(context);
    if (it != r.cap_flags.end()) flags = it->second;
  }
  if (!flags) {
    ibv_device_attr attr{};
    ec = verbs_status_result(ibv_query_device(context, &attr));
    if (ec) return false;
    flags = attr.device_cap_flags | (1ull << 63);  // the top bit marks "queried"
    std::lock_guard lock(r.mutex);
    r.cap_flags[context] = flags;
  }
  switch (type) {
  case window_type::type1: return flags & IBV_DEVICE_MEM_WINDOW;
  case window_type::type2: return flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  case window_type::type2a: return flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A;
  case window_type::type2b: return flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  }
  return false;
}

}  // namespace
}  // namespace detail

window_counters window_statistics() noexcept {
  using detail::counted;
  using c = detail::window_counter;
  window_counters s;
  s.windows_allocated = counted(c::windows_allocated);
  s.windows_bound = detail::windows_bound_now();
  s.binds = counted(c::binds);
  s.binds_failed = counted(c::binds_failed);
  s.invalidations = counted(c::invalidations);
  s.remote_invalidations = counted(c::remote_invalidations);
  s.foreign_invalidations = counted(c::foreign_invalidations);
  s.windows_replaced = counted(c::windows_replaced);
  s.leases_granted = counted(c::leases_granted);
  s.leases_expired = counted(c::leases_expired);
  s.leases_revoked = counted(c::leases_revoked);
  return s;
}

memory_window::memory_window(protection_domain& pd, window_type type, error_code& ec) noexcept {
  ec = {};
  if (!pd) {
    ec = errno_code(EBADF);
    return;
  }
  if (!detail::device_has(pd.context(), type, ec)) {
    if (!ec) ec = errc::mw_type_unsupported;
    return;
  }
  const window_type kind = type == window_type::type1 ? window_type::type1 : window_type::type2;
  ibv_mw* mw = ibv_alloc_mw(pd.native_handle(), detail::verbs_type(kind));
  ec = verbs_null_result(mw);
  if (ec) return;
  auto* w = new (std::nothrow) detail::window_impl;
  if (!w) {
    ibv_dealloc_mw(mw);
    ec = errno_code(ENOMEM);
    return;
  }
  w->mw = mw;
  w->pd = pd.native_handle();
  w->type = kind;
  detail::count(detail::window_counter::windows_allocated);
  impl_.reset(w);
  try {
    detail::file_window(w);
  } catch (const std::bad_alloc&) {
    impl_.reset();
    ec = errno_code(ENOMEM);
  }
}

memory_window::memory_window(protection_domain& pd, window_type type) {
  error_code ec;
  *this = memory_window(pd, type, ec);
  if (ec) {
    static const char* const names[] = {"type 1", "type 2", "type 2A", "type 2B"};
    throw system_error(ec, std::string("ibv_alloc_mw(") + names[static_cast<int>(type)] + ")");
  }
}

window_type memory_window::type() const noexcept { return impl_ ? impl_->type : window_type::type2; }
window_state memory_window::state() const noexcept { return impl_ ? impl_->state : window_state::unbound; }
remote_key memory_window::key() const noexcept { return impl_ ? impl_->key : remote_key{}; }
access memory_window::rights() const noexcept { return impl_ ? impl_->rights : access::none; }
std::uint32_t memory_window::rkey() const noexcept { return impl_ && impl_->mw ? impl_->mw->rkey : 0; }
ibv_pd* memory_window::pd() const noexcept { return impl_ ? impl_->pd : nullptr; }
ibv_mw* memory_window::native_handle() const noexcept { return impl_ ? impl_->mw : nullptr; }

bool memory_window::note_remote_invalidation(std::uint32_t rkey) noexcept {
  if (!impl_ || !impl_->mw || impl_->state != window_state::bound || impl_->key.rkey != rkey) return false;
  detail::accept_remote_invalidation(impl_.get());
  return true;
}

}  // namespace coverbs
