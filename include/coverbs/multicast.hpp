#pragma once
/// @file
/// `async_join_multicast` and `multicast_membership`: a datagram queue pair joins a multicast group through
/// rdma_cm and receives what any member sends to it; the membership leaves the group when destroyed.
///
/// How: an id of rdma_cm's UDP port space resolves the group's address (from `multicast_options::source_address`,
/// which picks the device), joins it (rdma_join_multicast(3): on RoCE an IGMP/MLD join and the MGID
/// `::ffff:a.b.c.d` for an IPv4 group; on InfiniBand the subnet administrator's), and the queue pair is attached
/// to the group (ibv_attach_mcast(3)). A datagram sent to `destination()` (queue pair number 0xFFFFFF, the
/// group's Q_Key) reaches every attached queue pair — on Soft-RoCE the sender's own too, when it is attached.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/address_handle.hpp>
#include <coverbs/datagram_queue_pair.hpp>
#include <coverbs/detail/cm_access.hpp>
#include <coverbs/device.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/async_result.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace coverbs {

class protection_domain;

/// How `async_join_multicast` joins.
struct multicast_options {
  multicast_options() = default;  // not an aggregate: see connection_options
  /// Numeric local address to join from (its device's port receives the group); empty: the route to the group
  /// decides, which on a host with several interfaces may not be the RDMA one — give it.
  std::string source_address;
  std::chrono::milliseconds resolve_address_timeout{2000};  ///< rdma_resolve_addr(3) timeout_ms
  std::chrono::milliseconds timeout{10000};                 ///< the whole join; zero: no limit
};

/// A datagram queue pair's membership of a multicast group. Move-only; an empty one (default-constructed,
/// moved from, or from a failed join) belongs to no group.
///
/// Lifetime: the queue pair and the protection domain outlive the membership. Destroying it (or `leave()`)
/// detaches the queue pair, leaves the group and destroys its id; the queue pair stays usable. Its address
/// handle goes with it: sends naming `destination()` must have completed.
/// @par Thread Safety Use a membership, and destroy it, on its queue pair's executor.
class multicast_membership {
public:
  multicast_membership() noexcept = default;
  multicast_membership(multicast_membership&&) noexcept = default;
  multicast_membership& operator=(multicast_membership&& other) noexcept;
  multicast_membership(const multicast_membership&) = delete;
  multicast_membership& operator=(const multicast_membership&) = delete;
  ~multicast_membership();

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  /// Where a datagram to every member goes: the group's address handle, queue pair 0xFFFFFF, the group's Q_Key.
  datagram_destination destination() const noexcept;
  /// The group's GID (RoCE, IPv4 group a.b.c.d: `::ffff:a.b.c.d`).
  gid group() const noexcept;
  /// The group's Q_Key (rdma_cm's, `rdma_cm_udp_qkey`, over IP).
  std::uint32_t qkey() const noexcept;
  /// Why the membership no longer holds (RDMA_CM_EVENT_MULTICAST_ERROR: its errno, else ENETRESET;
  /// `errc::device_removed`); empty while it does. Datagrams to the group may stop arriving then: join again.
  error_code error() const noexcept;
  /// Leaves the group now (what the destructor does); the membership is empty afterwards.
  void leave() noexcept;

private:
  friend struct detail::cm_access;
  explicit multicast_membership(std::shared_ptr<detail::multicast_impl> impl) noexcept : impl_(std::move(impl)) {}
  std::shared_ptr<detail::multicast_impl> impl_;
};

namespace detail {
/// The initiation (lib/cm/start.cpp).
void start_join_multicast(protection_domain& pd, datagram_queue_pair& via, std::string_view group,
                          const multicast_options& options, multicast_handler handler);
}  // namespace detail

/// Joins `via` to the multicast group `group` through rdma_cm (see the file comment) and makes the group's
/// address handle in `pd`.
/// @param pd `via`'s protection domain (else `errc::address_handle_mismatch`, checked before anything starts).
/// @param group a numeric IPv4 or IPv6 multicast address (224.0.0.0/4, ff00::/8).
/// @par Completion Signature `void(error_code, multicast_membership)`
/// @par Errors Before anything starts: `errc::invalid_address` (not a numeric multicast address, or a bad
/// source address), `errc::address_handle_mismatch`, EBADF (`pd` not open). Then:
/// `errc::address_resolution_failed` (RDMA_CM_EVENT_ADDR_ERROR), `errc::device_mismatch` (the group is reached
/// through another device or port than `via`'s), the errno of a failed join (RDMA_CM_EVENT_MULTICAST_ERROR),
/// `errc::qkey_mismatch` (the group's Q_Key is not `via`'s: its datagrams would be dropped),
/// `boost::asio::error::timed_out`, errno of the rdma_* calls, ibv_create_ah and ibv_attach_mcast.
/// @throws system_error EBADF when `via` is empty (moved from): there is no executor to complete on.
/// @par Per-Operation Cancellation terminal, partial, total: completes with `operation_aborted`; nothing stays
/// joined.
/// @par Thread Safety Call from `via`'s executor. The handler runs on its associated executor, else `via`'s.
template <completion_token_or_handler<void(error_code, multicast_membership)> Token =
              datagram_queue_pair::default_token>
auto async_join_multicast(protection_domain& pd, datagram_queue_pair& via, std::string_view group,
                          const multicast_options& options, Token&& token = Token{}) {
  return detail::initiate_checked<Token, void(error_code, multicast_membership)>(
      [&pd, &via](auto handler, const std::string& g, const multicast_options& o) {
        detail::start_join_multicast(pd, via, g, o, std::move(handler));
      },
      token, std::string(group), options);
}

}  // namespace coverbs
