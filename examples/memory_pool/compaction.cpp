// The memory pool server's compaction: once enough sessions wait for it, every window is revoked (each key
// dead when its revocation completes), the live slots are copied, packed, into the other half, and fresh
// windows are bound for every connection that can still carry them; the waiting sessions are then woken.
#include "server.hpp"

#include <coverbs_support/timings.hpp>

#include <cstring>
#include <utility>

namespace memory_pool {

using namespace std::chrono_literals;
using statistics::us_since;

awaitable<message> pool_server::wait_compaction(session_state& s) {
  const std::uint64_t before = generation_;
  if (s.ended) co_return message{.status = refusal::connection_ended};
  s.waiting = true;
  ++waiting_;
  s.wake.expires_after(120s);
  co_await s.wake.async_wait(tuple);  // cancelled by the compaction, by stop, or by the connection's end
  s.waiting = false;
  --waiting_;
  if (generation_ == before) {
    const refusal why = s.ended     ? refusal::connection_ended
                        : stopping_ ? refusal::shutting_down
                                    : refusal::no_compaction;
    co_return message{.status = why, .generation = generation_};
  }
  co_return message{.generation = generation_};
}

awaitable<message> pool_server::compact(std::uint32_t waiters) {
  // Only sessions holding a slot wait for a compaction (as the clients of this program do): refuse a wait
  // that could never end.
  if (waiters > slots_per_half_)
    co_return message{.status = refusal::too_many_waiting, .count = static_cast<std::uint32_t>(slots_per_half_)};
  const bool quorum = co_await wait_until([&] { return waiting_ >= waiters || stopping_; }, 60s);
  if (!quorum) co_return message{.status = refusal::barrier_timed_out};
  co_await wait_until([this] { return !compacting_; }, 60s);
  if (stopping_) co_return message{.status = refusal::shutting_down};
  compacting_ = true;
  const auto t0 = clock_type::now();
  // 1. Revoke every key: once these complete no peer can touch the pool.
  std::uint64_t revoked = 0;
  const std::vector<std::shared_ptr<session_state>> all(sessions_.begin(), sessions_.end());
  for (const auto& s : all)
    co_await revoke(*s, revoked);
  co_await wait_until([this] { return revocations_ == 0; }, 60s);  // those begun elsewhere (sessions ending)
  // 2. Copy the live slots, packed, into the other half.
  const int to = 1 - half_;
  std::vector<bool> used(slots_per_half_, false);
  std::size_t next = 0, moved = 0;
  for (auto& [id, t] : tenants_) {
    const std::size_t offset = (to * slots_per_half_ + next) * config_.slot_size;
    std::memcpy(pool_memory_.data() + offset, pool_memory_.data() + t.offset, config_.slot_size);
    t.offset = offset;
    used[next++] = true;
    moved += config_.slot_size;
  }
  half_ = to;
  slot_used_ = std::move(used);
  ++generation_;
  // 3. Fresh keys for every connection that can still carry them.
  std::uint64_t granted = 0;
  for (const auto& s : all) {
    const auto t = tenants_.find(s->tenant_id);
    if (t == tenants_.end() || t->second.owner != s.get() || s->ended || !s->link.conn().connected() ||
        s->link.qp().error())
      continue;
    const cv::error_code ec = co_await grant(*s);
    if (!ec) granted += 2;
  }
  compacting_ = false;
  const double took = us_since(t0);
  ++compactions_;
  moved_bytes_ += moved;
  revoked_by_compaction_ += revoked;
  windows_revoked_ += revoked;
  compaction_us_.add(took);
  for (const auto& s : sessions_)
    if (s->waiting) s->wake.cancel();
  co_return message{.generation = generation_,
                    .revoked = revoked,
                    .granted = granted,
                    .moved_bytes = moved,
                    .took_us = static_cast<std::uint64_t>(took)};
}

}  // namespace memory_pool
