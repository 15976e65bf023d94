#pragma once
// A software verbs device for the native overhead bench and its unit-test twin: runs coverbs' real data
// path on any host, with no RDMA device and no kernel. Not part of the installed library.
//
// The seam, in two halves:
// - Data path: libibverbs' ibv_post_send, ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq are static inline
//   functions of <infiniband/verbs.h> that call through `ctx->ops` (struct ibv_context_ops) of the object's
//   context. soft_verbs::device is an ibv_context whose ops complete every work request at once, in the
//   calling thread: a write or send copies its bytes and pushes a successful completion on the send CQ
//   (and, for a send, a receive completion on the peer's receive CQ); a type-2 window bind (IBV_WR_BIND_MW)
//   or an invalidation (IBV_WR_LOCAL_INV) only completes. Keys are handed out but never checked:
//   ibv_reg_mr describes the memory and registers nothing; ibv_alloc_mw (type 2) gives a window a key.
// - Control path: ibv_create_cq, ibv_create_qp, ibv_create_comp_channel, ibv_get_cq_event... are library
//   functions that reach the provider through libibverbs' private tables (or the kernel). soft_verbs.cpp
//   defines them, so an executable linking it (and only such an executable) binds coverbs' calls to those
//   definitions instead of libibverbs' (ELF symbol interposition: the executable's definitions come first).
//   They accept only objects of a soft_verbs::device; such an executable cannot use a real device.
// The library itself is unchanged: coverbs::device::adopt takes the software context like any other.
//
// Completion events: req_notify_cq arms the CQ; a completion pushed on an armed CQ queues an event on its
// channel and makes the channel's eventfd readable (written only when the channel's queue goes from empty to
// non-empty: one system call per wake-up, not per completion, as a NIC raises them without the CPU);
// ibv_get_cq_event takes one event, and empties the eventfd with the last.
//
// Single-threaded: every call on one device comes from one thread.

#include <infiniband/verbs.h>

#include <cstdint>

namespace soft_verbs {

class device {
public:
  device();
  ~device();
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  /// The software context: pass to coverbs::device::adopt.
  ibv_context* context() noexcept;

  /// The next `count` send-queue work requests complete with `status` (e.g. IBV_WC_REM_ACCESS_ERR) instead
  /// of success; as on a NIC, the queue pair then enters the error state and what follows is flushed
  /// (IBV_WC_WR_FLUSH_ERR).
  void fail_next(ibv_wc_status status, int count = 1) noexcept;

  /// Work requests posted on send queues / receive queues since creation.
  std::uint64_t sends_posted() const noexcept;
  std::uint64_t recvs_posted() const noexcept;
  /// The most work requests outstanding on one send queue at once (posted, completion not yet polled).
  std::uint32_t max_send_outstanding() const noexcept;
  /// Completion events queued on channels (each one arm followed by a completion).
  std::uint64_t events_raised() const noexcept;

  struct state;

private:
  state* s_;
};

}  // namespace soft_verbs
