#include "dataplane/ops/work_request.hpp"

#include <cstdint>

namespace coverbs::detail {

errc fill_recv(wr_node& n, const registered_span& buf) {
  if (buf.size() > max_message) return errc::message_too_long;
  n.is_recv = true;
  n.sge = buf.to_sge();
  ibv_recv_wr& wr = n.wr.recv;
  wr = ibv_recv_wr{};
  wr.wr_id = reinterpret_cast<std::uintptr_t>(&n);
  wr.sg_list = &n.sge;
  wr.num_sge = buf.size() ? 1 : 0;
  return {};
}

}  // namespace coverbs::detail
