#pragma once
/// @file
/// `inbound_request`: a call's request as a server receives it (`message_endpoint::async_receive_request`),
/// answered with `message_endpoint::async_reply` — from the coroutine that received it or any later one.

#include <coverbs/inbound_message.hpp>

#include <cstdint>
#include <utility>

namespace coverbs {

/// The request's payload, viewed in its receive slot (an `inbound_message`), and the correlation id the reply
/// carries back. Move-only. Releasing it (or destroying it) gives the slot back; the reply does not need it.
class inbound_request {
public:
  inbound_request() noexcept = default;
  inbound_request(inbound_message message, std::uint64_t correlation_id) noexcept
      : message_(std::move(message)), id_(correlation_id) {}

  std::span<const std::byte> bytes() const noexcept { return message_.bytes(); }
  std::string_view str() const noexcept { return message_.str(); }
  std::size_t size() const noexcept { return message_.size(); }
  /// The caller's id for this call (opaque: echo it, do not interpret it).
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
