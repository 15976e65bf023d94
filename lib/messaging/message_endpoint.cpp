#include "messaging/endpoint_impl.hpp"

namespace coverbs {

message_endpoint::message_endpoint(protection_domain& pd, queue_pair& qp, const message_options& options)
    : impl_(std::make_shared<detail::endpoint_impl>(pd, qp, options, false)), ex_(qp.get_executor()) {
  impl_->start();
}

message_endpoint::message_endpoint(protection_domain& pd, queue_pair& qp, const message_options& options, hold_sends_t)
    : impl_(std::make_shared<detail::endpoint_impl>(pd, qp, options, true)), ex_(qp.get_executor()) {
  impl_->start();
}

void message_endpoint::start_sending() noexcept {
  if (impl_) impl_->start_sending();
}

message_endpoint::message_endpoint(message_endpoint&& other) noexcept = default;

message_endpoint& message_endpoint::operator=(message_endpoint&& other) noexcept {
  if (this != &other) {
    close();
    impl_ = std::move(other.impl_);
    ex_ = other.ex_;
  }
  return *this;
}

message_endpoint::~message_endpoint() { close(); }

void message_endpoint::close() noexcept {
  if (impl_) impl_->close();
}

void message_endpoint::shutdown() noexcept {
  if (impl_) impl_->close(false);
}

std::size_t message_endpoint::slot_size() const noexcept { return impl_ ? impl_->slot_size() : 0; }

queue_pair& message_endpoint::get_queue_pair() const {
  if (!impl_) throw system_error(make_error_code(errc::endpoint_closed), "message_endpoint::get_queue_pair");
  return impl_->qp();
}

std::size_t message_endpoint::peer_slot_size() const noexcept { return impl_ ? impl_->peer_slot_size() : 0; }

error_code message_endpoint::error() const noexcept {
  return impl_ ? impl_->error() : make_error_code(errc::endpoint_closed);
}

std::string message_endpoint::diagnostic() const { return impl_ ? impl_->diagnostic() : std::string(); }

message_statistics message_endpoint::statistics() const noexcept {
  return impl_ ? impl_->statistics() : message_statistics{};
}

std::uint32_t message_endpoint::credits() const noexcept { return impl_ ? impl_->credits() : 0; }

}  // namespace coverbs
