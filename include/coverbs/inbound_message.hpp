#pragma once
/// @file
/// `inbound_message`: a message a `message_endpoint` received, viewed in place in its registered receive
/// slot (zero copy) until it is released.
///
/// The slot is posted again as a receive — and its credit returned to the peer with the next message or
/// credit update — when the message is released: `release()`, destruction, or assignment. Holding messages
/// holds the peer's credits: a peer whose credits are all held waits (it never fails, and never meets
/// receiver-not-ready).
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe. A message may be read, released or destroyed on any
/// thread (hand it over with the synchronisation you would use for any object): the repost runs on the
/// endpoint's executor — at once when the releasing thread already runs it, else dispatched there (the
/// message's reference keeps the endpoint's state alive until it has run). Release before the endpoint's
/// execution context is destroyed, or after: a message released once the context has shut down posts
/// nothing.
///
/// The message keeps the endpoint's receive slots alive, so it may outlive the `message_endpoint` (once the
/// endpoint is closed or failed, a released slot is not posted again).

#include <coverbs/error.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

namespace coverbs {

namespace detail {
class endpoint_impl;
/// Posts `slot` of `impl` again, on the endpoint's executor (dispatched: from any thread).
void release_slot(std::shared_ptr<endpoint_impl> impl, std::uint32_t slot) noexcept;
}  // namespace detail

/// A received message: its payload bytes in the receive slot. Move-only; empty when default-constructed,
/// moved from, released, or handed with an error.
class inbound_message {
public:
  inbound_message() noexcept = default;
  inbound_message(inbound_message&& other) noexcept
      : impl_(std::move(other.impl_)), slot_(other.slot_), bytes_(other.bytes_) {
    other.bytes_ = {};
  }
  inbound_message& operator=(inbound_message&& other) noexcept {
    if (this != &other) {
      release();
      impl_ = std::move(other.impl_);
      slot_ = other.slot_;
      bytes_ = other.bytes_;
      other.bytes_ = {};
    }
    return *this;
  }
  inbound_message(const inbound_message&) = delete;
  inbound_message& operator=(const inbound_message&) = delete;
  ~inbound_message() { release(); }

  /// The payload (without the header), valid until release.
  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// The payload as characters.
  std::string_view str() const noexcept {
    return {reinterpret_cast<const char*>(bytes_.data()), bytes_.size()};
  }
  std::size_t size() const noexcept { return bytes_.size(); }
  /// True while the message holds a slot.
  explicit operator bool() const noexcept { return impl_ != nullptr; }

  /// Gives the slot back: it is posted again as a receive (on the endpoint's executor, from any thread) and
  /// its credit returned to the peer.
  void release() noexcept {
    if (impl_) detail::release_slot(std::move(impl_), slot_);
    bytes_ = {};
  }

  /// For the endpoint: a view of `bytes` in receive slot `slot` of `impl`.
  inbound_message(std::shared_ptr<detail::endpoint_impl> impl, std::uint32_t slot,
                  std::span<const std::byte> bytes) noexcept
      : impl_(std::move(impl)), slot_(slot), bytes_(bytes) {}

private:
  std::shared_ptr<detail::endpoint_impl> impl_;
  std::uint32_t slot_ = 0;
  std::span<const std::byte> bytes_;
};

}  // namespace coverbs
