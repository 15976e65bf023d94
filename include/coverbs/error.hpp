#pragma once
/// @file
/// The error layer: every failure coverbs reports is a `boost::system::error_code` (the type Asio
/// completion handlers receive) in one of three categories:
///  - `wc_errc`: the status of a failed work completion (`ibv_wc_status`), values equal to the verbs enum;
///  - `errc`: conditions the library itself detects (no device, a bad bind request, ...);
///  - `boost::system::system_category()`: an errno from the kernel or a provider.
///
/// rdma-core reports failure in four ways; the `verbs_*` functions below are the only place in coverbs
/// that translates them, so the rest of the library never reads `errno` itself:
///  1. returns `NULL` and sets errno        — ibv_open_device, ibv_alloc_pd, ibv_reg_mr, ibv_create_qp ...
///  2. returns an errno value (0 = success) — ibv_modify_qp, ibv_query_port, ibv_post_send, ibv_dereg_mr ...
///  3. returns -1 and sets errno            — ibv_get_cq_event, ibv_query_gid, the rdma_* calls of librdmacm
///  4. returns a negative errno             — ibv_query_gid_table, ibv_query_gid_ex
/// and `ibv_rereg_mr` returns a negative `ibv_rereg_mr_err_code` with errno set (see `verbs_rereg_result`).
///
/// @par Thread Safety
/// Everything here is safe to call from any thread.

#include <coverbs/config.hpp>  // first: checks this translation unit's Asio flags against the library's

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <infiniband/verbs.h>

#include <string>
#include <type_traits>

namespace coverbs {

using error_code = boost::system::error_code;
using system_error = boost::system::system_error;

/// The status of a work completion (`ibv_wc::status`) as an error code. Values equal `ibv_wc_status`,
/// so `wc_errc(wc.status)` is a plain conversion. Messages say what the IBA status means and what
/// usually causes it.
enum class wc_errc : int {
  success = IBV_WC_SUCCESS,
  loc_len_err = IBV_WC_LOC_LEN_ERR,
  loc_qp_op_err = IBV_WC_LOC_QP_OP_ERR,
  loc_eec_op_err = IBV_WC_LOC_EEC_OP_ERR,
  loc_prot_err = IBV_WC_LOC_PROT_ERR,
  wr_flush_err = IBV_WC_WR_FLUSH_ERR,
  mw_bind_err = IBV_WC_MW_BIND_ERR,
  bad_resp_err = IBV_WC_BAD_RESP_ERR,
  loc_access_err = IBV_WC_LOC_ACCESS_ERR,
  rem_inv_req_err = IBV_WC_REM_INV_REQ_ERR,
  rem_access_err = IBV_WC_REM_ACCESS_ERR,
  rem_op_err = IBV_WC_REM_OP_ERR,
  retry_exc_err = IBV_WC_RETRY_EXC_ERR,
  rnr_retry_exc_err = IBV_WC_RNR_RETRY_EXC_ERR,
  loc_rdd_viol_err = IBV_WC_LOC_RDD_VIOL_ERR,
  rem_inv_rd_req_err = IBV_WC_REM_INV_RD_REQ_ERR,
  rem_abort_err = IBV_WC_REM_ABORT_ERR,
  inv_eecn_err = IBV_WC_INV_EECN_ERR,
  inv_eec_state_err = IBV_WC_INV_EEC_STATE_ERR,
  fatal_err = IBV_WC_FATAL_ERR,
  resp_timeout_err = IBV_WC_RESP_TIMEOUT_ERR,
  general_err = IBV_WC_GENERAL_ERR,
  tm_err = IBV_WC_TM_ERR,
  tm_rndv_incomplete = IBV_WC_TM_RNDV_INCOMPLETE,
};

/// Conditions coverbs detects itself, before or instead of asking the device.
enum class errc : int {
  /// No RDMA device: the kernel has no RDMA support or no device is configured.
  no_device = 1,
  /// A device was asked for by a name that no device has.
  device_not_found,
  /// The port number is outside 1..phys_port_cnt.
  invalid_port,
  /// The port has no GID usable for RoCE v2 / IB addressing.
  no_usable_gid,
  /// The device does not support the requested memory-window type (device_caps says which it has).
  mw_type_unsupported,
  /// A range lies (partly) outside the memory region it refers to (IBA C10-75 for windows).
  range_outside_region,
  /// Rights were asked for that the memory region does not grant (a window's rights are the
  /// intersection of its own and its region's, so coverbs refuses rights the region cannot give).
  access_exceeds_region,
  /// A verb failed without saying why (it returned failure and left errno at 0).
  unspecified_verbs_failure,
  /// A completion queue cannot hold the completions of another queue pair's queues.
  cq_overcommitted,
  /// A one-sided operation needs more bytes than the remote key covers.
  remote_range_too_small,
  /// An atomic operation's remote address is not 8-byte aligned (IBA o9-21).
  misaligned_atomic,
  /// A local buffer is smaller than the operation needs (atomics: 8 bytes).
  buffer_too_small,
  /// The device has no atomic operations (device_caps::atomics == none).
  atomics_unsupported,
  /// A message is longer than the port carries: a send, write or read above the port's `max_msg_sz`
  /// (`queue_pair::max_message_size()`; 8 MiB on Soft-RoCE), a receive above 2^31 bytes (IBA).
  message_too_long,
  /// A window bind names a region registered without mw_bind (IBA C10-73).
  region_lacks_mw_bind,
  /// A remote-write or remote-atomic window over a region without local_write (IBA C10-74).
  window_needs_local_write,
  /// A bind of zero bytes: type-2 windows cannot be bound to nothing (IBA o10-37.2.40); coverbs refuses it
  /// for type 1 too (to revoke a type-1 window's key, invalidate it).
  zero_length_window,
  /// The window, the queue pair and the region are not all in one protection domain (IBA C10-72).
  pd_mismatch,
  /// A plain bind of a type-2 window that is still bound (IBA o10-37.2.30): invalidate it first, or rebind.
  window_still_bound,
  /// Another bind or invalidation of this window has not completed yet.
  window_busy,
  /// A window's rights may only be remote_read, remote_write and remote_atomic.
  window_access_invalid,
  /// An rkey that is not the current key of any window coverbs knows.
  rkey_not_a_window,
  /// A region cannot be deregistered while memory windows are bound to it (IBA 10.6.7.2.6).
  region_has_bound_windows,
  /// A window pool has handed out as many windows as its bound allows.
  window_pool_exhausted,
  /// A window lease reached its time-to-live; its key has been invalidated.
  lease_expired,

