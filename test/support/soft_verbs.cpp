// The software verbs device of soft_verbs.hpp: its ibv_context_ops (data path) and the control-path verbs
// it defines in place of libibverbs' for the executable that links this file.
#include "soft_verbs.hpp"

#include <dlfcn.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

namespace soft_verbs {
namespace {

struct soft_qp;

struct soft_channel {
  ibv_comp_channel channel{};                       // first: the ibv_comp_channel* is a soft_channel*
  std::deque<std::pair<ibv_cq*, unsigned>> events;  // queued events, consecutive ones of a CQ counted together
  bool empty() const noexcept { return events.empty(); }
};

struct soft_cq {
  ibv_cq cq{};  // first: the ibv_cq* is a soft_cq*
  struct entry {
    ibv_wc wc;
    soft_qp* qp;
    bool send;
  };
  std::vector<entry> ring;
  std::size_t head = 0, count = 0;
  bool armed = false;
  unsigned events_unacked = 0;
};

struct soft_qp {
  ibv_qp qp{};  // first: the ibv_qp* is a soft_qp*
  std::uint32_t max_send_wr = 0, max_recv_wr = 0;
  std::uint32_t send_outstanding = 0, recv_outstanding = 0;  // posted, completion not polled yet
  std::uint32_t dest_qp_num = 0;
  std::deque<ibv_recv_wr> recvs;  // posted receives (sg_list copied into recv_sges)
  std::deque<ibv_sge> recv_sges;
  std::deque<std::vector<unsigned char>> unmatched_sends;  // sends that arrived before a receive
};

}  // namespace

namespace {
/// The context and the device it belongs to (standard layout: the ibv_context* is a soft_context*).
struct soft_context {
  ibv_context ctx{};
  device::state* owner = nullptr;
};
}  // namespace

struct device::state {
  ibv_device dev{};
  soft_context sc;
  ibv_wc_status fail_status = IBV_WC_SUCCESS;
  int fail_count = 0;
  std::uint64_t sends = 0, recvs = 0, events = 0;
  std::uint32_t max_send_outstanding = 0;
  std::uint32_t next_qp_num = 0x100;
  std::uint32_t keys = 0;
  std::vector<soft_qp*> qps;
};

namespace {

device::state* state_of(ibv_context* ctx) noexcept { return reinterpret_cast<soft_context*>(ctx)->owner; }
soft_cq* soft(ibv_cq* cq) noexcept { return reinterpret_cast<soft_cq*>(cq); }
soft_qp* soft(ibv_qp* qp) noexcept { return reinterpret_cast<soft_qp*>(qp); }
soft_channel* soft(ibv_comp_channel* ch) noexcept { return reinterpret_cast<soft_channel*>(ch); }

/// Pushes a completion; raises an event when the queue is armed (once per arming, as IBA says).
void push(soft_cq* cq, const ibv_wc& wc, soft_qp* qp, bool send) {
  // coverbs reserves CQ entries for every queue pair's depth: an overflow here is a bug the tests catch.
  if (cq->count == cq->ring.size()) std::abort();
  cq->ring[(cq->head + cq->count++) % cq->ring.size()] = {wc, qp, send};
  if (!cq->armed || !cq->cq.channel) return;
  cq->armed = false;
  soft_channel* ch = soft(cq->cq.channel);
  ++state_of(cq->cq.context)->events;
  const bool was_empty = ch->empty();
  if (!was_empty && ch->events.back().first == &cq->cq)
    ++ch->events.back().second;
  else
    ch->events.emplace_back(&cq->cq, 1u);
  if (was_empty) {
    const std::uint64_t one = 1;
    (void)!::write(ch->channel.fd, &one, sizeof one);
  }
}

ibv_wc completion(const soft_qp* qp, std::uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode op, std::uint32_t bytes) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = op;
  wc.byte_len = bytes;
  wc.qp_num = qp->qp.qp_num;
  return wc;
}

soft_qp* peer_of(soft_qp* qp) noexcept {
  for (soft_qp* q : state_of(qp->qp.context)->qps)
    if (q->qp.qp_num == qp->dest_qp_num) return q;
  return nullptr;
}

std::uint32_t gather_length(const ibv_send_wr& wr) noexcept {
  std::uint32_t n = 0;
  for (int i = 0; i < wr.num_sge; ++i)
    n += wr.sg_list[i].length;
  return n;
}

/// Copies the gathered bytes of `wr` to `dst` (a loopback device: the remote address is this process's).
void gather(const ibv_send_wr& wr, unsigned char* dst) noexcept {
  for (int i = 0; i < wr.num_sge; ++i) {
    std::memcpy(dst, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
    dst += wr.sg_list[i].length;
  }
}

/// Delivers a send's bytes into the peer's oldest posted receive.
void deliver(soft_qp* to, const unsigned char* data, std::uint32_t len) {
  ibv_recv_wr r = to->recvs.front();
  ibv_sge sge = to->recv_sges.front();
  to->recvs.pop_front();
  to->recv_sges.pop_front();
  const bool fits = r.num_sge == 0 ? len == 0 : len <= sge.length;
  if (fits && len) std::memcpy(reinterpret_cast<void*>(sge.addr), data, len);
  ibv_wc wc = completion(to, r.wr_id, fits ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, fits ? len : 0);
  push(soft(to->qp.recv_cq), wc, to, false);
}

/// Flushes the posted receives of a queue pair entering the error state.
void flush_recvs(soft_qp* qp) {
  while (!qp->recvs.empty()) {
    push(soft(qp->qp.recv_cq), completion(qp, qp->recvs.front().wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0), qp, false);
    qp->recvs.pop_front();
    qp->recv_sges.pop_front();
  }
}

ibv_wc_opcode send_opcode(ibv_wr_opcode op) noexcept {
  switch (op) {
  case IBV_WR_RDMA_WRITE:
  case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
  case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
  case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
  case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
  case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
  case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
  default: return IBV_WC_SEND;
  }
}

/// One send-queue work request, completed at once.
ibv_wc_status execute(soft_qp* qp, const ibv_send_wr& wr) {
  device::state* s = state_of(qp->qp.context);
  if (qp->qp.state == IBV_QPS_ERR) return IBV_WC_WR_FLUSH_ERR;
  if (s->fail_count > 0) {
    --s->fail_count;
    return s->fail_status;
  }
  switch (wr.opcode) {
  case IBV_WR_RDMA_WRITE: gather(wr, reinterpret_cast<unsigned char*>(wr.wr.rdma.remote_addr)); return IBV_WC_SUCCESS;
  case IBV_WR_RDMA_READ:
    for (int i = 0, off = 0; i < wr.num_sge; off += wr.sg_list[i].length, ++i)
      std::memcpy(reinterpret_cast<void*>(wr.sg_list[i].addr),
                  reinterpret_cast<const void*>(wr.wr.rdma.remote_addr + off), wr.sg_list[i].length);
    return IBV_WC_SUCCESS;
  case IBV_WR_SEND: {
    soft_qp* to = peer_of(qp);
    if (!to) return IBV_WC_RETRY_EXC_ERR;  // nobody at the other end
    std::vector<unsigned char> data(gather_length(wr));
    gather(wr, data.data());
    if (to->recvs.empty())
      to->unmatched_sends.push_back(std::move(data));  // waits for a receive, as RNR retries would
    else
      deliver(to, data.data(), static_cast<std::uint32_t>(data.size()));
    return IBV_WC_SUCCESS;
  }
  case IBV_WR_BIND_MW:  // keys are not checked (see soft_verbs.hpp): a bind or an invalidation only completes
  case IBV_WR_LOCAL_INV: return IBV_WC_SUCCESS;
  default: return IBV_WC_LOC_QP_OP_ERR;  // not modelled
  }
}

// --- ibv_context_ops: the data path ---

int post_send(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  soft_qp* qp = soft(q);
  device::state* s = state_of(q->context);
  for (; wr; wr = wr->next) {
    if (qp->send_outstanding == qp->max_send_wr) {  // the send queue is full: the caller overran its depth
      *bad = wr;
      return ENOMEM;
    }
    ++s->sends;
    ++qp->send_outstanding;
    s->max_send_outstanding = std::max(s->max_send_outstanding, qp->send_outstanding);
    const ibv_wc_status status = execute(qp, *wr);
    if (status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR) {
      q->state = IBV_QPS_ERR;
      flush_recvs(qp);
    }
    // Every completion is pushed (sq_sig_all is 0 but coverbs signals every request; errors always are).
    push(soft(q->send_cq), completion(qp, wr->wr_id, status, send_opcode(wr->opcode), gather_length(*wr)), qp, true);
  }
  return 0;
}

int post_recv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  soft_qp* qp = soft(q);
  for (; wr; wr = wr->next) {
    if (qp->recv_outstanding == qp->max_recv_wr || wr->num_sge > 1) {
      *bad = wr;
      return wr->num_sge > 1 ? EINVAL : ENOMEM;
    }
    ++state_of(q->context)->recvs;
    ++qp->recv_outstanding;
    qp->recvs.push_back(*wr);
    qp->recv_sges.push_back(wr->num_sge ? wr->sg_list[0] : ibv_sge{});
    if (q->state == IBV_QPS_ERR) {
      flush_recvs(qp);
    } else if (!qp->unmatched_sends.empty()) {
      std::vector<unsigned char> data = std::move(qp->unmatched_sends.front());
      qp->unmatched_sends.pop_front();
      deliver(qp, data.data(), static_cast<std::uint32_t>(data.size()));
    }
  }
  return 0;
}

int poll_cq(ibv_cq* c, int num_entries, ibv_wc* wc) {
  soft_cq* cq = soft(c);
  int n = 0;
  for (; n < num_entries && cq->count; ++n) {
    const soft_cq::entry& e = cq->ring[cq->head];
    wc[n] = e.wc;
    --(e.send ? e.qp->send_outstanding : e.qp->recv_outstanding);
    cq->head = (cq->head + 1) % cq->ring.size();
    --cq->count;
  }
  return n;
}

int req_notify_cq(ibv_cq* cq, int) {
  soft(cq)->armed = true;
  return 0;
}

/// Keys of regions and windows: a fresh index in the upper 24 bits, the consumer's 8-bit key 0.
std::uint32_t next_key(ibv_context* ctx) noexcept { return ++state_of(ctx)->keys << 8; }

/// A zeroed verbs object, or null with errno ENOMEM.
template <class T>
T* new_object() noexcept {
  T* p = new (std::nothrow) T{};
  if (!p) errno = ENOMEM;
  return p;
}

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  auto* mw = new_object<ibv_mw>();
  if (!mw) return nullptr;
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = next_key(pd->context);
  mw->type = type;
  return mw;
}

