#include <coverbs/error.hpp>

#include <sys/resource.h>

#include <cerrno>
#include <string>

namespace coverbs {
namespace {

class wc_category_impl final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coverbs.wc"; }
  std::string message(int ev) const override;
};

std::string wc_category_impl::message(int ev) const {
  switch (static_cast<wc_errc>(ev)) {
  case wc_errc::success: return "success";
  case wc_errc::loc_len_err:
    return "local length error (IBV_WC_LOC_LEN_ERR): a receive buffer is too small for the incoming message, "
           "or a send exceeds the port's maximum message size";
  case wc_errc::loc_qp_op_err:
    return "local QP operation error (IBV_WC_LOC_QP_OP_ERR): the work request is inconsistent with the queue "
           "pair (wrong opcode for its type or state, too many scatter/gather entries, inline data too long)";
  case wc_errc::loc_eec_op_err: return "local EE context operation error (IBV_WC_LOC_EEC_OP_ERR)";
  case wc_errc::loc_prot_err:
    return "local protection error (IBV_WC_LOC_PROT_ERR): a local buffer's lkey is invalid, in another "
           "protection domain, or the buffer lies outside its region";
  case wc_errc::wr_flush_err:
    return "work request flushed (IBV_WC_WR_FLUSH_ERR): the queue pair entered the error state before this "
           "request ran; an earlier completion carries the cause";
  case wc_errc::mw_bind_err:
    return "memory window bind error (IBV_WC_MW_BIND_ERR): the region lacks mw_bind, the rights exceed the "
           "region's, the range is outside it, or the window's rkey was not advanced (IBA C10-72..C10-75)";
  case wc_errc::bad_resp_err:
    return "bad response (IBV_WC_BAD_RESP_ERR): unexpected transport-layer opcode from the responder";
  case wc_errc::loc_access_err:
    return "local access error (IBV_WC_LOC_ACCESS_ERR): the local region does not allow this access "
           "(e.g. an RDMA read or receive into a region without local_write)";
  case wc_errc::rem_inv_req_err:
    return "remote invalid request (IBV_WC_REM_INV_REQ_ERR): the responder rejected the request: opcode not "
           "allowed on its queue pair, message too long, or a misaligned atomic";
  case wc_errc::rem_access_err:
    return "remote access error (IBV_WC_REM_ACCESS_ERR): the rkey is invalid, revoked or from another "
           "protection domain, the range lies outside its region or window, or it lacks the right for this "
           "operation (remote_read / remote_write / remote_atomic)";
  case wc_errc::rem_op_err:
    return "remote operation error (IBV_WC_REM_OP_ERR): the responder could not complete the operation";
  case wc_errc::retry_exc_err:
    return "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR): the peer did not answer; it is gone, "
           "its queue pair is not in RTR/RTS, or the address (GID, QP number) is wrong";
  case wc_errc::rnr_retry_exc_err:
    return "receiver-not-ready retries exceeded (IBV_WC_RNR_RETRY_EXC_ERR): the peer had no receive posted";
  case wc_errc::loc_rdd_viol_err: return "local RDD violation (IBV_WC_LOC_RDD_VIOL_ERR)";
  case wc_errc::rem_inv_rd_req_err: return "remote invalid RD request (IBV_WC_REM_INV_RD_REQ_ERR)";
  case wc_errc::rem_abort_err: return "remote aborted (IBV_WC_REM_ABORT_ERR)";
  case wc_errc::inv_eecn_err: return "invalid EE context number (IBV_WC_INV_EECN_ERR)";
  case wc_errc::inv_eec_state_err: return "invalid EE context state (IBV_WC_INV_EEC_STATE_ERR)";
  case wc_errc::fatal_err: return "fatal error (IBV_WC_FATAL_ERR): the device reported a fatal error";
  case wc_errc::resp_timeout_err: return "response timeout (IBV_WC_RESP_TIMEOUT_ERR)";
  case wc_errc::general_err: return "general error (IBV_WC_GENERAL_ERR): the provider reported an unspecified failure";
  case wc_errc::tm_err: return "tag matching error (IBV_WC_TM_ERR)";
  case wc_errc::tm_rndv_incomplete: return "tag matching rendezvous incomplete (IBV_WC_TM_RNDV_INCOMPLETE)";
  }
  return "unknown work completion status " + std::to_string(ev);
}

class coverbs_category_impl final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coverbs"; }
  std::string message(int ev) const override;
  boost::system::error_condition default_error_condition(int ev) const noexcept override;
};

