// The atomic family: IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP.
#include <coverbs/detail/ops/atomic_op.hpp>

#include "dataplane/ops/work_request.hpp"
#include "dataplane/qp_impl.hpp"

#include <cstring>

namespace coverbs::detail {

errc atomic_op::prepare(queue_pair_impl* qp, wr_node& n) const {
  n.wr.send.opcode = opcode;  // the kind, before any refusal (metrics count a refused operation by it)
  if (!qp->atomics_) return errc::atomics_unsupported;
  if (result_buffer.size() < 8) return errc::buffer_too_small;
  if (remote.addr % 8 != 0) return errc::misaligned_atomic;
  if (remote.length < 8) return errc::remote_range_too_small;
  n.atomic_result = reinterpret_cast<std::uint64_t*>(result_buffer.data());
  ibv_send_wr& wr = fill_send(qp, n, result_buffer.subspan(0, 8), opcode);
  wr.wr.atomic.remote_addr = remote.addr;
  wr.wr.atomic.rkey = remote.rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return {};
}

std::uint64_t atomic_old_value(const wr_node& n) noexcept {
  std::uint64_t v = 0;
  if (n.atomic_result) std::memcpy(&v, n.atomic_result, sizeof v);
  return v;
}

// The initiating functions' one call into the library (qp_start.hpp): prepare, then start.
template void qp_start(queue_pair_impl*, wr_node*, const atomic_op&);

}  // namespace coverbs::detail
