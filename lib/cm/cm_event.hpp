#pragma once
// Private to lib/: reading rdma_cm events. Each event is copied into a `cm_event` and acknowledged at once
// (rdma_ack_cm_event(3)), so rdma_destroy_id never waits for an unacknowledged one.

#include <coverbs/error.hpp>

#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace coverbs::detail {

/// What coverbs keeps of an event: copied, then the event is acknowledged at once.
struct cm_event {
  rdma_cm_event_type type{};
  int status = 0;
  rdma_cm_id* id = nullptr;
  std::vector<std::byte> private_data;
  std::uint8_t responder_resources = 0, initiator_depth = 0;
  /// An id of the UDP port space (RDMA_PS_UDP): the event's parameters were `param.ud` (CONNECT_REQUEST,
  /// ESTABLISHED after a service ID resolution, MULTICAST_JOIN), and `private_data` came from there.
  bool ud = false;
  /// UD only: the path to the peer (or the group), its queue pair number and its Q_Key.
  ibv_ah_attr ah_attr{};
  std::uint32_t ud_qp_num = 0, ud_qkey = 0;
};

/// Takes the next event; false when none is pending (`ec` empty) or the call failed (`ec` set).
bool next_event(rdma_event_channel* channel, cm_event& out, error_code& ec);

}  // namespace coverbs::detail
