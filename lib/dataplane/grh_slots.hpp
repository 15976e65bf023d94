#pragma once
// Private to lib/: the 40-byte slots a datagram queue pair's receives put in front of the caller's spans. A UD
// receive's first 40 bytes get the global route header (IBA 11.4.1.1: whether or not one came), so each
// posted receive's scatter list is [slot, caller's spans...]: the payload starts at the caller's first byte,
// and no caller can get the GRH wrong. One slot per receive credit, taken when a receive is posted (waiting
// receives hold none) and given back when it completes, after its header was copied into the node.

#include <coverbs/error.hpp>
#include <coverbs/received.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace coverbs::detail {

struct wr_node;

/// The bytes of a global route header (ibv_grh), and of the slot that receives it.
inline constexpr std::uint32_t grh_bytes = 40;

/// `count` slots of `grh_bytes`, and an overflow area of `overflow_bytes` (a datagram's most), in one region
/// registered with local_write.
class grh_slots {
public:
  /// @throws system_error with the errno of ibv_reg_mr(3).
  grh_slots(ibv_pd* pd, std::uint32_t count, std::uint32_t overflow_bytes);
  ~grh_slots();
  grh_slots(const grh_slots&) = delete;
  grh_slots& operator=(const grh_slots&) = delete;

  /// A free slot as an SGE, or one with `addr` 0 when every slot is taken.
  ibv_sge take() noexcept;
  /// Gives back the slot at `addr` (an `addr` that take() returned).
  void release(std::uint64_t addr) noexcept;
  /// The first `length` bytes (at most `overflow_bytes`) of the overflow area, shared by every receive: where
  /// the part of a datagram beyond a receive's spans lands, never read.
  ibv_sge overflow(std::uint32_t length) const noexcept;

private:
  std::unique_ptr<std::byte[]> bytes_;
  ibv_mr* mr_ = nullptr;
  std::vector<std::uint32_t> free_;  // indices of free slots
  std::size_t overflow_offset_ = 0;  // the overflow area, behind the slots
};

/// A datagram receive's `wr_node::post`: takes a slot into `n->sg[0]` and posts the receive; 0 or an errno
/// (ENOBUFS with no slot free, which credits prevent: one slot per credit, and one for the receive whose completion
/// returned its credit and posted a waiting one before giving its slot back).
int post_datagram_recv(ibv_qp* qp, wr_node* n);
/// A datagram receive's `wr_node::on_complete`: copies the slot's header into the node (`grh_of`), where the
/// completion reads it, and gives the slot back. Nothing for a receive never posted (`n->sg[0].addr` is 0).
void release_grh_slot(wr_node* n, error_code& ec);
/// The sender of the datagram receive `n` (its header copied by release_grh_slot) completed by `wc`, which came
/// with `qkey` (the receiving queue pair's): GID from the GRH (or RoCE v2's IPv4 header), qp_num, SL, P_Key index.
datagram_sender sender_of(const wr_node& n, const ibv_wc& wc, std::uint32_t qkey) noexcept;
/// The header release_grh_slot copied: `grh_bytes` bytes in the node's scatter list, which the device no
/// longer reads once the receive completed.
const std::uint8_t* grh_of(const wr_node& n) noexcept;

}  // namespace coverbs::detail
