#include "windows/remote_invalidation.hpp"

#include "events/qp_registry.hpp"
#include "windows/window_counters.hpp"
#include "windows/window_internal.hpp"
#include "windows/window_registry.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>

#include <cstdio>
#include <vector>

namespace coverbs::detail {

void accept_remote_invalidation(window_impl* w) noexcept {
  record_unbound(w);
  count(window_counter::remote_invalidations);
  if (w->on_remote_invalidation) w->on_remote_invalidation(w->hook_context, {});
}

namespace {

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
  if (w->on_remote_invalidation) w->on_remote_invalidation(w->hook_context, {});
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
    if (w->on_remote_invalidation) w->on_remote_invalidation(w->hook_context, boost::asio::error::operation_aborted);
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

}  // namespace coverbs::detail
