#include <coverbs/device.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/protection_domain.hpp>

#include "verbs/device_internal.hpp"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>

namespace coverbs {
namespace {

struct device_list_deleter {
  void operator()(ibv_device** list) const noexcept { ibv_free_device_list(list); }
};
using device_list = std::unique_ptr<ibv_device*[], device_list_deleter>;

/// The device list, or no_device with the reason in `why`.
device_list get_device_list(int& count, error_code& ec, std::string& why) noexcept {
  count = 0;
  device_list list(ibv_get_device_list(&count));
  if (!list) {
    const error_code cause = verbs_null_result(nullptr);
    struct stat st {};
    why = ::stat("/sys/class/infiniband_verbs", &st) != 0
              ? "ibv_get_device_list failed (" + cause.message() + "; /sys/class/infiniband_verbs is missing)"
              : "ibv_get_device_list failed (" + cause.message() + ")";
    ec = make_error_code(errc::no_device);
    return list;
  }
  if (count == 0) {
    why = "ibv_get_device_list: the kernel supports RDMA but no device is configured (for Soft-RoCE: "
          "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev ETH)";
    ec = make_error_code(errc::no_device);
    return nullptr;
  }
  ec = {};
  return list;
}

}  // namespace

std::vector<device_info> list_devices(error_code& ec) noexcept {
  std::vector<device_info> out;
  int count = 0;
  std::string why;
  device_list list = get_device_list(count, ec, why);
  if (ec) return out;
  try {
    for (int i = 0; i < count; ++i) {
      ibv_device* d = list[i];
      out.push_back({ibv_get_device_name(d), be64toh(ibv_get_device_guid(d)), d->node_type, d->transport_type});
    }
  } catch (const std::bad_alloc&) {
    ec = errno_code(ENOMEM);
    out.clear();
  }
  return out;
}

std::vector<device_info> list_devices() {
  int count = 0;
  error_code ec;
  std::string why;
  device_list list = get_device_list(count, ec, why);
  throw_on_error(ec, why);
  return list_devices(ec);
}

device device::open() { return open(std::string_view{}); }

device device::open(std::string_view name) {
  int count = 0;
  error_code ec;
  std::string why;
  device_list list = get_device_list(count, ec, why);
  throw_on_error(ec, why);
  ibv_device* chosen = name.empty() ? list[0] : nullptr;
  std::string names;
  for (int i = 0; i < count && !chosen; ++i) {
    const char* n = ibv_get_device_name(list[i]);
    if (name == n) chosen = list[i];
    names += (names.empty() ? "" : ", ") + std::string(n);
  }
  if (!chosen)
    throw system_error(make_error_code(errc::device_not_found),
                       "open device \"" + std::string(name) + "\": the devices here are " + names);
  ibv_context* context = ibv_open_device(chosen);
  throw_on_error(verbs_null_result(context), "ibv_open_device(" + std::string(ibv_get_device_name(chosen)) + ")");
  return device(context);
}

device device::open(std::string_view name, error_code& ec) noexcept {
  try {
    device d = open(name);
    ec = {};
    return d;
  } catch (const system_error& e) {
    ec = e.code();
  } catch (const std::bad_alloc&) {
    ec = errno_code(ENOMEM);
  }
  return device();
}

device device::adopt(ibv_context* context) noexcept { return device(context, false); }

device::device(device&& other) noexcept
    : context_(std::exchange(other.context_, nullptr)), owned_(other.owned_), caps_(std::move(other.caps_)) {}

device& device::operator=(device&& other) noexcept {
  if (this != &other) {
    close();
    context_ = std::exchange(other.context_, nullptr);
    owned_ = other.owned_;
    caps_ = std::move(other.caps_);
  }
  return *this;
}

device::~device() { close(); }

void device::close() noexcept {
  if (context_ && owned_) ibv_close_device(context_);
  context_ = nullptr;
  caps_.reset();
}

std::string device::name() const { return context_ ? ibv_get_device_name(context_->device) : std::string(); }

namespace {

void require_open(ibv_context* context, const char* what) {
  if (!context) throw system_error(errno_code(EBADF), std::string(what) + ": the device is not open");
}

/// ibv_rereg_mr is optional and providers refuse it at run time, so try it on a scratch region.
bool probe_rereg(device& dev) {
  error_code ec;
  protection_domain pd(dev, ec);
  if (ec) return false;
  // On the heap, not in thread-local storage: a 4 KiB page aligned to 4 KiB there made libcoverbs' static TLS
  // block too large for a dlopen after start-up (test/unit/dlopen_test.cpp).
  struct page_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{4096}); }
  };
  const std::unique_ptr<std::byte[], page_delete> scratch(
      static_cast<std::byte*>(::operator new[](4096, std::align_val_t{4096})));
  memory_region mr(pd, std::span<std::byte>(scratch.get(), 4096), access::local_write, ec);
  if (ec) return false;
  bool still_valid = true;
  const int rc = ibv_rereg_mr(mr.native_handle(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                              to_verbs(access::local_write | access::remote_read));
  const error_code rr = verbs_rereg_result(rc, still_valid);
  if (!still_valid) mr.release();  // the verb already destroyed it
  return !rr;
}

}  // namespace

