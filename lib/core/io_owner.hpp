#pragma once
// Private to lib/: how an object that keeps itself alive through pending operations survives the
// destruction of its execution context.
//
// Asio destroys an io_context in two passes: every service's shutdown(), newest first, then every
// service's destruction, newest first. Pending operations are destroyed during those passes — some of
// them (the io_uring service's) only in the second, after the timer service is gone. An object kept
// alive by such an operation (its handler holds a shared_ptr) dies there, and its own timers and
// descriptors would then be destroyed against freed services. So every such object enrolls with the
// context's `io_owner_registry`, a service of ours whose shutdown() — in the first pass, while every
// service is still alive — asks each enrolled object to destroy its I/O objects. Whatever destroys the
// object later touches no service.

#include <coverbs/outstanding_work.hpp>

#include <boost/asio/execution_context.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace coverbs::detail {

class io_owner;

/// What the registry service and the enrolled objects share: it outlives both.
struct io_owner_set {
  std::recursive_mutex mutex;  // a hook may destroy other owners, which withdraw on the same thread
  std::set<io_owner*> owners;
  bool shut_down = false;
};

/// Base of an object that owns Asio I/O objects of one execution context and may outlive it.
class io_owner {
public:
  io_owner(const io_owner&) = delete;
  io_owner& operator=(const io_owner&) = delete;

  /// The context is shutting down (its services are still alive): destroy every timer and descriptor
  /// now (cancel, release, reset), run no handler. Called at most once, on the thread destroying the
  /// context. Afterwards the object must not create I/O objects again.
  virtual void on_context_shutdown() noexcept = 0;

  /// True once the context shut down: no new waits may be started.
  /// Atomic: a message may be released from another thread while the context shuts down (inbound_message.hpp).
  bool context_gone() const noexcept { return gone_.load(std::memory_order_acquire); }

  /// Adds to `out` what this object holds outstanding now (nothing when idle): outstanding_work.hpp. Called
  /// on a thread that runs the context, or while none does.
  virtual void describe_work(std::vector<work_holder>& out) const { (void)out; }

protected:
  io_owner() = default;
  ~io_owner() { withdraw(); }

  /// Enrolls with `ctx`'s registry. Call once the I/O objects exist (then the registry is newer than
  /// their services, and is shut down before them).
  void enroll(boost::asio::execution_context& ctx);
  /// Leaves the registry (the destructor does it too).
  void withdraw() noexcept;

private:
  friend class io_owner_registry;
  std::shared_ptr<io_owner_set> set_;
  std::atomic<bool> gone_{false};
};

/// Every object enrolled with `ctx`'s registry, asked `describe_work` in turn (none when no object ever
/// enrolled: the registry is not created for the question).
void describe_owners(boost::asio::execution_context& ctx, std::vector<work_holder>& out);

}  // namespace coverbs::detail
