// The GRH slots of a datagram queue pair's receives (grh_slots.hpp).
#include "dataplane/grh_slots.hpp"

#include <coverbs/detail/wr_node.hpp>
#include <coverbs/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace coverbs::detail {

grh_slots::grh_slots(ibv_pd* pd, std::uint32_t count, std::uint32_t overflow_bytes)
    : bytes_(new std::byte[std::size_t{count} * grh_bytes + overflow_bytes]), overflow_offset_(std::size_t{count} * grh_bytes) {
  const std::size_t size = std::max<std::size_t>(overflow_offset_ + overflow_bytes, 1);
  mr_ = ibv_reg_mr(pd, bytes_.get(), size, static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  throw_on_error(verbs_null_result(mr_),
                 "ibv_reg_mr(GRH slots of a datagram queue pair, " + std::to_string(size) + " bytes)");
  free_.reserve(count);
  for (std::uint32_t i = count; i > 0; --i)
    free_.push_back(i - 1);
}

grh_slots::~grh_slots() {
  if (const error_code ec = verbs_status_result(ibv_dereg_mr(mr_)))
    std::fprintf(stderr, "coverbs: ibv_dereg_mr of a datagram queue pair's GRH slots failed (%s)\n",
                 ec.message().c_str());
}

ibv_sge grh_slots::take() noexcept {
  if (free_.empty()) return {0, grh_bytes, mr_->lkey};
  const std::uint32_t i = free_.back();
  free_.pop_back();
  return {reinterpret_cast<std::uintptr_t>(bytes_.get() + std::size_t{i} * grh_bytes), grh_bytes, mr_->lkey};
}

ibv_sge grh_slots::overflow(std::uint32_t length) const noexcept {
  return {reinterpret_cast<std::uintptr_t>(bytes_.get() + overflow_offset_), length, mr_->lkey};
}

void grh_slots::release(std::uint64_t addr) noexcept {
  const auto offset = addr - reinterpret_cast<std::uintptr_t>(bytes_.get());
  free_.push_back(static_cast<std::uint32_t>(offset / grh_bytes));  // never beyond `count`: reserved
}

int post_datagram_recv(ibv_qp* qp, wr_node* n) {
  n->sg[0] = static_cast<grh_slots*>(n->context)->take();
  if (!n->sg[0].addr) return ENOBUFS;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &n->wr.recv, &bad);
}

void release_grh_slot(wr_node* n, error_code&) {
  const std::uint64_t addr = n->sg[0].addr;
  if (!addr) return;
  static_assert(sizeof n->sg - sizeof n->sg[0] >= grh_bytes, "the header fits behind the slot's SGE");
  std::memcpy(&n->sg[1], reinterpret_cast<const void*>(addr), grh_bytes);
  static_cast<grh_slots*>(n->context)->release(addr);
}

const std::uint8_t* grh_of(const wr_node& n) noexcept { return reinterpret_cast<const std::uint8_t*>(&n.sg[1]); }

}  // namespace coverbs::detail
