// memory_window: allocation (ibv_alloc_mw(3), the device's window types) and the object's accessors.
#include <coverbs/memory_window.hpp>
#include <coverbs/protection_domain.hpp>

#include "windows/remote_invalidation.hpp"
#include "windows/window_counters.hpp"
#include "windows/window_internal.hpp"
#include "windows/window_registry.hpp"

#include <cerrno>
#include <mutex>
#include <new>
#include <string>

namespace coverbs {
namespace detail {
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
