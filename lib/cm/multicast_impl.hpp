#pragma once
// Private to lib/: a multicast membership and the join that makes it, on a UDP-port-space id of its own
// (`ud_id`): the group's address resolved, rdma_join_multicast, then on RDMA_CM_EVENT_MULTICAST_JOIN the
// group's address handle and ibv_attach_mcast. Once joined it keeps reading its id's events (a
// MULTICAST_ERROR or a device removal sets `error_`) until it leaves. The queue pair's executor only.

#include <coverbs/address_handle.hpp>
#include <coverbs/multicast.hpp>

#include "cm/ud_id.hpp"

#include <infiniband/verbs.h>

#include <sys/socket.h>

#include <cstdint>
#include <memory>

namespace coverbs::detail {

class multicast_impl final : public ud_id {
public:
  enum class phase { idle, resolving_address, joining, joined, done };

  using ud_id::ud_id;
  ~multicast_impl() override { leave(); }

  multicast_handler handler;  ///< the join, until it completes
  ibv_qp* qp_ = nullptr;  ///< the queue pair attached to the group (not owned)
  std::uint32_t qp_qkey_ = 0;
  sockaddr_storage group_{};
  phase phase_ = phase::idle;
  address_handle ah_;
  ibv_gid mgid_{};
  std::uint16_t mlid_ = 0;
  std::uint32_t qkey_ = 0;
  bool attached_ = false;  ///< ibv_attach_mcast succeeded
  error_code error_;

  /// Joining, or joined and healthy (after an error nothing more is read).
  bool expecting() const noexcept override { return phase_ != phase::done && !error_; }
  void on_event(const cm_event& e) override;
  /// Joining: the join completes with `ec` and nothing stays joined. Joined: the membership records `ec`.
  void fail(error_code ec, bool post) override;
  /// Detaches the queue pair, leaves the group, destroys the id. Idempotent.
  void leave() noexcept;
  /// Runs where the cancellation is emitted; fails a join in progress with `operation_aborted` on its executor.
  static void cancel(const std::weak_ptr<multicast_impl>& weak);
};

}  // namespace coverbs::detail
