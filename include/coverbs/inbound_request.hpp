#pragma once
/// @file
/// `inbound_request`: a call's request as a server receives it (`message_endpoint::async_receive_request`),
/// answered with `message_endpoint::async_reply` — from the coroutine that received it or any later one.

#include <coverbs/inbound_message.hpp>

#include <cstdint>
#include <utility>

namespace coverbs {

/// The request's payload, viewed in its receive slot (an `inbound_message`), and the correlation id the reply
/// carries back. Move-only: the id moves with the request (a moved-from request holds no call, id 0, and
/// `async_reply` refuses it). Releasing it (or destroying it) gives the slot back; the reply does not need it.
/// Each request takes one reply: the endpoint refuses a second one (`message_endpoint::async_reply`).
class inbound_request {
public:
  inbound_request() noexcept = default;
  inbound_request(inbound_message message, std::uint64_t correlation_id) noexcept
      : message_(std::move(message)), id_(correlation_id) {}
  inbound_request(inbound_request&& other) noexcept
      : message_(std::move(other.message_)), id_(std::exchange(other.id_, 0)) {}
  inbound_request& operator=(inbound_request&& other) noexcept {
    if (this != &other) {
      message_ = std::move(other.message_);
      id_ = std::exchange(other.id_, 0);
    }
    return *this;
  }
  inbound_request(const inbound_request&) = delete;
  inbound_request& operator=(const inbound_request&) = delete;

  std::span<const std::byte> bytes() const noexcept { return message_.bytes(); }
  std::string_view str() const noexcept { return message_.str(); }
  std::size_t size() const noexcept { return message_.size(); }
  /// The caller's id for this call (opaque: echo it, do not interpret it); 0 when the request holds no call
  /// (default-constructed or moved from).
  std::uint64_t correlation_id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return static_cast<bool>(message_); }
  /// Gives the request's slot back (the correlation id stays, so the request can still be answered).
  void release() noexcept { message_.release(); }
  /// The request's message, e.g. to keep its bytes after answering.
  inbound_message& message() noexcept { return message_; }

private:
  inbound_message message_;
  std::uint64_t id_ = 0;
};

}  // namespace coverbs
