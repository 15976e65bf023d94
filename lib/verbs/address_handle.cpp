// Address handles (ibv_create_ah / ibv_destroy_ah): from raw attributes, from a GID, from a datagram's sender.
#include <coverbs/address_handle.hpp>
#include <coverbs/protection_domain.hpp>

#include "verbs/device_internal.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

namespace coverbs {

namespace {

gid gid_of(const ibv_gid& g) noexcept {
  gid out;
  std::copy(std::begin(g.raw), std::end(g.raw), out.raw.begin());
  return out;
}

/// The index of `port`'s source GID: `gid_index`, checked against the table, or the port's default.
std::uint8_t source_gid_index(ibv_context* context, std::uint8_t port, int gid_index) {
  if (gid_index < 0) return static_cast<std::uint8_t>(detail::default_gid(context, port).index);
  const auto gids = detail::query_gids(context, port);
  if (std::none_of(gids.begin(), gids.end(), [&](const gid_entry& g) { return g.index == unsigned(gid_index); }))
    throw system_error(make_error_code(errc::no_usable_gid), "address_handle: port " + std::to_string(port) +
                                                                 " has no GID at gid_index " +
                                                                 std::to_string(gid_index));
  return static_cast<std::uint8_t>(gid_index);
}

/// Global-routing attributes towards `to` from `port`.
ibv_ah_attr global_route(ibv_context* context, const gid& to, std::uint8_t port, int gid_index) {
  ibv_ah_attr attr{};
  attr.port_num = port;
  attr.is_global = 1;
  attr.grh.dgid = to.to_verbs();
  attr.grh.sgid_index = source_gid_index(context, port, gid_index);
  attr.grh.hop_limit = 64;
  return attr;
}

ibv_pd* open_pd(protection_domain& pd) {
  if (!pd) throw system_error(errno_code(EBADF), "address_handle: the protection domain is not open");
  return pd.native_handle();
}

}  // namespace

address_handle::address_handle(protection_domain& pd, const ibv_ah_attr& attr)
    : to_(attr.is_global ? gid_of(attr.grh.dgid) : gid{}), port_(attr.port_num) {
  ibv_ah_attr a = attr;  // ibv_create_ah takes a non-const pointer
  ah_ = ibv_create_ah(open_pd(pd), &a);
  throw_on_error(verbs_null_result(ah_),
                 "ibv_create_ah(to " +
                     (attr.is_global ? to_.to_string() : std::string("LID ") + std::to_string(attr.dlid)) + ", port " +
                     std::to_string(attr.port_num) + ")");
}

address_handle::address_handle(protection_domain& pd, const gid& to, std::uint8_t port, const address_options& options)
    : address_handle(pd, [&] {
        ibv_ah_attr attr = global_route(open_pd(pd)->context, to, port, options.gid_index);
        attr.sl = options.sl;
        attr.grh.traffic_class = options.traffic_class;
        attr.grh.hop_limit = options.hop_limit;
        if (!detail::query_port(pd.context(), port).is_ethernet()) attr.dlid = options.lid;
        return attr;
      }()) {}

address_handle::address_handle(protection_domain& pd, const datagram_sender& from, std::uint8_t port, int gid_index)
    : address_handle(pd, [&] {
        ibv_ah_attr attr{};
        // InfiniBand within a subnet may route by LID alone; RoCE always carries the GID.
        if (!from.source_gid.is_zero()) attr = global_route(open_pd(pd)->context, from.source_gid, port, gid_index);
        attr.port_num = port;
        attr.sl = from.sl;
        attr.dlid = from.lid;
        return attr;
      }()) {}

address_handle::address_handle(address_handle&& other) noexcept
    : ah_(std::exchange(other.ah_, nullptr)), to_(other.to_), port_(other.port_) {}

address_handle& address_handle::operator=(address_handle&& other) noexcept {
  if (this != &other) {
    address_handle old(std::move(*this));  // destroyed at the end of this block
    ah_ = std::exchange(other.ah_, nullptr);
    to_ = other.to_;
    port_ = other.port_;
  }
  return *this;
}

address_handle::~address_handle() {
  if (!ah_) return;
  if (const error_code ec = verbs_status_result(ibv_destroy_ah(ah_)))
    std::fprintf(stderr, "coverbs: ibv_destroy_ah failed (%s); the address handle is leaked\n", ec.message().c_str());
  ah_ = nullptr;
}

}  // namespace coverbs
