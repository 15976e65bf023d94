#pragma once
/// @file
/// Devices: list them, open one, query what it can do (`device_caps`), its ports and its GIDs.
///
/// With no RDMA device — the kernel has no RDMA support, or no device is configured — every call that
/// needs one fails with `errc::no_device`, whose message says so and points at `tools/rxe-vm`, the
/// project's Soft-RoCE guest. Nothing here crashes on such a host (ibv_get_device_list returns NULL).

#include <coverbs/error.hpp>

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coverbs {

/// One entry of the device list (ibv_get_device_list(3)).
struct device_info {
  std::string name;        ///< kernel name, e.g. "rxe0", "mlx5_0"
  std::uint64_t guid = 0;  ///< node GUID, host byte order
  ibv_node_type node_type = IBV_NODE_UNKNOWN;
  ibv_transport_type transport = IBV_TRANSPORT_UNKNOWN;
};

/// The RDMA devices of this host.
/// @throws system_error `errc::no_device` when there is none (the message tells the two causes apart).
std::vector<device_info> list_devices();
/// As above; on failure sets `ec` and returns an empty list.
std::vector<device_info> list_devices(error_code& ec) noexcept;

/// Atomic operation support (`ibv_device_attr::atomic_cap`).
enum class atomic_support { none, hca, global };

/// What a device can do, from ibv_query_device_ex(3) plus probes of optional verbs.
struct device_caps {
  std::string fw_ver;
  std::uint32_t vendor_id = 0, vendor_part_id = 0, hw_ver = 0;
  std::uint8_t phys_port_cnt = 0;
  std::uint64_t max_mr_size = 0;    ///< bytes
  std::uint64_t page_size_cap = 0;  ///< bitmask of supported page sizes
  std::uint32_t max_qp = 0, max_qp_wr = 0, max_sge = 0, max_cq = 0, max_cqe = 0;
  std::uint32_t max_mr = 0, max_pd = 0, max_mw = 0;
  std::uint32_t max_qp_rd_atom = 0, max_qp_init_rd_atom = 0;
  bool mw_type1 = false;   ///< IBV_DEVICE_MEM_WINDOW: type-1 windows (ibv_bind_mw)
  bool mw_type2a = false;  ///< IBV_DEVICE_MEM_WINDOW_TYPE_2A: type-2 windows bound to a QP number
  bool mw_type2b = false;  ///< IBV_DEVICE_MEM_WINDOW_TYPE_2B: type-2 windows bound to a QP number and PD
  atomic_support atomics = atomic_support::none;
  bool odp = false;  ///< on-demand paging (IBV_ODP_SUPPORT)
  /// Whether ibv_rereg_mr(3) works: probed by re-registering a 4 KiB region, since providers answer
  /// EOPNOTSUPP at run time (rxe does) rather than advertise it.
  bool rereg_mr = false;
  std::uint64_t raw_cap_flags = 0;  ///< ibv_device_attr::device_cap_flags as reported

  /// Type-2 windows of either flavour.
  bool mw_type2() const noexcept { return mw_type2a || mw_type2b; }
};

/// A port's state (ibv_query_port(3)).
struct port_attributes {
  std::uint8_t port = 0;
  ibv_port_state state = IBV_PORT_NOP;
  ibv_mtu max_mtu = IBV_MTU_256, active_mtu = IBV_MTU_256;
  std::uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  std::uint32_t gid_table_len = 0;
  std::uint16_t lid = 0;
  std::uint32_t max_msg_sz = 0;  ///< the longest message in bytes (ibv_port_attr::max_msg_sz; 8 MiB on rxe)
  bool active() const noexcept { return state == IBV_PORT_ACTIVE; }
  bool is_ethernet() const noexcept { return link_layer == IBV_LINK_LAYER_ETHERNET; }
  /// The active MTU in bytes (256 .. 4096).
  std::uint32_t active_mtu_bytes() const noexcept { return 128u << active_mtu; }
};

/// A 128-bit GID, as on the wire.
struct gid {
  std::array<std::uint8_t, 16> raw{};
  /// IPv6 text form, e.g. "::ffff:10.77.0.1".
  std::string to_string() const;
  /// True for ::ffff:a.b.c.d (a RoCE GID made from an IPv4 address).
  bool is_ipv4_mapped() const noexcept;
  bool is_zero() const noexcept;
  ibv_gid to_verbs() const noexcept;
  friend bool operator==(const gid&, const gid&) = default;
};

enum class gid_type { ib, roce_v1, roce_v2 };

/// One valid entry of a port's GID table.
struct gid_entry {
  gid value;
  std::uint32_t index = 0;
  std::uint8_t port = 0;
  gid_type type = gid_type::ib;
  std::uint32_t netdev_ifindex = 0;  ///< the Ethernet device of a RoCE GID, 0 for IB
};

/// An open device (`ibv_open_device` / `ibv_close_device`). Move-only.
///
/// Lifetime: outlives every protection domain, queue pair and completion queue created on it.
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: may be shared across loops (threads): the const queries
/// (`query()`, ports, GIDs: verbs on an `ibv_context`, which libibverbs makes thread-safe) and creating
/// domains and completion queues on it from several threads are safe; open, close, move and destruction
/// are not while another thread uses it.
class device {
public:
  device() noexcept = default;

  /// Opens the first device of `list_devices()`.
  /// @throws system_error `errc::no_device` (none on this host), or the errno of ibv_open_device(3).
  static device open();
  /// Opens the device called `name` (e.g. "rxe0").
  /// @throws system_error `errc::no_device`, `errc::device_not_found` (the message lists the names
  /// that exist), or the errno of ibv_open_device(3).
  static device open(std::string_view name);
  /// As the two above (empty `name`: the first device); on failure sets `ec`, returns an empty device.
  static device open(std::string_view name, error_code& ec) noexcept;
  /// A non-owning view of a context opened by someone else (e.g. librdmacm's `rdma_cm_id::verbs`): every
  /// query works, `close()` and the destructor leave the context open. The context must outlive the view.
  static device adopt(ibv_context* context) noexcept;

  device(device&& other) noexcept;
  device& operator=(device&& other) noexcept;
  device(const device&) = delete;
  device& operator=(const device&) = delete;
  ~device();

  /// Kernel name of the device, e.g. "rxe0".
  std::string name() const;
  ibv_context* native_handle() const noexcept { return context_; }
  explicit operator bool() const noexcept { return context_ != nullptr; }

  /// The device's capabilities. Queried on first use (ibv_query_device_ex(3) and a rereg probe), then
  /// cached. @throws system_error with the verb's errno.
  const device_caps& caps() const;

  /// @param port 1 .. caps().phys_port_cnt
  /// @throws system_error `errc::invalid_port`, or the errno of ibv_query_port(3).
  port_attributes query_port(std::uint8_t port = 1) const;

  /// The valid entries of the port's GID table (ibv_query_gid_table(3)).
  /// @throws system_error `errc::invalid_port`, or the errno of the verb.
  std::vector<gid_entry> query_gids(std::uint8_t port = 1) const;

  /// The GID coverbs addresses peers with by default: on RoCE the RoCE v2 GID made from an IPv4
  /// address (::ffff:a.b.c.d), else any RoCE v2 GID, else the first; on IB the first (index 0).
  /// @throws system_error `errc::no_usable_gid` when the table has no valid entry.
  gid_entry default_gid(std::uint8_t port = 1) const;

  /// Whether destruction closes the context (false for `adopt`ed views).
  bool owns_context() const noexcept { return owned_; }

  /// Closes now (a view just forgets its context); further queries fail. Idempotent.
  void close() noexcept;

private:
  explicit device(ibv_context* context, bool owned = true) noexcept : context_(context), owned_(owned) {}
  ibv_context* context_ = nullptr;
  bool owned_ = true;
  mutable std::unique_ptr<device_caps> caps_;
};

/// "type1", "type2a"/"type2b" joined by commas, or "none": the window types in `caps`.
std::string mw_types_string(const device_caps& caps);
/// "none", "hca", "global".
const char* to_string(atomic_support a) noexcept;
/// "ib", "roce_v1", "roce_v2".
const char* to_string(gid_type t) noexcept;

}  // namespace coverbs
