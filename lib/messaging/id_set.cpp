#include "messaging/id_set.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <random>
#include <utility>

namespace coverbs::detail {

namespace {

std::uint64_t random_word(std::random_device* rd, std::uint64_t& fallback) noexcept {
  if (rd) {
    try {
      return (std::uint64_t{(*rd)()} << 32) ^ (*rd)();
    } catch (...) {
    }
  }
  // No entropy source (random_device failed): the clock and the state's address, mixed (splitmix64).
  std::uint64_t z = (fallback += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

id_set::id_set() {
  std::uint64_t fallback = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                           reinterpret_cast<std::uintptr_t>(this);
  std::unique_ptr<std::random_device> rd;
  try {
    rd = std::make_unique<std::random_device>();
  } catch (...) {
  }
  k0_ = random_word(rd.get(), fallback);
  k1_ = random_word(rd.get(), fallback) | 1;  // odd: multiplying is then a bijection
  k2_ = random_word(rd.get(), fallback) | 1;
}

void id_set::grow() {
  const std::size_t old_capacity = capacity();
  const std::size_t capacity = old_capacity ? 2 * old_capacity : 16;
  // Allocated before anything changes: a bad_alloc leaves the set as it was.
  std::unique_ptr<std::uint64_t[]> old = std::exchange(table_, std::make_unique<std::uint64_t[]>(capacity));  // zeroed
  mask_ = capacity - 1;
  shift_ = 64 - static_cast<unsigned>(std::countr_zero(capacity));
  for (std::size_t i = 0; i < old_capacity; ++i) {
    const std::uint64_t id = old[i];
    if (id == 0) continue;
    std::size_t j = home(id);
    while (table_[j] != 0)
      j = (j + 1) & mask_;
    table_[j] = id;
  }
}

void id_set::clear() noexcept {
  if (table_) std::fill_n(table_.get(), capacity(), std::uint64_t{0});
  size_ = 0;
}

}  // namespace coverbs::detail
