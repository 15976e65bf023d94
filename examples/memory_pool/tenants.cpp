// The memory pool server's tenants: a free slot (or the one held longest) for a new id, the two windows
// bound over a tenant's slot through its own connection, a tenant taken over by another connection, and
// what a connection's end releases: its keys revoked at once, its slots held for a reconnect, then freed.
#include "server.hpp"

#include <coverbs_support/timings.hpp>

#include <algorithm>
#include <utility>

namespace memory_pool {

using namespace std::chrono_literals;
using statistics::us_since;

/// Takes the session's two leases and waits until both keys are dead; counts the live ones in `counter`.
awaitable<void> pool_server::revoke(session_state& s, std::uint64_t& counter) {
  cv::window_lease dying[] = {std::move(s.write_lease), std::move(s.read_lease)};  // the session holds none now
  ++revocations_;
  for (cv::window_lease& lease : dying) {
    if (!lease) continue;
    if (lease.active()) ++counter;
    co_await lease.async_revoke();  // completes at once when already dead
  }
  --revocations_;
}

/// Binds a write and a read window over the session's tenant slot, through the session's queue pair.
awaitable<cv::error_code> pool_server::grant(session_state& s) {
  const auto t = tenants_.find(s.tenant_id);
  if (t == tenants_.end()) co_return asio::error::not_found;  // the tenant left meanwhile
  const cv::window_range range{t->second.offset, config_.slot_size};
  const clock_type::duration no_time_limit{};
  const std::pair<cv::window_lease*, cv::access> wanted[] = {{&s.write_lease, cv::access::remote_write},
                                                             {&s.read_lease, cv::access::remote_read}};
  for (const auto& [lease, right] : wanted) {
    const auto t0 = clock_type::now();
    auto [ec, granted] = co_await windows_->async_lease(s.link.qp(), pool_mr_, range, right, no_time_limit, tuple);
    if (ec) {
      ++grant_failures_;
      errors_.push_back("grant: " + ec.message());
      co_return ec;
    }
    bind_us_.add(us_since(t0));
    *lease = std::move(granted);
    ++windows_granted_;
    bytes_exposed_ += config_.slot_size;
  }
  co_return cv::error_code{};
}

awaitable<message> pool_server::get_keys(session_state& s, std::uint64_t tenant_id) {
  if (tenant_id == 0) co_return message{.status = refusal::bad_request};
  if (stopping_) co_return message{.status = refusal::shutting_down};
  for (;;) {
    co_await wait_until([&] { return !compacting_ || s.ended; }, 60s);
    if (s.ended) co_return message{.status = refusal::connection_ended};
    auto t = tenants_.find(tenant_id);
    if (t == tenants_.end() || t->second.owner != &s) {
      if (s.owned.size() >= config_.tenants_per_connection) {
        ++tenant_limit_refusals_;
        co_return message{.status = refusal::tenant_limit,
                          .count = static_cast<std::uint32_t>(config_.tenants_per_connection)};
      }
      if (t == tenants_.end()) {
        const std::optional<std::size_t> offset = take_slot();
        if (!offset) co_return message{.status = refusal::no_free_slot};
        t = tenants_.emplace(tenant_id, tenant{.offset = *offset}).first;
        ++tenants_seen_;
      } else {
        ++(t->second.owner ? tenants_taken_over_ : tenants_reclaimed_);
      }
      t->second.owner = &s;
      s.owned.push_back(tenant_id);
      co_await take_over(s, tenant_id);
      continue;  // the compaction may have begun meanwhile
    }
    const std::size_t offset = t->second.offset;
    const bool current = s.tenant_id == tenant_id && s.write_lease.active() && s.read_lease.active() &&
                         s.write_lease.key().addr == reinterpret_cast<std::uint64_t>(pool_mr_.data() + offset);
    if (!current) {
      co_await revoke(s, windows_revoked_);
      s.tenant_id = tenant_id;
      const cv::error_code ec = co_await grant(s);
      if (ec) co_return message{.status = refusal::grant_failed};
    }
    // A compaction that began while the windows were being bound has moved the slot: bind again. A
    // connection that presented the same id meanwhile has taken the tenant: give the windows up.
    t = tenants_.find(tenant_id);
    const bool ours = t != tenants_.end() && t->second.owner == &s;
    if (!compacting_ && ours && t->second.offset == offset) break;
    co_await revoke(s, windows_revoked_);
    if (!ours) {
      if (s.tenant_id == tenant_id) s.tenant_id = 0;
      co_return message{.status = refusal::tenant_taken_over};
    }
  }
  co_return message{.generation = generation_, .write_key = s.write_lease.key(), .read_key = s.read_lease.key()};
}

/// The tenant now belongs to `s`: every other connection that held it forgets it, its windows revoked.
awaitable<void> pool_server::take_over(session_state& s, std::uint64_t tenant_id) {
  const std::vector<std::shared_ptr<session_state>> all(sessions_.begin(), sessions_.end());
  for (const auto& other : all) {
    if (other.get() == &s) continue;
    std::erase(other->owned, tenant_id);
    if (other->tenant_id != tenant_id) continue;
    other->tenant_id = 0;
    co_await revoke(*other, windows_revoked_);
  }
}

/// A free slot of the current half, marked used; when none is free, the slot held longest for a reconnect
/// (its tenant is freed). @returns its offset in the pool, or nothing when every slot has a live owner.
std::optional<std::size_t> pool_server::take_slot() {
  auto free = std::find(slot_used_.begin(), slot_used_.end(), false);
  if (free == slot_used_.end()) {
    auto oldest = tenants_.end();
    for (auto t = tenants_.begin(); t != tenants_.end(); ++t)
      if (!t->second.owner && (oldest == tenants_.end() || t->second.held_until < oldest->second.held_until))
        oldest = t;
    if (oldest == tenants_.end()) return std::nullopt;
    free_tenant(oldest);
    ++tenants_evicted_;
    free = std::find(slot_used_.begin(), slot_used_.end(), false);
  }
  *free = true;
  return (half_ * slots_per_half_ + static_cast<std::size_t>(free - slot_used_.begin())) * config_.slot_size;
}

/// Frees the tenant's slot and forgets it. @returns the next tenant.
std::map<std::uint64_t, tenant>::iterator pool_server::free_tenant(std::map<std::uint64_t, tenant>::iterator t) {
  const std::size_t slot = t->second.offset / config_.slot_size - half_ * slots_per_half_;
  if (slot < slot_used_.size()) slot_used_[slot] = false;
  return tenants_.erase(t);
}

/// The connection ended (its windows are revoked): its tenants are held --hold-seconds for a reconnect
/// (or freed now with --hold-seconds 0).
void pool_server::release(session_state& s) {
  const auto until = clock_type::now() + config_.hold;
  for (const std::uint64_t id : std::exchange(s.owned, {})) {
    auto t = tenants_.find(id);
    if (t == tenants_.end() || t->second.owner != &s) continue;
    ++tenants_released_;
    if (config_.hold.count() == 0) {
      free_tenant(t);
    } else {
      t->second.owner = nullptr;
      t->second.held_until = until;
    }
  }
  s.tenant_id = 0;
  sweep_.cancel();  // `expire_held` re-arms for the new holds
}

/// Frees every held slot whose time is up, then sleeps until the next one's (or a new hold); until stop().
awaitable<void> pool_server::expire_held() {
  while (!stopping_) {
    const auto now = clock_type::now();
    auto next = now + 1h;
    for (auto t = tenants_.begin(); t != tenants_.end();) {
      if (t->second.owner) {
        ++t;
      } else if (t->second.held_until <= now) {
        t = free_tenant(t);
        ++tenants_expired_;
      } else {
        next = std::min(next, t->second.held_until);
        ++t;
      }
    }
    sweep_.expires_at(next);
    co_await sweep_.async_wait(tuple);
  }
}

message pool_server::status() const {
  message m{.count = static_cast<std::uint32_t>(slots_per_half_), .generation = generation_};
  m.free_slots = static_cast<std::uint32_t>(std::count(slot_used_.begin(), slot_used_.end(), false));
  m.held_slots = static_cast<std::uint32_t>(
      std::count_if(tenants_.begin(), tenants_.end(), [](const auto& t) { return !t.second.owner; }));
  return m;
}

awaitable<message> pool_server::leave(session_state& s, std::uint64_t tenant_id) {
  co_await wait_until([this] { return !compacting_; }, 60s);
  auto t = tenants_.find(tenant_id);
  if (t == tenants_.end() || t->second.owner != &s)
    co_return message{.status = refusal::not_your_tenant, .generation = generation_};
  if (s.tenant_id == tenant_id) {
    s.tenant_id = 0;
    co_await revoke(s, windows_revoked_);
  }
  t = tenants_.find(tenant_id);
  if (t != tenants_.end() && t->second.owner == &s) free_tenant(t);
  std::erase(s.owned, tenant_id);
  co_return message{.generation = generation_};
}

}  // namespace memory_pool