  // --- registration (registration_service.hpp); each compares equal to the errno it refines ---
  /// ibv_reg_mr answered ENOMEM after every retry. The message prints RLIMIT_MEMLOCK (read when the
  /// message is made). Equivalent to `boost::system::errc::not_enough_memory`.
  memlock_exhausted,
  /// ibv_reg_mr EINVAL: argument `rights` asks for remote_write or remote_atomic without local_write.
  /// Equivalent to `boost::system::errc::invalid_argument`.
  rights_need_local_write,
  /// ibv_reg_mr EINVAL: argument `buffer` is empty. Equivalent to `invalid_argument`.
  empty_buffer,
  /// ibv_reg_mr EINVAL for another reason (a right the device rejects, a length over the device's limit).
  /// Equivalent to `invalid_argument`.
  invalid_registration,
  /// ibv_reg_mr EFAULT: argument `buffer` is not (all) mapped memory of this process, or is read-only
  /// while `rights` asks for a write right. Equivalent to `boost::system::errc::bad_address`.
  buffer_not_mapped,
  /// The userfaultfd(2) system call was refused, so the registration cache cannot see memory being
  /// unmapped; the message says how to allow it. Equivalent to `operation_not_permitted`.
  userfaultfd_unavailable,
  /// A buffer_pool has no block of the requested size and may not map another arena (max_arenas), or the
  /// size exceeds its largest size class.
  pool_exhausted,