int dealloc_mw(ibv_mw* mw) {
  delete mw;
  return 0;
}

}  // namespace

device::device() : s_(new state) {
  // The library's calls reach this file's verbs only if the executable exports them (soft_verbs.hpp);
  // otherwise libibverbs would receive this software context and crash. Say so instead.
  if (::dlsym(RTLD_DEFAULT, "ibv_alloc_pd") != reinterpret_cast<void*>(&::ibv_alloc_pd)) {
    delete s_;
    throw std::logic_error("soft_verbs: the executable does not export its verbs, so libcoverbs would call "
                           "libibverbs' own with the software context; link it with export_dynamic (-rdynamic)");
  }
  s_->sc.owner = s_;
  std::strcpy(s_->dev.name, "soft0");
  std::strcpy(s_->dev.dev_name, "soft0");
  s_->dev.node_type = IBV_NODE_CA;
  s_->dev.transport_type = IBV_TRANSPORT_IB;
  s_->sc.ctx.device = &s_->dev;
  s_->sc.ctx.cmd_fd = -1;
  s_->sc.ctx.async_fd = -1;
  s_->sc.ctx.num_comp_vectors = 1;
  s_->sc.ctx.ops.post_send = &post_send;
  s_->sc.ctx.ops.post_recv = &post_recv;
  s_->sc.ctx.ops.poll_cq = &poll_cq;
  s_->sc.ctx.ops.req_notify_cq = &req_notify_cq;
  s_->sc.ctx.ops.alloc_mw = &alloc_mw;
  s_->sc.ctx.ops.dealloc_mw = &dealloc_mw;
}
device::~device() { delete s_; }
ibv_context* device::context() noexcept { return &s_->sc.ctx; }
void device::fail_next(ibv_wc_status status, int count) noexcept {
  s_->fail_status = status;
  s_->fail_count = count;
}
std::uint64_t device::sends_posted() const noexcept { return s_->sends; }
std::uint64_t device::recvs_posted() const noexcept { return s_->recvs; }
std::uint32_t device::max_send_outstanding() const noexcept { return s_->max_send_outstanding; }
std::uint64_t device::events_raised() const noexcept { return s_->events; }

}  // namespace soft_verbs