const device_caps& device::caps() const {
  if (caps_) return *caps_;
  require_open(context_, "query device capabilities");
  ibv_device_attr_ex ex{};
  throw_on_error(verbs_status_result(ibv_query_device_ex(context_, nullptr, &ex)),
                 "ibv_query_device_ex(" + name() + ")");
  const ibv_device_attr& a = ex.orig_attr;
  auto c = std::make_unique<device_caps>();
  c->fw_ver = a.fw_ver;
  c->vendor_id = a.vendor_id;
  c->vendor_part_id = a.vendor_part_id;
  c->hw_ver = a.hw_ver;
  c->phys_port_cnt = a.phys_port_cnt;
  c->max_mr_size = a.max_mr_size;
  c->page_size_cap = a.page_size_cap;
  c->max_qp = a.max_qp;
  c->max_qp_wr = a.max_qp_wr;
  c->max_sge = a.max_sge;
  c->max_cq = a.max_cq;
  c->max_cqe = a.max_cqe;
  c->max_mr = a.max_mr;
  c->max_pd = a.max_pd;
  c->max_mw = a.max_mw;
  c->max_qp_rd_atom = a.max_qp_rd_atom;
  c->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
  c->raw_cap_flags = a.device_cap_flags;
  c->mw_type1 = (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0;
  c->mw_type2a = (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A) != 0;
  c->mw_type2b = (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
  c->atomics = a.atomic_cap == IBV_ATOMIC_GLOB  ? atomic_support::global
               : a.atomic_cap == IBV_ATOMIC_HCA ? atomic_support::hca
                                                : atomic_support::none;
  c->odp = (ex.odp_caps.general_caps & IBV_ODP_SUPPORT) != 0;
  c->rereg_mr = probe_rereg(const_cast<device&>(*this));
  caps_ = std::move(c);
  return *caps_;
}

namespace {
void check_port(const device& dev, std::uint8_t port) {
  if (port < 1 || port > dev.caps().phys_port_cnt)
    throw system_error(make_error_code(errc::invalid_port), dev.name() + " port " + std::to_string(port) + " (it has " +
                                                                std::to_string(dev.caps().phys_port_cnt) + ")");
}
}  // namespace

namespace detail {

port_attributes query_port(ibv_context* context, std::uint8_t port) {
  ibv_port_attr a{};
  throw_on_error(verbs_status_result(ibv_query_port(context, port, &a)),
                 "ibv_query_port(" + std::string(ibv_get_device_name(context->device)) + ", " + std::to_string(port) +
                     ")");
  port_attributes p;
  p.port = port;
  p.state = a.state;
  p.max_mtu = a.max_mtu;
  p.active_mtu = a.active_mtu;
  p.link_layer = a.link_layer;
  p.gid_table_len = static_cast<std::uint32_t>(a.gid_tbl_len);
  p.lid = a.lid;
  p.max_msg_sz = a.max_msg_sz;
  return p;
}

std::vector<gid_entry> query_gids(ibv_context* context, std::uint8_t port) {
  ibv_device_attr attr{};
  throw_on_error(verbs_status_result(ibv_query_device(context, &attr)), "ibv_query_device");
  const port_attributes p = query_port(context, port);
  const std::size_t max_entries = static_cast<std::size_t>(p.gid_table_len) * attr.phys_port_cnt;
  std::vector<ibv_gid_entry> raw(std::max<std::size_t>(max_entries, 1));
  const ssize_t n = ibv_query_gid_table(context, raw.data(), raw.size(), 0);
  if (n < 0)
    throw system_error(verbs_status_result(n),
                       "ibv_query_gid_table(" + std::string(ibv_get_device_name(context->device)) + ")");
  std::vector<gid_entry> out;
  for (ssize_t i = 0; i < n; ++i) {
    const ibv_gid_entry& e = raw[static_cast<std::size_t>(i)];
    if (e.port_num != port) continue;
    gid_entry g;
    std::memcpy(g.value.raw.data(), e.gid.raw, 16);
    if (g.value.is_zero()) continue;
    g.index = e.gid_index;
    g.port = static_cast<std::uint8_t>(e.port_num);
    g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? gid_type::roce_v2
             : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? gid_type::roce_v1
                                                  : gid_type::ib;
    g.netdev_ifindex = e.ndev_ifindex;
    out.push_back(g);
  }
  std::sort(out.begin(), out.end(), [](const gid_entry& a, const gid_entry& b) { return a.index < b.index; });
  return out;
}

gid_entry default_gid(ibv_context* context, std::uint8_t port) {
  const std::vector<gid_entry> gids = query_gids(context, port);
  if (gids.empty())
    throw system_error(make_error_code(errc::no_usable_gid),
                       std::string(ibv_get_device_name(context->device)) + " port " + std::to_string(port));
  auto pick = [&](auto pred) { return std::find_if(gids.begin(), gids.end(), pred); };
  if (query_port(context, port).is_ethernet()) {
    auto it = pick([](const gid_entry& g) { return g.type == gid_type::roce_v2 && g.value.is_ipv4_mapped(); });
    if (it == gids.end()) it = pick([](const gid_entry& g) { return g.type == gid_type::roce_v2; });
    if (it != gids.end()) return *it;
  }
  return gids.front();
}

}  // namespace detail

port_attributes device::query_port(std::uint8_t port) const {
  require_open(context_, "ibv_query_port");
  check_port(*this, port);
  return detail::query_port(context_, port);
}

std::vector<gid_entry> device::query_gids(std::uint8_t port) const {
  require_open(context_, "ibv_query_gid_table");
  check_port(*this, port);
  return detail::query_gids(context_, port);
}

gid_entry device::default_gid(std::uint8_t port) const {
  require_open(context_, "default_gid");
  check_port(*this, port);
  return detail::default_gid(context_, port);
}

std::string gid::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, raw.data(), text, sizeof text);
  return text;
}