  // --- connections (cm.hpp) ---
  /// rdma_cm could not resolve the address (RDMA_CM_EVENT_ADDR_ERROR).
  address_resolution_failed,
  /// rdma_cm could not resolve a route (RDMA_CM_EVENT_ROUTE_ERROR).
  route_resolution_failed,
  /// The peer rejected the connection request: nobody listens on that port, or the server refused
  /// (RDMA_CM_EVENT_REJECTED).
  connection_refused,
  /// The peer did not answer the connection request or reply (RDMA_CM_EVENT_UNREACHABLE).
  connection_unreachable,
  /// The connection could not be established (RDMA_CM_EVENT_CONNECT_ERROR).
  connection_failed,
  /// The peer disconnected (RDMA_CM_EVENT_DISCONNECTED).
  connection_reset,
  /// The connection was disconnected by this side.
  disconnected,
  /// The RDMA device went away (RDMA_CM_EVENT_DEVICE_REMOVAL).
  device_removed,
  /// An address is not a numeric IPv4 or IPv6 address.
  invalid_address,
  /// A port number is not a decimal number in 1..65535.
  invalid_port_number,
  /// A protection domain or completion queue lives on another device than the connection's.
  device_mismatch,
  /// Connection private data exceeds what the transport carries (56 bytes in a request, 196 in a reply).
  private_data_too_long,
  /// A connection request whose requester gave up before it was accepted (it waited in the listener's
  /// backlog past the requester's timeout, or was withdrawn): rdma_cm answers EINVAL for it. Listeners skip
  /// such requests (`listener_stats::abandoned`).
  request_abandoned,
  /// A connect to a loopback or wildcard address (127.0.0.0/8, ::1, 0.0.0.0, ::) the device could not
  /// resolve or route: RoCE and rxe reach peers through an IP interface, never through the loopback one.
  loopback_address,
  /// An IPv6 link-local address (fe80::/10) without its interface ("%eth0"): it names no device by itself.
  link_local_needs_scope,

  // --- device events (device_events.hpp): the causes `queue_pair::error()` reports ---
  /// The queue pair's port went down (IBV_EVENT_PORT_ERR); the runtime moved it to the error state.
  port_error,
  /// The device reported a fatal error (IBV_EVENT_DEVICE_FATAL); the runtime moved it to the error state.
  device_fatal,
  /// The device reported a catastrophic error of the queue pair (IBV_EVENT_QP_FATAL).
  qp_fatal,
  /// The device reported an invalid request on the queue pair (IBV_EVENT_QP_REQ_ERR).
  qp_request_error,
  /// The device reported a local access violation on the queue pair (IBV_EVENT_QP_ACCESS_ERR).
  qp_access_error,
  /// A completion queue of the queue pair reported an error (IBV_EVENT_CQ_ERR).
  cq_error,
  /// Another `device_events` object already reads this device's events.
  device_events_busy,
  /// A queue pair's completion queues, or a connection's `connection_options::cq`, are serviced by another
  /// executor than the one the queue pair or connection is bound to (executors compared with `==`).
  executor_mismatch,

  // --- shared receive queues (shared_receive_queue.hpp) ---
  /// `queue_pair::async_recv` on a queue pair attached to a shared receive queue: its receives are posted
  /// with `shared_receive_queue::async_recv`.
  receive_queue_is_shared,
  /// A queue pair attached to a shared receive queue (`queue_pair_options::srq`) must use the SRQ's
  /// completion queue as its receive completion queue.
  srq_cq_mismatch,

  // --- limits of the device ---
  /// A requested size exceeds the device's limit: a queue pair's max_send_wr / max_recv_wr (max_qp_wr),
  /// max_send_sge / max_recv_sge (max_sge), max_rd_atomic / max_dest_rd_atomic (max_qp_init_rd_atom /
  /// max_qp_rd_atom), max_inline_data, a completion queue's depth (max_cqe), a shared receive queue's max_wr
  /// (max_srq_wr) or max_sge (max_srq_sge). The
  /// exception's text names the option, the value asked for and the device's limit. Equivalent to
  /// `boost::system::errc::invalid_argument` (the verb's EINVAL).
  device_limit_exceeded,
  /// ibv_reg_mr EFAULT: `rights` include mw_bind, for which the kernel pins the pages writable (a window may
  /// later grant remote write), and argument `buffer` is mapped read-only. Equivalent to `bad_address`.
  mw_bind_needs_writable_memory,

  // --- remote invalidation (queue_pair.hpp, shared_receive_queue.hpp) ---
  /// A peer's send-with-invalidate named an rkey that is not the live key of a memory window bound through
  /// the queue pair the message arrived on — another queue pair's, a type-1 window's, a window of another
  /// context of the device, or no live window at all (IBA: a type-2 window may be invalidated only through
  /// the queue pair it is bound to). The receive completes with this error and `window_statistics().foreign_invalidations`
  /// counts it; devices that do not check the rule (rxe) have already invalidated the window, which the
  /// runtime then records as revoked. Treat the peer as hostile.
  foreign_remote_invalidation,

