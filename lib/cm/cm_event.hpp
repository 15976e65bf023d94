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
};

/// Takes the next event; false when none is pending (`ec` empty) or the call failed (`ec` set).
bool next_event(rdma_event_channel* channel, cm_event& out, error_code& ec);

}  // namespace coverbs::detail
