// The datagram queue pair: a queue_pair_impl of type UD (the RC data path, with the three UD rules of
// qp_impl.hpp), brought to RTS without a peer.
#include <coverbs/datagram_queue_pair.hpp>
#include <coverbs/protection_domain.hpp>

#include "dataplane/cq_impl.hpp"
#include "dataplane/grh_slots.hpp"
#include "dataplane/qp_impl.hpp"

#include <string>

namespace coverbs {

namespace {

queue_pair_options rc_shaped(const datagram_options& o) {
  queue_pair_options q;
  q.max_send_wr = o.max_send_wr;
  q.max_recv_wr = o.max_recv_wr;
  q.max_send_sge = o.max_send_sge;
  q.max_recv_sge = o.max_recv_sge;
  q.max_inline_data = o.max_inline_data;
  q.port = o.port;
  q.gid_index = o.gid_index;
  q.srq = o.srq;
  return q;
}

std::string modify_what(const ibv_qp* qp, const std::string& transition) {
  return "ibv_modify_qp(" + transition + ", UD qp " + std::to_string(qp->qp_num) + ")";
}

}  // namespace

datagram_queue_pair::datagram_queue_pair(protection_domain& pd, completion_queue& cq, const datagram_options& options)
    : datagram_queue_pair(pd, cq, cq, options) {}

datagram_queue_pair::datagram_queue_pair(protection_domain& pd, completion_queue& send_cq, completion_queue& recv_cq,
                                         const datagram_options& options) {
  if (!pd) throw system_error(errno_code(EBADF), "datagram_queue_pair: the protection domain is not open");
  if (options.qkey & 0x80000000u)
    throw system_error(make_error_code(errc::invalid_qkey),
                       "datagram_options::qkey = " + std::to_string(options.qkey) + " (bit 31 set)");
  impl_ = std::make_unique<detail::queue_pair_impl>(pd.native_handle(), *detail::impl_of(send_cq),
                                                    *detail::impl_of(recv_cq), rc_shaped(options),
                                                    detail::qp_create{IBV_QPT_UD, options.qkey, options.pkey_index});
  io_executor_ = &impl_->send_cq_->executor_;
  error_code ec;
  if (const char* failed = ready_steps(ec)) throw_on_error(ec, modify_what(impl_->qp_, failed));
}

datagram_queue_pair::datagram_queue_pair(datagram_queue_pair&&) noexcept = default;
datagram_queue_pair& datagram_queue_pair::operator=(datagram_queue_pair&&) noexcept = default;
datagram_queue_pair::~datagram_queue_pair() = default;

const char* datagram_queue_pair::ready_steps(error_code& ec) noexcept {
  detail::queue_pair_impl& q = *impl_;
  auto modify = [&](ibv_qp_attr& attr, int mask) {
    ec = verbs_status_result(ibv_modify_qp(q.qp_, &attr, mask));
    return !ec;
  };
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.pkey_index = q.create_.pkey_index;
  init.port_num = q.options_.port;
  init.qkey = q.create_.qkey;
  if (!modify(init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return "RESET->INIT";
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  if (!modify(rtr, IBV_QP_STATE)) return "INIT->RTR";
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = q.psn_;
  if (!modify(rts, IBV_QP_STATE | IBV_QP_SQ_PSN)) return "RTR->RTS";
  q.note_state(IBV_QPS_RTS);
  return nullptr;
}

void datagram_queue_pair::reset() {
  std::string why;
  error_code ec = impl_->reset(&why);
  if (ec) throw system_error(ec, why.empty() ? modify_what(impl_->qp_, "->RESET") : why);
  if (const char* failed = ready_steps(ec)) throw_on_error(ec, modify_what(impl_->qp_, failed));
}

void datagram_queue_pair::reset(error_code& ec) noexcept {
  ec = impl_->reset(nullptr);
  if (!ec) (void)ready_steps(ec);
}

datagram_queue_pair::executor_type datagram_queue_pair::get_executor() const noexcept {
  return impl_->send_cq_->executor_;
}
ibv_qp* datagram_queue_pair::native_handle() const noexcept { return impl_ ? impl_->qp_ : nullptr; }
std::uint32_t datagram_queue_pair::qp_num() const noexcept { return impl_ ? impl_->qp_->qp_num : 0; }
metrics::queue_counters datagram_queue_pair::counters() const noexcept {
  return impl_ ? impl_->counts_.read() : metrics::queue_counters{};
}
std::uint32_t datagram_queue_pair::qkey() const noexcept { return impl_ ? impl_->create_.qkey : 0; }
gid_entry datagram_queue_pair::local_gid() const { return impl_->gid_; }
std::uint8_t datagram_queue_pair::port() const noexcept { return impl_ ? impl_->options_.port : 0; }
std::size_t datagram_queue_pair::max_datagram_size() const noexcept { return impl_ ? impl_->max_message_ : 0; }
std::uint32_t datagram_queue_pair::max_inline_data() const noexcept { return impl_ ? impl_->max_inline_ : 0; }
error_code datagram_queue_pair::error() const noexcept { return impl_ ? impl_->error_ : error_code{}; }
std::size_t datagram_queue_pair::sends_outstanding() const noexcept {
  return impl_ ? impl_->sq_.outstanding + impl_->batch_.size : 0;
}
std::size_t datagram_queue_pair::sends_waiting() const noexcept { return impl_ ? impl_->sq_.waiting.size : 0; }

ibv_qp_state datagram_queue_pair::state() const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  throw_on_error(verbs_status_result(ibv_query_qp(impl_->qp_, &attr, IBV_QP_STATE, &init)), "ibv_query_qp");
  return attr.qp_state;
}

}  // namespace coverbs