  // --- registration cache (registration_cache.hpp) ---
  /// `registration_cache::monitor_status()` in a process forked from the one that made the cache:
  /// userfaultfd(2) does not follow fork(2), so the cache cannot see memory being unmapped in the child and
  /// its handles report only what was applied before the fork. Make a new registration_cache in the child.
  monitor_lost_in_fork,

  // --- scatter-gather (queue_pair.hpp) ---
  /// An operation named more registered spans than one work request of the queue pair takes: more than
  /// `queue_pair_options::max_send_sge` (sends, writes, reads) or `max_recv_sge` (receives), or more than
  /// `max_spans_per_operation`. Refused before posting; the queue pair stays healthy.
  too_many_spans,

  // --- datagrams (datagram_queue_pair.hpp, address_handle.hpp) ---
  /// A datagram longer than the path MTU (`datagram_queue_pair::max_datagram_size()`, the port's active MTU:
  /// 1024 bytes on Soft-RoCE over a 1500-byte Ethernet MTU). A UD message is one packet; the device would drop
  /// it and report success (IBA C10-93.1.1), so it is refused before posting; the queue pair stays healthy.
  /// Equivalent to `boost::system::errc::message_size` (EMSGSIZE).
  datagram_too_long,
  /// A Q_Key with bit 31 set: a send's destination Q_Key (the device would silently use the queue pair's own
  /// instead, IBA 10.2.5) or `datagram_options::qkey` (reserved for privileged queue pairs). Refused before
  /// posting or creating. Equivalent to `boost::system::errc::invalid_argument`.
  invalid_qkey,
  /// A datagram's destination names no address handle, or one of another protection domain than the queue
  /// pair's (IBA C10-10). Refused before posting. Equivalent to `boost::system::errc::invalid_argument`.
  address_handle_mismatch,
  /// A `datagram_listener` was given a queue pair whose Q_Key is not rdma_cm's (`rdma_cm_udp_qkey`): over IP
  /// addresses rdma_cm answers every resolution with that Q_Key, whatever the queue pair's, so peers would
  /// send datagrams its device drops. Equivalent to `boost::system::errc::invalid_argument`.
  qkey_mismatch,
  /// A send-queue operation (send, write, read, atomic, bind, invalidate) on a queue pair that has not reached
  /// RTS since it was made or last reset: connect it first (`queue_pair::connect`, `connect_pair`, or an
  /// rdma_cm connection). Refused before posting, so nothing reaches the device and the queue pair stays as it
  /// was; receives are not affected. Equivalent to `boost::system::errc::not_connected` (ENOTCONN).
  queue_pair_not_ready,
  /// A datagram longer than the receive's spans arrived: its first bytes are in them (`received_datagram::bytes`
  /// is the spans' size), the rest went to a scratch area coverbs appends to every receive shorter than
  /// `max_datagram_size()`, so the queue pair stays healthy (rxe would otherwise fail the receive with
  /// loc_qp_op_err and move the queue pair every peer shares to the error state). Post receives of
  /// `max_datagram_size()` bytes to get whole datagrams. Equivalent to `boost::system::errc::message_size`.
  datagram_truncated,
  /// A datagram destination whose queue pair number does not fit IBA's 24 bits (above 0xFFFFFF; the device
  /// would send to the number's low 24 bits). Refused before posting. Equivalent to
  /// `boost::system::errc::invalid_argument`.
  invalid_destination_qp,
  /// A queue pair attached to a shared receive queue of the other transport: a datagram queue pair on an SRQ
  /// made without `srq_options::datagram`, or an RC queue pair on one made with it (a datagram's 40-byte GRH
  /// would land in the caller's buffer, or an RC message in coverbs' GRH slot). Refused when the queue pair is
  /// created. Equivalent to `boost::system::errc::invalid_argument`.
  srq_transport_mismatch,

  // --- messaging (message_endpoint.hpp) ---
  /// A message longer than the endpoint's slot (`message_options::slot_size`) was handed to `async_call`,
  /// `async_reply` or `async_send_message`. Refused before posting; the endpoint and its queue pair stay
  /// healthy. `message_endpoint::diagnostic()` names both sizes. Equivalent to
  /// `boost::system::errc::message_size` (EMSGSIZE).
  message_too_large,
  /// The peer broke the wire protocol: a message too short for the header, a wrong magic or version, an
  /// unknown type, a payload length above the slot size or different from what arrived, a reply nobody
  /// called for, more credits returned than were granted. The endpoint fails: every pending operation
  /// completes with this error; `message_endpoint::diagnostic()` says what arrived. Treat the peer as hostile.
  protocol_violation,
  /// The peer sent more messages than the credits it was granted (the receives this side has posted and
  /// reported): a peer that ignores flow control. The endpoint fails as for `protocol_violation`.
  credit_overrun,
  /// An operation on a `message_endpoint` that was closed (or moved from). Nothing was posted.
  endpoint_closed,

