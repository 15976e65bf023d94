#include <coverbs/detail/credit_ledger.hpp>

namespace coverbs::detail {

std::string credit_ledger::returned(std::uint32_t data, std::uint32_t control) {
  if (control_credits_ + control > control_slots)
    return "the peer returned " + std::to_string(control) + " control credits while this side held " +
           std::to_string(control_credits_) + " of " + std::to_string(control_slots);
  // No endpoint has more than 65535 receive slots: a peer returning more credits than that lies.
  if (data_credits_ + data > 0xFFFF)
    return "the peer returned " + std::to_string(data) + " data credits while this side held " +
           std::to_string(data_credits_) + ": more than any endpoint's receive slots (at most 65535)";
  data_credits_ += data;
  control_credits_ += control;
  return {};
}

std::string credit_ledger::arrived(bool control) {
  std::uint32_t& held = control ? peer_control_credits_ : peer_data_credits_;
  if (held == 0)
    return std::string("a ") + (control ? "credit message" : "message") + " arrived while the peer held no " +
           (control ? "control" : "data") + " credit (" +
           std::to_string(control ? control_slots : data_slots_) + " receives of that kind here)";
  --held;
  return {};
}

}  // namespace coverbs::detail
