#include "core/io_owner.hpp"

namespace coverbs::detail {

/// The service of one execution context that tells its enrolled objects it is shutting down.
class io_owner_registry : public boost::asio::execution_context::service {
public:
  using key_type = io_owner_registry;
  static boost::asio::execution_context::id id;

  explicit io_owner_registry(boost::asio::execution_context& ctx)
      : service(ctx), set_(std::make_shared<io_owner_set>()) {}

  std::shared_ptr<io_owner_set> set() const { return set_; }

private:
  void shutdown() override {
    std::lock_guard lock(set_->mutex);
    set_->shut_down = true;
    // One at a time: a hook may destroy other owners (they leave the set as they go).
    while (!set_->owners.empty()) {
      io_owner* o = *set_->owners.begin();
      set_->owners.erase(set_->owners.begin());
      o->gone_.store(true, std::memory_order_release);
      o->on_context_shutdown();
    }
  }

  std::shared_ptr<io_owner_set> set_;
};

boost::asio::execution_context::id io_owner_registry::id;

void io_owner::enroll(boost::asio::execution_context& ctx) {
  auto set = boost::asio::use_service<io_owner_registry>(ctx).set();
  std::lock_guard lock(set->mutex);
  if (set->shut_down) {
    gone_.store(true, std::memory_order_release);
    return;
  }
  set->owners.insert(this);
  set_ = std::move(set);
}

void io_owner::withdraw() noexcept {
  auto set = std::move(set_);  // outlives the lock: it may hold the last reference
  if (!set) return;
  std::lock_guard lock(set->mutex);
  set->owners.erase(this);
}

void describe_owners(boost::asio::execution_context& ctx, std::vector<work_holder>& out) {
  if (!boost::asio::has_service<io_owner_registry>(ctx)) return;
  const auto set = boost::asio::use_service<io_owner_registry>(ctx).set();
  std::lock_guard lock(set->mutex);
  for (const io_owner* o : set->owners)
    o->describe_work(out);
}

}  // namespace coverbs::detail