  // --- sessions (session.hpp, session_server.hpp) ---
  /// A session's coroutine ended with an exception that carries no error code (not a `system_error`): what
  /// `session_report::reason` says then; `session_report::diagnostic` holds its `what()`.
  session_handler_threw,
  /// A `session` was made from a connection that holds no message endpoint made before it was established
  /// (`connection::prepared()`): connect or accept it with `session_options` (`async_connect_session`,
  /// `async_serve`). Equivalent to `boost::system::errc::invalid_argument`.
  not_a_session_connection,
  /// Nothing (no message, no credit update) was received or sent on the session for
  /// `server_options::idle_timeout`: the server ended the session (its coroutine's pending operation was cancelled) and closed it. Equivalent to
  /// `boost::system::errc::timed_out`.
  session_idle,

  // --- bulk transfers (bulk.hpp) ---
  /// A bulk descriptor (bulk.hpp) names more bytes than this side allows: `async_bulk_read` of a region longer
  /// than the local span, `async_bulk_write` of a span longer than the region. Refused before posting; the queue
  /// pair stays healthy. Equivalent to `boost::system::errc::message_size` (EMSGSIZE).
  bulk_too_large,
  /// A message that should start with a bulk descriptor does not (too short, wrong magic, unknown rights), or
  /// the descriptor lacks the right the transfer needs (remote_read to read it, remote_write to write into it).
  /// Refused before posting. Equivalent to `boost::system::errc::invalid_argument`.
  bad_bulk_descriptor,
};

/// The category of `wc_errc` values; name "coverbs.wc".
const boost::system::error_category& wc_category() noexcept;
/// The category of `errc` values; name "coverbs".
const boost::system::error_category& coverbs_category() noexcept;

inline error_code make_error_code(wc_errc e) noexcept { return {static_cast<int>(e), wc_category()}; }
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), coverbs_category()}; }

/// The error code of a work completion's status (`ibv_wc::status`); success for IBV_WC_SUCCESS.
inline error_code make_error_code(ibv_wc_status status) noexcept {
  return status == IBV_WC_SUCCESS ? error_code{} : make_error_code(static_cast<wc_errc>(status));
}

/// An errno value as an error code in the system category (0 → success).
inline error_code errno_code(int err) noexcept {
  return err == 0 ? error_code{} : error_code{err, boost::system::system_category()};
}

// --- the translation of rdma-core's conventions (see the file comment) ---

/// Convention 1: a verb that returns a pointer, NULL on failure with errno set. Reads errno, so call
/// it right after the verb. @returns success when `result` is not null.
error_code verbs_null_result(const void* result) noexcept;

/// Convention 2 and 4: a verb that returns 0 on success, else an errno value (positive, or negative
/// as some providers and the gid-table calls do). A negative count-style result is never passed here.
error_code verbs_status_result(long rc) noexcept;

/// Convention 3: a verb that returns -1 (or any negative) on failure and sets errno. Reads errno.
error_code verbs_errno_result(long rc) noexcept;

/// `ibv_rereg_mr`: 0, or a negative `ibv_rereg_mr_err_code` with errno set. The errno is reported
/// (EOPNOTSUPP where the provider cannot rereg, as rxe); `region_still_valid` tells whether the old
/// registration survived (false for IBV_REREG_MR_ERR_DONT_FORK_NEW / _CMD_AND_DO_FORK_NEW).
error_code verbs_rereg_result(int rc, bool& region_still_valid) noexcept;

/// Throws `system_error(ec, what)` when `ec` is an error. `what` names the verb and its arguments.
inline void throw_on_error(const error_code& ec, const std::string& what) {
  if (ec) throw system_error(ec, what);
}

}  // namespace coverbs

template <>
struct boost::system::is_error_code_enum<coverbs::wc_errc> : std::true_type {};
template <>
struct boost::system::is_error_code_enum<coverbs::errc> : std::true_type {};