// --- the control path, in place of libibverbs' (see soft_verbs.hpp) ---

using soft_verbs::device;
using namespace soft_verbs;

extern "C" {

int ibv_query_device(ibv_context*, ibv_device_attr* attr) {
  *attr = ibv_device_attr{};
  std::strcpy(attr->fw_ver, "soft");
  attr->max_qp = 1 << 16;
  attr->max_qp_wr = 1 << 15;
  attr->max_sge = 16;
  attr->max_cq = 1 << 16;
  attr->max_cqe = 1 << 20;
  attr->max_qp_rd_atom = 16;
  attr->max_qp_init_rd_atom = 16;
  attr->atomic_cap = IBV_ATOMIC_NONE;
  attr->device_cap_flags = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  attr->max_mw = 1 << 16;
  attr->max_mr = 1 << 16;
  attr->phys_port_cnt = 1;
  return 0;
}

// Called by the inline ibv_query_port of <infiniband/verbs.h> with a whole ibv_port_attr behind the pointer
// (the parentheses keep verbs.h's ibv_query_port macro from renaming this definition).
int(ibv_query_port)(ibv_context*, std::uint8_t port, _compat_ibv_port_attr* compat) {
  if (port != 1) return EINVAL;
  auto* a = reinterpret_cast<ibv_port_attr*>(compat);
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->max_msg_sz = 1u << 31;
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context*, ibv_gid_entry* entries, size_t max_entries, uint32_t, size_t) {
  if (max_entries < 1) return -EINVAL;
  entries[0] = ibv_gid_entry{};
  const unsigned char v4mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  std::memcpy(entries[0].gid.raw, v4mapped, 16);
  entries[0].port_num = 1;
  entries[0].gid_type = IBV_GID_TYPE_ROCE_V2;
  return 1;
}

ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  auto* pd = new (std::nothrow) ibv_pd{};
  if (pd) pd->context = ctx;
  return pd;
}
int ibv_dealloc_pd(ibv_pd* pd) {
  delete pd;
  return 0;
}