bool gid::is_ipv4_mapped() const noexcept {
  static constexpr std::uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(raw.data(), prefix, sizeof prefix) == 0;
}

bool gid::is_zero() const noexcept {
  return std::all_of(raw.begin(), raw.end(), [](std::uint8_t b) { return b == 0; });
}

ibv_gid gid::to_verbs() const noexcept {
  ibv_gid g{};
  std::memcpy(g.raw, raw.data(), 16);
  return g;
}

std::string mw_types_string(const device_caps& caps) {
  std::string s;
  auto add = [&](bool on, const char* t) {
    if (on) s += (s.empty() ? "" : ",") + std::string(t);
  };
  add(caps.mw_type1, "type1");
  add(caps.mw_type2a, "type2a");
  add(caps.mw_type2b, "type2b");
  return s.empty() ? "none" : s;
}

const char* to_string(atomic_support a) noexcept {
  switch (a) {
  case atomic_support::hca: return "hca";
  case atomic_support::global: return "global";
  case atomic_support::none: break;
  }
  return "none";
}

const char* to_string(gid_type t) noexcept {
  switch (t) {
  case gid_type::roce_v1: return "roce_v1";
  case gid_type::roce_v2: return "roce_v2";
  case gid_type::ib: break;
  }
  return "ib";
}

}  // namespace coverbs
