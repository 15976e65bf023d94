#pragma once
// A registrar that pretends: regions are heap-allocated ibv_mr structs with made-up keys. Tests can make it
// fail, hold a registration "running" until released, and count what is live.
#include <coverbs/registration_service.hpp>

#include "../registration_support.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <deque>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace coverbs::test {

class fake_registrar final : public registrar {
public:
  ibv_mr* reg_mr(ibv_pd* pd, std::span<std::byte> buffer, access rights, error_code& ec) noexcept override {
    gate_.pass();
    if (const auto d = delay_.load()) std::this_thread::sleep_for(std::chrono::microseconds(d));
    std::lock_guard lock(mutex_);
    ++reg_calls_;
    if (!failures_.empty()) {
      ec = failures_.front();
      failures_.pop_front();
      return nullptr;
    }
    if (buffer.empty()) {
      ec = errno_code(EINVAL);
      return nullptr;
    }
    for (const auto& [bad, code] : bad_ranges_) // as the kernel: one bad page fails the whole registration
      if (buffer.data() < bad.data() + bad.size() && bad.data() < buffer.data() + buffer.size()) {
        ec = code;
        return nullptr;
      }
    auto* mr = new ibv_mr{};
    mr->pd = pd;
    mr->addr = buffer.data();
    mr->length = buffer.size();
    mr->lkey = mr->rkey = ++next_key_;
    (void)rights;
    live_.insert(mr);
    registered_.push_back(buffer);
    ec = {};
    return mr;
  }
  error_code dereg_mr(ibv_mr* mr) noexcept override {
    std::lock_guard lock(mutex_);
    if (!live_.erase(mr)) return errno_code(EINVAL);
    delete mr;
    return {};
  }
  error_code rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, std::span<std::byte> buffer, access,
                      bool& still_valid) noexcept override {
    std::lock_guard lock(mutex_);
    still_valid = true;
    if (!rereg_supported_) return errno_code(EOPNOTSUPP);
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) mr->addr = buffer.data(), mr->length = buffer.size();
    if (flags & IBV_REREG_MR_CHANGE_PD) mr->pd = pd;
    mr->lkey = mr->rkey = ++next_key_;
    return {};
  }

  /// The next registrations fail with these codes, in order.
  void fail_next(error_code ec, int times = 1) {
    std::lock_guard lock(mutex_);
    for (int i = 0; i < times; ++i)
      failures_.push_back(ec);
  }
  /// Every registration touching `range` fails with `ec` (as EFAULT for pages that are not mapped, or
  /// read-only while the rights ask for write access).
  void fail_range(std::span<std::byte> range, error_code ec) {
    std::lock_guard lock(mutex_);
    bad_ranges_.emplace_back(range, ec);
  }
  /// The ranges of the successful registrations, in order.
  std::vector<std::span<std::byte>> registered() const {
    std::lock_guard lock(mutex_);
    return registered_;
  }
  /// True when a successful registration touched `range`.
  bool registered_any_of(std::span<std::byte> range) const {
    std::lock_guard lock(mutex_);
    for (const auto& r : registered_)
      if (r.data() < range.data() + range.size() && range.data() < r.data() + r.size()) return true;
    return false;
  }
  /// Every reg_mr takes this long (a slow registrar: the workers stay busy and requests queue up).
  void set_delay(std::chrono::microseconds d) { delay_.store(d.count()); }
  /// While held, reg_mr blocks (the request is "running").
  void hold() { gate_.hold(); }
  void release() { gate_.release(); }
  /// Blocks until `n` reg_mr calls have started.
  void wait_started(int n) { gate_.wait_arrived(n); }
  void set_rereg_supported(bool on) {
    std::lock_guard lock(mutex_);
    rereg_supported_ = on;
  }
  std::size_t live() const {
    std::lock_guard lock(mutex_);
    return live_.size();
  }
  int reg_calls() const {
    std::lock_guard lock(mutex_);
    return reg_calls_;
  }
  /// Gives a region the caller owns back to this registrar (tests cannot let memory_region call the real verb).
  void drop(memory_region& mr) {
    if (ibv_mr* raw = mr.release()) dereg_mr(raw);
  }

private:
  mutable std::mutex mutex_;
  std::atomic<std::int64_t> delay_{0};
  gate gate_;
  std::set<ibv_mr*> live_;
  std::deque<error_code> failures_;
  std::vector<std::pair<std::span<std::byte>, error_code>> bad_ranges_;
  std::vector<std::span<std::byte>> registered_;
  bool rereg_supported_ = false;
  int reg_calls_ = 0;
  std::uint32_t next_key_ = 0;
};

} // namespace coverbs::test
