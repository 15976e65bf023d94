#pragma once
// Private to lib/: the set of correlation ids a message endpoint received in requests and has not answered yet
// (endpoint_impl.hpp). An open-addressing hash set (linear probing, deletion by backward shift): no allocation
// per id, unlike a node-based set, which paid a malloc and a free per call.
//
// The ids are the peer's, so a hostile peer chooses them: the hash is keyed by a random secret drawn per set
// (three random words: an xor, two odd multipliers, with xor-shifts between them), which the peer never sees,
// so it cannot pick ids that collide; and the endpoint bounds what a peer adds (max_unanswered; a reply the
// application started and that was cancelled or not sent goes back in past it), so the set holds at most
// max_unanswered plus the replies in flight, and the table twice that, rounded up to a power of two; it never
// shrinks while the endpoint lives. Id 0 is no call's (the endpoint refuses it before inserting) and marks an empty
// place.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace coverbs::detail {

class id_set {
public:
  id_set();
  id_set(const id_set&) = delete;
  id_set& operator=(const id_set&) = delete;

  std::size_t size() const noexcept { return size_; }
  /// Adds `id` (not 0); false when it is there already.
  bool insert(std::uint64_t id) {
    if ((size_ + 1) * 2 > capacity()) grow();
    std::size_t i = home(id);
    for (; table_[i] != 0; i = (i + 1) & mask_)
      if (table_[i] == id) return false;
    table_[i] = id;
    ++size_;
    return true;
  }
  /// Removes `id`; false when it was not there.
  bool erase(std::uint64_t id) noexcept {
    if (size_ == 0 || id == 0) return false;
    std::size_t i = home(id);
    for (; table_[i] != id; i = (i + 1) & mask_)
      if (table_[i] == 0) return false;
    // Backward shift: move up each later id of the run whose home is not between the hole and it.
    for (std::size_t j = (i + 1) & mask_; table_[j] != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(table_[j]);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        table_[i] = table_[j];
        i = j;
      }
    }
    table_[i] = 0;
    --size_;
    return true;
  }
  bool contains(std::uint64_t id) const noexcept {
    if (size_ == 0 || id == 0) return false;
    for (std::size_t i = home(id); table_[i] != 0; i = (i + 1) & mask_)
      if (table_[i] == id) return true;
    return false;
  }
  void clear() noexcept;

private:
  std::size_t capacity() const noexcept { return table_ ? mask_ + 1 : 0; }
  std::size_t home(std::uint64_t id) const noexcept {
    std::uint64_t x = (id ^ k0_) * k1_;
    x ^= x >> 32;
    x *= k2_;
    return static_cast<std::size_t>(x >> shift_);  // the high bits, which every bit of the id moves
  }
  void grow();

  std::unique_ptr<std::uint64_t[]> table_;
  std::size_t mask_ = 0;
  unsigned shift_ = 63;
  std::size_t size_ = 0;
  std::uint64_t k0_, k1_, k2_;
};

}  // namespace coverbs::detail