/// "8 MiB" / "unlimited": RLIMIT_MEMLOCK's soft limit now.
std::string memlock_limit_string() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return "unknown";
  if (lim.rlim_cur == RLIM_INFINITY) return "unlimited";
  const auto kib = static_cast<unsigned long long>(lim.rlim_cur) / 1024;
  return kib % 1024 == 0 ? std::to_string(kib / 1024) + " MiB" : std::to_string(kib) + " KiB";
}

boost::system::error_condition coverbs_category_impl::default_error_condition(int ev) const noexcept {
  using boost::system::errc::make_error_condition;
  namespace sys = boost::system::errc;
  switch (static_cast<errc>(ev)) {
  case errc::memlock_exhausted: return make_error_condition(sys::not_enough_memory);
  case errc::rights_need_local_write:
  case errc::empty_buffer:
  case errc::invalid_registration: return make_error_condition(sys::invalid_argument);
  case errc::buffer_not_mapped:
  case errc::mw_bind_needs_writable_memory: return make_error_condition(sys::bad_address);
  case errc::device_limit_exceeded: return make_error_condition(sys::invalid_argument);
  case errc::userfaultfd_unavailable: return make_error_condition(sys::operation_not_permitted);
  case errc::datagram_too_long: return make_error_condition(sys::message_size);
  case errc::invalid_qkey:
  case errc::address_handle_mismatch:
  case errc::qkey_mismatch: return make_error_condition(sys::invalid_argument);
  case errc::queue_pair_not_ready: return make_error_condition(sys::not_connected);
  case errc::datagram_truncated: return make_error_condition(sys::message_size);
  case errc::invalid_destination_qp:
  case errc::srq_transport_mismatch: return make_error_condition(sys::invalid_argument);
  case errc::message_too_large: return make_error_condition(sys::message_size);
  case errc::endpoint_closed: return make_error_condition(sys::not_connected);
  case errc::bulk_too_large: return make_error_condition(sys::message_size);
  case errc::bad_bulk_descriptor: return make_error_condition(sys::invalid_argument);
  case errc::not_a_session_connection: return make_error_condition(sys::invalid_argument);
  case errc::session_idle: return make_error_condition(sys::timed_out);
  default: return {ev, *this};
  }
}

