// The public `multicast_membership`: its accessors and leaving, over `multicast_impl`.

#include <coverbs/multicast.hpp>

#include "cm/multicast_impl.hpp"

#include <algorithm>
#include <iterator>

namespace coverbs {

multicast_membership detail::cm_access::make_membership(std::shared_ptr<multicast_impl> impl) noexcept {
  return multicast_membership(std::move(impl));
}

multicast_membership& multicast_membership::operator=(multicast_membership&& other) noexcept {
  if (this != &other) {
    leave();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

multicast_membership::~multicast_membership() { leave(); }

void multicast_membership::leave() noexcept {
  if (impl_) impl_->leave();
  impl_.reset();
}

datagram_destination multicast_membership::destination() const noexcept {
  return impl_ ? datagram_destination{&impl_->ah_, 0xFFFFFF, impl_->qkey_} : datagram_destination{};
}

gid multicast_membership::group() const noexcept {
  gid g;
  if (impl_) std::copy(std::begin(impl_->mgid_.raw), std::end(impl_->mgid_.raw), g.raw.begin());
  return g;
}

std::uint32_t multicast_membership::qkey() const noexcept { return impl_ ? impl_->qkey_ : 0; }
error_code multicast_membership::error() const noexcept { return impl_ ? impl_->error_ : error_code{}; }

}  // namespace coverbs
