// A passive cm_id: created, bound (with what to do when that fails) and listening.

#include "cm/listen.hpp"

#include <coverbs/error.hpp>

#include "cm/address.hpp"

namespace coverbs::detail {

listen_endpoint parse_listen_endpoint(std::string_view address, std::uint16_t port) {
  if (address.empty()) address = "0.0.0.0";
  listen_endpoint at;
  at.text = std::string(address) + ":" + std::to_string(port);
  throw_on_error(parse_endpoint(address, port, at.address), "listener(" + at.text + ")");
  return at;
}

void listen_on(rdma_event_channel* channel, void* context, rdma_port_space ps, listen_endpoint& at, int backlog,
               rdma_cm_id*& id) {
  throw_on_error(verbs_errno_result(rdma_create_id(channel, &id, context, ps)), "rdma_create_id");
  if (const error_code ec = verbs_errno_result(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&at.address)))) {
    // The errno alone (EADDRNOTAVAIL, EADDRINUSE) leaves a user guessing; keep it, and say what to do.
    std::string what = "rdma_bind_addr(" + at.text + ")";
    if (ec == boost::system::errc::address_not_available)
      what += ": no RDMA device has this address; listen on the address of an RDMA-capable interface "
              "(`coverbs devices` lists each device's addresses) or on \"\" for all of them";
    else if (ec == boost::system::errc::address_in_use)
      what += ": another listener holds this port; choose another port, or 0 for one the system picks "
              "(listener::local_port() tells which)";
    throw system_error(ec, what);
  }
  throw_on_error(verbs_errno_result(rdma_listen(id, backlog)), "rdma_listen(" + at.text + ")");
}

}  // namespace coverbs::detail
