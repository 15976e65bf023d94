#pragma once
// The credit accounting of one message endpoint (message_endpoint.hpp, "Credits"), without any I/O, so
// that it is tested on its own.
//
// Receives come in two kinds, told apart only by this accounting (a receive queue consumes its receives
// in posting order, whatever the message): `data` receives for data, requests and replies, and
// `control_slots` control receives for standalone credit messages, which the endpoint reposts at once.
// Each side holds the credits the peer granted it (sending side) and counts what it has reposted and not
// reported yet, and what the peer still holds (receiving side).

#include <cstdint>
#include <string>

namespace coverbs::detail {

class credit_ledger {
public:
  /// Control receives on each side: a protocol constant, both sides must agree on it.
  static constexpr std::uint32_t control_slots = 4;

  /// `data_slots` receives of this side are posted and not reported yet (the first update reports them);
  /// the peer's control receives count as granted from the start.
  explicit credit_ledger(std::uint32_t data_slots) noexcept
      : data_slots_(data_slots), half_data_slots_(data_slots / 2 ? data_slots / 2 : 1), unreported_data_(data_slots) {}

  // --- sending side ---
  std::uint32_t data_credits() const noexcept { return data_credits_; }
  std::uint32_t control_credits() const noexcept { return control_credits_; }
  /// Takes one credit for a message of that kind; false when none is left (the message waits).
  bool take_data() noexcept { return data_credits_ ? (--data_credits_, true) : false; }
  bool take_control() noexcept { return control_credits_ ? (--control_credits_, true) : false; }
  /// Credits a header returned. @returns empty, or what was wrong (more control credits than exist).
  std::string returned(std::uint32_t data, std::uint32_t control);
  /// As returned(), without the text: false (and nothing taken) when returned() would say what was wrong.
  bool try_return(std::uint32_t data, std::uint32_t control) noexcept {
    // No endpoint has more than 65535 receive slots: a peer returning more credits than that lies.
    if (control_credits_ + control > control_slots || data_credits_ + data > 0xFFFF) return false;
    data_credits_ += data;
    control_credits_ += control;
    return true;
  }

  // --- receiving side ---
  /// A message of that kind arrived. @returns empty, or what was wrong (the peer had no credit for it).
  std::string arrived(bool control);
  /// As arrived(), without the text: false (and nothing counted) when arrived() would say what was wrong.
  bool try_arrive(bool control) noexcept {
    std::uint32_t& held = control ? peer_control_credits_ : peer_data_credits_;
    if (held == 0) return false;
    --held;
    return true;
  }
  /// A receive of that kind was posted again.
  void reposted(bool control) noexcept { ++(control ? unreported_control_ : unreported_data_); }
  /// What the next header returns (at most 65535 each); the rest stays unreported.
  struct report {
    std::uint16_t data = 0, control = 0;
  };
  report take_report() noexcept {
    const std::uint32_t d = unreported_data_ < 0xFFFF ? unreported_data_ : 0xFFFF;
    const std::uint32_t c = unreported_control_ < 0xFFFF ? unreported_control_ : 0xFFFF;
    unreported_data_ -= d;
    unreported_control_ -= c;
    peer_data_credits_ += d;
    peer_control_credits_ += c;
    return {static_cast<std::uint16_t>(d), static_cast<std::uint16_t>(c)};
  }
  std::uint32_t unreported_data() const noexcept { return unreported_data_; }
  std::uint32_t unreported_control() const noexcept { return unreported_control_; }
  /// The data credits the peer holds by this side's count (reported minus arrived).
  std::uint32_t peer_data_credits() const noexcept { return peer_data_credits_; }

  /// Whether a standalone credit message is due: data credits to return and either half the data slots'
  /// worth of them or a peer that has none left; or, when this side waits for data credits (`blocked`), the
  /// peer has no control credit left to send the update it may owe (this side holds all of them).
  bool update_due(bool blocked) const noexcept {
    if (unreported_data_ > 0 && (unreported_data_ >= half_data_slots_ || peer_data_credits_ == 0)) return true;
    return blocked && data_credits_ == 0 && unreported_control_ >= control_slots;
  }

private:
  std::uint32_t data_slots_;
  std::uint32_t half_data_slots_;  // max(1, data_slots_ / 2): the update threshold
  std::uint32_t data_credits_ = 0, control_credits_ = control_slots;           // sending side
  std::uint32_t unreported_data_, unreported_control_ = 0;                     // receiving side
  std::uint32_t peer_data_credits_ = 0, peer_control_credits_ = control_slots;
};

}  // namespace coverbs::detail
