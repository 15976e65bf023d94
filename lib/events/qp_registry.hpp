#pragma once
// Private to lib/: the process-wide registry of each device context's live coverbs queue pairs and shared
// receive queues, and of who reads its async events (one reader per context). A device event (port error,
// device fatal, ...) moves the affected queue pairs to the error state from whichever thread reads the
// events; a peer's remote invalidation finds the executor of another queue pair. Guarded by one mutex
// (qp_registry.cpp).

#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

namespace coverbs::detail {

class queue_pair_impl;
class shared_receive_queue_impl;

/// One live queue pair. `impl` is read and cleared under the registry mutex; `cause` is set before the
/// queue pair is moved to the error state; the other fields never change after registration.
struct qp_registration {
  ibv_context* context = nullptr;
  ibv_qp* qp = nullptr;
  std::uint8_t port = 0;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  boost::asio::any_io_executor executor;  // the queue pair's (its completion queues')
  queue_pair_impl* impl = nullptr;        // null once the queue pair is being destroyed
  /// The errc value of the device event that moved the queue pair to the error state (0: none). Its flush
  /// completions may reach the queue pair before the posted notification does: they read it here.
  std::atomic<int> cause{0};

  error_code pending_cause() const noexcept {
    const int c = cause.load();
    return c ? make_error_code(static_cast<errc>(c)) : error_code{};
  }
};

/// Called by a queue pair once its ibv_qp exists / first thing in its destruction. After
/// `unregister_qp` returns, no other thread touches the ibv_qp through the registry.
void register_qp(const std::shared_ptr<qp_registration>& entry);
void unregister_qp(const std::shared_ptr<qp_registration>& entry) noexcept;

/// Moves every registered queue pair of `context` that `match` selects to IBV_QPS_ERR (ibv_modify_qp,
/// under the registry mutex, so none is destroyed meanwhile), and posts to each one's executor a function
/// that records `cause` as its error and fails its operations waiting for a credit. @returns how many.
std::size_t fail_queue_pairs(ibv_context* context, const std::function<bool(const qp_registration&)>& match,
                             errc cause) noexcept;

/// The executor of the registered queue pair numbered `qp_num` of `context`; empty when none is (destroyed,
/// or not a coverbs queue pair). For work on another queue pair's objects (memory_window.cpp).
boost::asio::any_io_executor executor_of_qp(ibv_context* context, std::uint32_t qp_num) noexcept;

/// One reader of a context's async events at a time: false when it is taken.
bool claim_async_events(ibv_context* context) noexcept;
void release_async_events(ibv_context* context) noexcept;

/// On the queue pair's executor: the device reported `cause` (see fail_queue_pairs).
void qp_on_async_error(queue_pair_impl* qp, const error_code& cause);

/// Calls `on_qp` for every registered queue pair, then `on_srq` for every shared receive queue, whose object is
/// live (not being destroyed), under the registry mutex: for outstanding_work, on a thread that runs their
/// executors' context.
void visit_registered(const std::function<void(const queue_pair_impl&)>& on_qp,
                      const std::function<void(const shared_receive_queue_impl&)>& on_srq);

/// One live coverbs shared receive queue, so IBV_EVENT_SRQ_LIMIT_REACHED reaches it. `impl` is read and
/// cleared under the registry mutex; the other fields never change after registration.
struct srq_registration {
  ibv_context* context = nullptr;
  ibv_srq* srq = nullptr;
  boost::asio::any_io_executor executor;  // the SRQ's (its completion queue's)
  shared_receive_queue_impl* impl = nullptr;  // null once the SRQ is being destroyed
};
void register_srq(const std::shared_ptr<srq_registration>& entry);
void unregister_srq(const std::shared_ptr<srq_registration>& entry) noexcept;
/// Posts `srq_on_limit_reached` to the executor of the registered SRQ `srq` of `context`; false if none.
bool notify_srq_limit(ibv_context* context, ibv_srq* srq) noexcept;
/// On the SRQ's executor: IBV_EVENT_SRQ_LIMIT_REACHED arrived for it.
void srq_on_limit_reached(shared_receive_queue_impl* srq);

}  // namespace coverbs::detail
