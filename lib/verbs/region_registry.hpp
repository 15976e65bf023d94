#pragma once
// Private to lib/: which memory windows each memory region has bound now — what a region's deregistration
// asks (`errc::region_has_bound_windows`). The windows layer records its bindings here; the region layer only
// reads, so regions know nothing of windows.
//
// Each region has a cell listing the bindings made over it last, and a binding keeps the cell of the region
// it was made over last: a bind over that region again, and every invalidation, only sets the binding's own
// `counted` flag — no lock, no map, no locked instruction (natively the lock and map lookup of every bind and
// invalidation were about a quarter of a bind's bookkeeping, a locked add ~15 ns). A bind over another region
// than last time takes the lock once, to move the binding to that region's list. Deregistration counts the
// flags of the region's list. A deregistered region's cell is retired (a new region can get the same ibv_mr
// address) and freed when no binding keeps it.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>

namespace coverbs::detail {

struct region_cell;

/// One window's entry (embedded in the window's state): the region it was bound over last, its neighbours in
/// that region's list, and whether its current binding is live there (written by the window's executor, read
/// by deregistration on any thread).
struct region_binding {
  region_cell* region = nullptr;
  region_binding* prev = nullptr;
  region_binding* next = nullptr;
  std::atomic<bool> counted{false};
};

/// The binding `b` over `mr` is live: flags it in `mr`'s list (moving it there first when it was last over
/// another region). Out of memory: the binding goes uncounted (the device still refuses the deregistration).
void note_bound(region_binding& b, const ibv_mr* mr) noexcept;
/// The binding `b` is dead (its key invalidated or its window replaced).
inline void note_unbound(region_binding& b) noexcept { b.counted.store(false, std::memory_order_release); }
/// Takes `b` off its region's list (its window is destroyed).
void drop_binding(region_binding& b) noexcept;

/// Windows bound now to `mr`.
std::size_t windows_bound_to(const ibv_mr* mr) noexcept;
/// Windows bound now, over every region.
std::size_t windows_bound_now() noexcept;
/// `mr` was deregistered: retires its cell.
void forget_region(const ibv_mr* mr) noexcept;

}  // namespace coverbs::detail