std::string coverbs_category_impl::message(int ev) const {
  switch (static_cast<errc>(ev)) {
  case errc::no_device:
    return "no RDMA device: this kernel has no RDMA support or no RDMA device is configured; to use Soft-RoCE "
           "without hardware, run the program inside the project's guest: tools/rxe-vm -- PROGRAM [ARGS]";
  case errc::device_not_found: return "no RDMA device has that name (list them with `coverbs devices` or ibv_devices)";
  case errc::invalid_port: return "port number out of range (ports are numbered 1 .. device_caps::phys_port_cnt)";
  case errc::no_usable_gid: return "the port has no valid GID (on RoCE: give its network device an IP address)";
  case errc::mw_type_unsupported:
    return "the device does not support this memory-window type (device_caps::mw_type1 / mw_type2a / mw_type2b)";
  case errc::range_outside_region: return "the range lies outside the memory region (IBA C10-75)";
  case errc::access_exceeds_region:
    return "the window asks for a right its memory region was not registered with: a window's rights must be a "
           "subset of those the region allows (IBA memory windows), so the bind was refused before posting; compare "
           "the bind's rights with memory_region::rights(), and register the region with every remote right its "
           "windows may grant";
  case errc::unspecified_verbs_failure: return "a verb failed without reporting a reason (errno was 0)";
  case errc::cq_overcommitted:
    return "the completion queue is too small for another queue pair: its depth must cover the max_send_wr + "
           "max_recv_wr of every queue pair using it (raise completion_queue_options::depth)";
  case errc::remote_range_too_small:
    return "the remote key covers fewer bytes than the operation moves (check remote_key::length, or slice the "
           "local buffer)";
  case errc::misaligned_atomic: return "atomic operations need an 8-byte aligned remote address (IBA o9-21)";
  case errc::buffer_too_small:
    return "the local buffer is too small for the operation (atomics need 8 bytes for the old value)";
  case errc::atomics_unsupported: return "the device does not support atomic operations (device_caps::atomics)";
  case errc::message_too_long:
    return "the message is longer than the port carries: a send, write or read at most the port's max_msg_sz "
           "(ibv_port_attr::max_msg_sz, queue_pair::max_message_size(): 8 MiB on Soft-RoCE), a receive at most "
           "2^31 bytes; nothing was posted and the queue pair stays usable: split the transfer into operations of "
           "at most that size";
  case errc::region_lacks_mw_bind:
    return "the memory region was registered without mw_bind, so no window can be bound to it (IBA C10-73)";
  case errc::window_needs_local_write:
    return "the window asks for remote_write or remote_atomic, and its memory region lacks local_write, which "
           "those rights need (IBA C10-74); the bind was refused before posting: register the region with "
           "access::local_write (over writable memory), or bind with remote_read only";
  case errc::zero_length_window:
    return "a window cannot be bound to zero bytes (type 2: IBA o10-37.2.40); to revoke a key, invalidate it";
  case errc::pd_mismatch:
    return "the memory window, the queue pair and the memory region must belong to one protection domain "
           "(IBA C10-72)";
  case errc::window_still_bound:
    return "the type-2 window is still bound (IBA o10-37.2.30): invalidate it first, or use rebind_mw, which "
           "posts invalidate + bind as one chain";
  case errc::window_busy: return "a bind or invalidation of this window is still in flight";
  case errc::window_access_invalid:
    return "a window grants only remote_read, remote_write and remote_atomic (zero_based and local rights are "
           "not window rights)";
  case errc::rkey_not_a_window:
    return "the rkey is not the current key of a memory window bound through coverbs (invalidate the window "
           "object, or the key was already revoked)";
  case errc::region_has_bound_windows:
    return "the memory region still has memory windows bound to it (IBA 10.6.7.2.6): invalidate them before "
           "deregistering";
  case errc::window_pool_exhausted:
    return "the window pool has no free window and may not allocate more (raise window_pool_options::max_windows)";
  case errc::lease_expired: return "the window lease reached its time-to-live; its key has been invalidated";
  case errc::memlock_exhausted:
    return "cannot pin the memory (ibv_reg_mr: ENOMEM after retries): the locked-memory limit RLIMIT_MEMLOCK is " +
           memlock_limit_string() +
           " and pinned memory counts against it (processes without CAP_IPC_LOCK); raise it (ulimit -l, "
           "limits.conf memlock, systemd LimitMEMLOCK=) or register less; otherwise the device is out of resources";
  case errc::rights_need_local_write:
    return "ibv_reg_mr: EINVAL: argument `rights` asks for remote_write or remote_atomic without local_write "
           "(add access::local_write)";
  case errc::empty_buffer: return "ibv_reg_mr: EINVAL: argument `buffer` is empty (register at least one byte)";
  case errc::invalid_registration:
    return "ibv_reg_mr: EINVAL: the device rejected argument `rights` or the length of argument `buffer` "
           "(check device_caps and the rights the device supports)";
  case errc::buffer_not_mapped:
    return "ibv_reg_mr: EFAULT: argument `buffer` is not entirely mapped memory of this process, or it is "
           "read-only while `rights` include a right for which the kernel pins pages writable (local_write, "
           "remote_write, remote_atomic or mw_bind): register mapped, writable memory, or register read-only "
           "memory with remote_read and no write rights";
  case errc::userfaultfd_unavailable:
    return "userfaultfd(2) was refused, so unmapped memory cannot be detected: allow it with "
           "`sysctl vm.unprivileged_userfaultfd=1`, CAP_SYS_PTRACE, or access to /dev/userfaultfd; until then "
           "invalidate cached registrations explicitly";
  case errc::pool_exhausted:
    return "the buffer pool has no free block of that size and may not grow (pool_options::max_arenas), or the "
           "size exceeds its largest size class (pool_options::size_classes)";
  case errc::address_resolution_failed:
    return "address resolution failed (RDMA_CM_EVENT_ADDR_ERROR): no RDMA device reaches that address, or the host "
           "did not answer (ARP/ND) within the resolve timeout";
  case errc::route_resolution_failed: return "route resolution failed (RDMA_CM_EVENT_ROUTE_ERROR)";
  case errc::connection_refused:
    return "connection refused (RDMA_CM_EVENT_REJECTED): nobody listens on that port, or the server rejected the "
           "request";
  case errc::connection_unreachable:
    return "connection unreachable (RDMA_CM_EVENT_UNREACHABLE): the peer did not answer the connection request";
  case errc::connection_failed:
    return "the connection could not be established (RDMA_CM_EVENT_CONNECT_ERROR)";
  case errc::connection_reset: return "the peer disconnected (RDMA_CM_EVENT_DISCONNECTED)";
  case errc::disconnected: return "the connection was disconnected by this side";
  case errc::device_removed: return "the RDMA device was removed (RDMA_CM_EVENT_DEVICE_REMOVAL)";
  case errc::invalid_address: return "not a numeric IPv4 or IPv6 address";
  case errc::invalid_port_number: return "not a port number (a decimal number in 1..65535)";
  case errc::device_mismatch:
    return "the protection domain or completion queue is on another RDMA device than the one rdma_cm chose for "
           "this connection (create them on connection::get_device() / listener::get_device())";
  case errc::private_data_too_long:
    return "connection private data too long (at most 56 bytes with a request, 196 with a reply)";
  case errc::request_abandoned:
    return "the connection request was abandoned by its requester before it was accepted (it waited in the "
           "listener's backlog past the requester's connect timeout, or was withdrawn; rdma_cm answers EINVAL): "
           "the listener skips it; keep an accept pending so requests are taken promptly";
  case errc::loopback_address:
    return "rdma_cm cannot reach a loopback or wildcard address (127.0.0.0/8, ::1, 0.0.0.0, ::) on this device: "
           "RoCE and rxe route through the IP interface the RDMA device sits on, never through the loopback one; "
           "connect to that interface's address (e.g. 10.77.0.1 for rxe0 on veth0), even on the same host";
  case errc::link_local_needs_scope:
    return "an IPv6 link-local address (fe80::/10) names no interface by itself: append the interface the RDMA "
           "device sits on (e.g. fe80::1%veth0), or use a global or IPv4 address of that interface";
  case errc::port_error:
    return "the port went down (IBV_EVENT_PORT_ERR: link down or cable pulled), so the queue pair was moved to the "
           "error state and its operations flushed; connect again once the port is active";
  case errc::device_fatal:
    return "the RDMA device reported a fatal error (IBV_EVENT_DEVICE_FATAL); every queue pair on it was moved to "
           "the error state: close the device and open it again";
  case errc::qp_fatal:
    return "the device reported a catastrophic error of the queue pair (IBV_EVENT_QP_FATAL); replace the queue pair";
  case errc::qp_request_error:
    return "the device reported an invalid request on the queue pair (IBV_EVENT_QP_REQ_ERR: e.g. an opcode the "
           "peer's queue pair does not support); replace the queue pair";
  case errc::qp_access_error:
    return "the device reported a local access violation on the queue pair (IBV_EVENT_QP_ACCESS_ERR: e.g. an "
           "incoming RDMA access it does not allow); replace the queue pair";
  case errc::cq_error:
    return "a completion queue of the queue pair reported an error (IBV_EVENT_CQ_ERR: overrun or a device fault), "
           "so the queue pair was moved to the error state";
  case errc::device_events_busy:
    return "another device_events object already reads this device's asynchronous events (a device has one "
           "reader: share that object, or open the device again)";
  case errc::device_limit_exceeded:
    return "a requested size exceeds the device's limit (the text before this names the option, the value and the "
           "limit; ibv_query_device(3) reports max_qp_wr, max_sge, max_cqe and the rd_atom limits): lower the option to "
           "the limit";
  case errc::mw_bind_needs_writable_memory:
    return "ibv_reg_mr: EFAULT: `rights` include mw_bind, and argument `buffer` is read-only memory: the kernel "
           "pins memory writable for mw_bind (a window bound later may grant remote write), so read-only memory "
           "cannot carry windows; register it without mw_bind (remote_read alone, and hand out the region's "
           "rkey), or register writable memory";
  case errc::receive_queue_is_shared:
    return "the queue pair is attached to a shared receive queue (queue_pair_options::srq): post its receives "
           "with shared_receive_queue::async_recv, which reports the queue pair a message arrived on (qp_num)";
  case errc::srq_cq_mismatch:
    return "a queue pair attached to a shared receive queue must use the SRQ's completion queue as its receive "
           "completion queue (completions of SRQ receives arrive there): create the queue pair (or set "
           "connection_options::cq) with the completion queue the shared_receive_queue was created on";
  case errc::foreign_remote_invalidation:
    return "the peer sent a send-with-invalidate naming the rkey of a memory window that was not bound through "
           "this queue pair (a type-2 window may be invalidated only through the queue pair it is bound to): "
           "the request is refused and counted (window_statistics().foreign_invalidations); treat the peer as "
           "hostile and end its connection";
  case errc::monitor_lost_in_fork:
    return "the process was forked from the one that made the registration cache; userfaultfd(2) does not "
           "follow fork(2), so this cache cannot see memory being unmapped here and its handles report only "
           "what was applied before the fork: make a new registration_cache in the child";
  case errc::too_many_spans:
    return "the operation names more registered spans than one work request of this queue pair takes "
           "(queue_pair_options::max_send_sge for sends, writes and reads, max_recv_sge for receives, and at most "
           "max_spans_per_operation = 8): create the queue pair with a larger max_send_sge / max_recv_sge (up "
           "to the device's max_sge, device_caps), or copy the pieces into fewer registered buffers";
  case errc::executor_mismatch:
    return "the completion queue is serviced by another executor than the queue pair or connection using it: "
           "a queue pair's send and receive queues, and a connection's connection_options::cq, must be on the "
           "executor the connection is accepted or connected on (with a loop_pool, use that member's cq and "
           "executor, e.g. member::connection_options())";
  case errc::datagram_too_long:
    return "the datagram is longer than the path MTU (datagram_queue_pair::max_datagram_size(), the port's active "
           "MTU; 1024 bytes on Soft-RoCE over Ethernet): a UD message is one packet, and the device would drop a "
           "longer one while reporting success (IBA C10-93.1.1); nothing was posted and the queue pair stays "
           "usable: split the payload into datagrams of at most max_datagram_size() bytes";
  case errc::invalid_qkey:
    return "the Q_Key has bit 31 set: such a destination Q_Key makes the device send the queue pair's own Q_Key "
           "instead (IBA 10.2.5), and a queue pair's own is reserved for privileged ones; nothing was posted: use "
           "the Q_Key the peer's queue pair has (datagram_queue_pair::qkey(), or rdma_cm's), below 0x80000000";
  case errc::address_handle_mismatch:
    return "the datagram's destination names no address handle, or one created in another protection domain "
           "than the queue pair's (IBA C10-10); nothing was posted: create the address_handle in the queue "
           "pair's protection domain and keep it alive until the send completes";
  case errc::qkey_mismatch:
    return "the queue pair's Q_Key is not rdma_cm's (0x01234567, RDMA_UDP_QKEY): rdma_cm answers a resolution "
           "over IP addresses with that Q_Key whatever the queue pair has, so peers' datagrams would be dropped by "
           "the device; create the datagram queue pairs a datagram_listener answers with "
           "datagram_options::qkey = rdma_cm_udp_qkey (the default)";
  case errc::queue_pair_not_ready:
    return "the queue pair is not ready to send: it has not reached RTS since it was created or reset (a send, "
           "write, read, atomic or window operation needs RTS); connect it first "
           "(queue_pair::connect / connect_pair, or through rdma_cm: async_connect, listener::async_accept) — "
           "nothing was posted";
  case errc::datagram_truncated:
    return "a datagram longer than the receive's buffers arrived: its first bytes are in them, the rest was "
           "dropped (the queue pair is healthy); post receives of datagram_queue_pair::max_datagram_size() bytes "
           "to get whole datagrams";
  case errc::invalid_destination_qp:
    return "the destination's queue pair number is above 0xFFFFFF (IBA queue pair numbers have 24 bits; the "
           "device would send to its low 24 bits): use the number the peer reported (qp_num(), a received "
           "sender, or rdma_cm's resolution) — nothing was posted";
  case errc::srq_transport_mismatch:
    return "the shared receive queue serves the other transport: datagram (UD) queue pairs need one made with "
           "srq_options::datagram = true (each receive gets coverbs' 40-byte GRH slot in front of its span), RC "
           "queue pairs one made without it; create a shared receive queue per transport";
  case errc::message_too_large:
    return "the message is longer than the endpoint's slots (message_options::slot_size; "
           "message_endpoint::diagnostic() names both sizes): nothing was posted and the endpoint stays usable; "
           "send at most slot_size() bytes, make the slots larger on both sides, or move the payload by RDMA "
           "read or write";
  case errc::protocol_violation:
    return "the peer broke the messaging protocol (bad magic or type, a length above the slot size or different "
           "from what arrived, a reply no call awaits, more credits returned than granted; "
           "message_endpoint::diagnostic() says which): the endpoint failed and every pending operation with "
           "it; close it and disconnect the peer";
  case errc::credit_overrun:
    return "the peer sent more messages than it had credits for (receives this side posted and reported): "
           "it ignores flow control; the endpoint failed and every pending operation with it; close it and "
           "disconnect the peer";
  case errc::endpoint_closed:
    return "the message endpoint was closed (or moved from): nothing was posted; make a new endpoint on a "
           "connected queue pair";
  case errc::bulk_too_large:
    return "the bulk descriptor names more bytes than this side allows (a region longer than the local span to "
           "read it into, or a span longer than the region to write it to): nothing was posted and the queue pair "
           "stays healthy; refuse the request, or read or write it in parts";
  case errc::bad_bulk_descriptor:
    return "the message does not start with a bulk descriptor (shorter than bulk_descriptor::wire_size, a wrong "
           "magic, unknown rights), or the descriptor lacks the right the transfer needs (remote_read to read the "
           "region, remote_write to write into it): nothing was posted";
  case errc::session_handler_threw:
    return "the session's coroutine ended with an exception that carries no error code (session_report::diagnostic "
           "holds its what()): the session was closed; throw system_error to report a reason of your own";
  case errc::not_a_session_connection:
    return "the connection holds no message endpoint made before it was established (connection::prepared()): "
           "connect with async_connect_session or accept with async_serve, whose session_options make one";
  case errc::session_idle:
    return "nothing (no message, no credit update) was received or sent on the session for "
           "server_options::idle_timeout: the server ended the session and closed it; raise the timeout, or have "
           "the peer call or send more often";
  }
  return "unknown coverbs error " + std::to_string(ev);
}

}  // namespace

const boost::system::error_category& wc_category() noexcept {
  static const wc_category_impl category;
  return category;
}

const boost::system::error_category& coverbs_category() noexcept {
  static const coverbs_category_impl category;
  return category;
}

namespace {
error_code from_errno(int err) noexcept {
  return err == 0 ? make_error_code(errc::unspecified_verbs_failure) : errno_code(err);
}
}  // namespace

error_code verbs_null_result(const void* result) noexcept {
  return result != nullptr ? error_code{} : from_errno(errno);
}

error_code verbs_status_result(long rc) noexcept {
  if (rc == 0) return {};
  return errno_code(static_cast<int>(rc < 0 ? -rc : rc));
}

error_code verbs_errno_result(long rc) noexcept { return rc >= 0 ? error_code{} : from_errno(errno); }

error_code verbs_rereg_result(int rc, bool& region_still_valid) noexcept {
  region_still_valid = !(rc == IBV_REREG_MR_ERR_DONT_FORK_NEW || rc == IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW);
  if (rc == 0) return {};
  const int err = errno;
  return from_errno(err != 0 ? err : (rc == IBV_REREG_MR_ERR_INPUT ? EINVAL : 0));
}

}  // namespace coverbs
