#pragma once
// Private to lib/: device queries on a raw context, shared by device and queue_pair.
#include <coverbs/device.hpp>

namespace coverbs::detail {
port_attributes query_port(ibv_context* context, std::uint8_t port);
std::vector<gid_entry> query_gids(ibv_context* context, std::uint8_t port);
gid_entry default_gid(ibv_context* context, std::uint8_t port);
}  // namespace coverbs::detail
