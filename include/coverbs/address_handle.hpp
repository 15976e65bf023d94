#pragma once
/// @file
/// `address_handle`: the owner of an `ibv_ah`, the path to one peer port that a datagram send names
/// (`datagram_destination`, datagram_queue_pair.hpp). Made from rdma_cm's attributes, from a GID and a port,
/// or from a received datagram's sender, to answer it.
///
/// On RoCE the kernel resolves the peer's Ethernet address inside `ibv_create_ah` (the neighbour table): for
/// a host it has not talked to yet, the constructor may block for up to ARP's timeout (about 3 s on Linux),
/// on whatever thread runs it. Make handles ahead of the traffic, or once per peer and keep them (cache them
/// by GID); rdma_cm's resolution ARPs before it hands out attributes.

#include <coverbs/device.hpp>
#include <coverbs/error.hpp>
#include <coverbs/received.hpp>

#include <infiniband/verbs.h>

#include <cstdint>

namespace coverbs {

class protection_domain;

/// How an `address_handle` made from a GID reaches it.
struct address_options {
  int gid_index = -1;              ///< the local (source) GID's index; -1: device::default_gid(port)
  std::uint8_t sl = 0;             ///< service level
  std::uint8_t traffic_class = 0;  ///< the GRH's traffic class (RoCE: the IP header's DSCP/ECN byte)
  std::uint8_t hop_limit = 64;     ///< the GRH's hop limit (RoCE: the IP TTL)
  std::uint16_t lid = 0;           ///< the destination LID: InfiniBand only, ignored on RoCE
};

/// Move-only owner of an address handle (`ibv_create_ah` / `ibv_destroy_ah`).
///
/// Lifetime: its protection domain outlives it, and it outlives every send naming it (like the registered
/// memory a send reads): destroying it while such a send is posted is undefined at the device.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: an address handle is immutable once made, so any queue pair of
/// its protection domain may name it, on any loop; moving and destruction are unsafe while it is in use.
class address_handle {
public:
  /// An empty handle (`native_handle() == nullptr`).
  address_handle() noexcept = default;

  /// Creates a handle from raw attributes, e.g. those rdma_cm reports for a datagram peer.
  /// @throws system_error with the errno of ibv_create_ah(3), naming the destination GID.
  address_handle(protection_domain& pd, const ibv_ah_attr& attr);
  /// Creates a handle to the port with GID `to`, sent from `port`'s GID `options.gid_index` (global routing:
  /// a GRH, as RoCE always needs). @throws system_error as above, `errc::no_usable_gid` for a gid_index the
  /// port does not have, or the errno of ibv_query_port(3) / ibv_query_gid_table(3).
  address_handle(protection_domain& pd, const gid& to, std::uint8_t port = 1, const address_options& options = {});
  /// Creates a handle to a received datagram's sender (the reply path): its GID, LID and service level, from
  /// `port`'s GID `gid_index` (-1: the default, looked up in the GID table per call; pass
  /// `datagram_queue_pair::local_gid().index` to skip that). What ibv_init_ah_from_wc(3) makes, without its
  /// search of the GID table for the datagram's destination GID. @throws system_error as above.
  address_handle(protection_domain& pd, const datagram_sender& from, std::uint8_t port = 1, int gid_index = -1);

  address_handle(address_handle&& other) noexcept;
  address_handle& operator=(address_handle&& other) noexcept;
  address_handle(const address_handle&) = delete;
  address_handle& operator=(const address_handle&) = delete;
  ~address_handle();

  /// The underlying `ibv_ah`; still owned by this object.
  ibv_ah* native_handle() const noexcept { return ah_; }
  explicit operator bool() const noexcept { return ah_ != nullptr; }
  /// The GID it reaches (zero for a handle without global routing, InfiniBand only).
  const gid& destination_gid() const noexcept { return to_; }
  /// The local port it sends from.
  std::uint8_t port() const noexcept { return port_; }

private:
  ibv_ah* ah_ = nullptr;
  gid to_;
  std::uint8_t port_ = 0;
};

}  // namespace coverbs
