#pragma once
// Private to lib/: a passive cm_id — created, bound and listening (rdma_create_id, rdma_bind_addr,
// rdma_listen) — with what to do when binding fails spelled out. Shared by `listener` (RDMA_PS_TCP) and
// `datagram_listener` (RDMA_PS_UDP).

#include <rdma/rdma_cma.h>

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace coverbs::detail {

/// Where a listener binds, parsed, and as text for messages ("0.0.0.0:7174").
struct listen_endpoint {
  sockaddr_storage address{};
  std::string text;
};

/// `address` ("" for every device) and `port`, checked before any rdma_cm resource exists.
/// @throws system_error `errc::invalid_address`, `errc::link_local_needs_scope`
listen_endpoint parse_listen_endpoint(std::string_view address, std::uint16_t port);

/// Creates `id` (owned by the caller from then on, even when this throws) on `channel` in port space `ps`
/// with `context`, binds it to `at` and listens with `backlog`.
/// @throws system_error the errno of rdma_create_id / rdma_bind_addr (EADDRNOTAVAIL, EADDRINUSE: named with
/// what to do) / rdma_listen.
void listen_on(rdma_event_channel* channel, void* context, rdma_port_space ps, listen_endpoint& at, int backlog,
               rdma_cm_id*& id);

}  // namespace coverbs::detail
