#pragma once
// Internal: the library's implementation types, declared for the public headers that hold them by pointer,
// and the one door through which the library and coverbs' own templates reach an I/O object's
// implementation. Not part of the public API.

namespace coverbs::detail {

class cq_impl;
class pool_state;
class queue_pair_impl;
class shared_receive_queue_impl;
class window_impl;
struct wr_node;

/// Destroys a window's implementation (defined in the library: a bound window may outlive its owner).
struct window_impl_deleter {
  void operator()(window_impl* w) const noexcept;
};

/// What the library and coverbs' templates may do with a public I/O object that its users may not: reach
/// its implementation, and initiate an operation kind (`detail/ops/`) on it. The objects befriend this
/// struct instead of exposing a public `impl()` or a public extension point.
struct impl_access {
  /// The implementation behind `object` (null for a moved-from object).
  template <class IoObject>
  static auto* get(const IoObject& object) noexcept {
    return object.impl_.get();
  }
  /// Initiates the operation `op` (a type of `detail/ops/`) on `object` with `token`.
  template <class IoObject, class Token, class Op>
  static auto initiate(IoObject& object, Token&& token, Op op) {
    return object.initiate(static_cast<Token&&>(token), static_cast<Op&&>(op));
  }
};

/// `impl_access::get(object)`.
template <class IoObject>
auto* impl_of(const IoObject& object) noexcept {
  return impl_access::get(object);
}

}  // namespace coverbs::detail