// A region is its description alone: the device checks no keys. libibverbs' ibv_reg_mr macro calls ibv_reg_mr
// or ibv_reg_mr_iova2 depending on whether the access flags are a constant; both are here.
// Deregistered region descriptions are handed out again, the last one first (as a provider's allocator
// may): a new region then has the ibv_mr address of the one deregistered before it, on every build —
// sanitizers' allocators would otherwise keep freed blocks out of use.
// Never destroyed, so the descriptions stay reachable to the end (no leak reported at exit).
static std::mutex freed_regions_mutex;
static std::vector<ibv_mr*>& freed_regions = *new std::vector<ibv_mr*>;

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t, unsigned int) {
  ibv_mr* mr = nullptr;
  {
    std::lock_guard lock(freed_regions_mutex);
    if (!freed_regions.empty()) {
      mr = freed_regions.back();
      freed_regions.pop_back();
      *mr = {};
    }
  }
  if (!mr) mr = new_object<ibv_mr>();
  if (!mr) return nullptr;
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->lkey = mr->rkey = next_key(pd->context);
  return mr;
}
ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), static_cast<unsigned>(access));
}
int ibv_dereg_mr(ibv_mr* mr) {
  try {
    std::lock_guard lock(freed_regions_mutex);
    freed_regions.push_back(mr);
  } catch (...) {
    delete mr;
  }
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return nullptr;
  auto* ch = new soft_channel;
  ch->channel.context = ctx;
  ch->channel.fd = fd;
  return &ch->channel;
}
int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  ::close(channel->fd);
  delete soft(channel);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel, int) {
  if (cqe < 1) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new soft_cq;
  cq->cq.context = ctx;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  cq->ring.resize(static_cast<std::size_t>(cqe));
  return &cq->cq;
}
int ibv_destroy_cq(ibv_cq* cq) {
  if (soft(cq)->events_unacked) return EBUSY;
  delete soft(cq);
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  soft_channel* ch = soft(channel);
  if (ch->empty()) {
    errno = EAGAIN;
    return -1;
  }
  *cq = ch->events.front().first;
  if (--ch->events.front().second == 0) ch->events.pop_front();
  *cq_context = (*cq)->cq_context;
  ++soft(*cq)->events_unacked;
  if (ch->empty()) {
    std::uint64_t v;
    (void)!::read(channel->fd, &v, sizeof v);
  }
  return 0;
}
void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) { soft(cq)->events_unacked -= nevents; }

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (init->qp_type != IBV_QPT_RC || init->srq || init->cap.max_send_sge > 16 || init->cap.max_recv_sge > 16) {
    errno = EINVAL;
    return nullptr;
  }
  device::state* s = state_of(pd->context);
  auto* qp = new soft_qp;
  qp->qp.context = pd->context;
  qp->qp.qp_context = init->qp_context;
  qp->qp.pd = pd;
  qp->qp.send_cq = init->send_cq;
  qp->qp.recv_cq = init->recv_cq;
  qp->qp.qp_num = s->next_qp_num++;
  qp->qp.state = IBV_QPS_RESET;
  qp->qp.qp_type = IBV_QPT_RC;
  qp->max_send_wr = init->cap.max_send_wr;
  qp->max_recv_wr = init->cap.max_recv_wr;
  init->cap.max_inline_data = 0;  // every write and send goes from its buffer
  s->qps.push_back(qp);
  return &qp->qp;
}
int ibv_destroy_qp(ibv_qp* q) {
  device::state* s = state_of(q->context);
  s->qps.erase(std::find(s->qps.begin(), s->qps.end(), soft(q)));
  delete soft(q);
  return 0;
}

int ibv_modify_qp(ibv_qp* q, ibv_qp_attr* attr, int mask) {
  if (mask & IBV_QP_DEST_QPN) soft(q)->dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_STATE) {
    q->state = attr->qp_state;
    if (q->state == IBV_QPS_ERR) flush_recvs(soft(q));
  }
  return 0;
}
int ibv_query_qp(ibv_qp* q, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  *attr = ibv_qp_attr{};
  attr->qp_state = q->state;
  *init = ibv_qp_init_attr{};
  return 0;
}

}  // extern "C"
