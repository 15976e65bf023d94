#pragma once
/// @file
/// Bulk transfers (rendezvous): a call whose request carries a descriptor of the caller's registered memory, so
/// that the callee moves a payload larger than a message slot with one RDMA read or write — what Mercury calls
/// bulk and UCX calls rndv (docs/messaging.md, "Bulk").
///
/// ```cpp
/// // caller: the peer reads `mr`'s first n bytes; the window's key dies before the reply is handed over
/// auto reply = co_await coverbs::async_bulk_call(ep, windows, mr, {0, n}, access::remote_read, request);
/// // callee
/// auto req = co_await ep.async_receive_request();
/// coverbs::bulk_request bulk = coverbs::parse_bulk_request(req.bytes());
/// co_await coverbs::async_bulk_read(ep.get_queue_pair(), bulk.descriptor, coverbs::span_of(mr, 0, max));
/// co_await ep.async_reply(req, done);
/// ```
///
/// @par The key lives as long as the call
/// `async_bulk_call` binds a pooled window over the payload (a `window_lease`, or takes the one it is given),
/// puts its descriptor in front of the request, and when the call ends — reply received, failed, or cancelled
/// (any type, e.g. `call || timer`) — revokes the key and completes only once the key is dead on the device. So
/// when the handler runs, no RDMA read or write by the peer can reach the payload any more: a late access fails
/// at the peer with `wc_errc::rem_access_err` (which moves *the peer's* queue pair to the error state). With a
/// pool of type-2 windows (`window_pool`'s default) only the queue pair the window was bound through, the call's,
/// can use the key; a type-1 pool's key works through any queue pair of the caller's protection domain while
/// the call runs — give bulk calls a type-2 pool when peers share a protection domain.
///
/// @par Refusals before posting
/// The callee's helpers refuse a descriptor before anything is posted, and the queue pair stays healthy: a
/// length above the local span, the most this side allows (`errc::bulk_too_large`); a descriptor without the
/// right the transfer needs, or a request that does not start with one (`errc::bad_bulk_descriptor`).
///
/// @par Thread Safety
/// As the endpoint's and the queue pair's: use them from their executor.

#include <coverbs/access.hpp>
#include <coverbs/buffer.hpp>
#include <coverbs/detail/token_check.hpp>
#include <coverbs/error.hpp>
#include <coverbs/inbound_message.hpp>
#include <coverbs/memory_region.hpp>
#include <coverbs/message_endpoint.hpp>
#include <coverbs/queue_pair.hpp>
#include <coverbs/window_lease.hpp>
#include <coverbs/window_pool.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace coverbs {

/// A caller's registered memory as a request carries it: the key (address, length in bytes, rkey) and what the
/// callee may do with it (`access::remote_read`: read it, `access::remote_write`: write into it, or both).
struct bulk_descriptor {
  /// Bytes on the wire: magic "CBBK", rights (u32), address (u64), length (u64), rkey (u32), little-endian.
  static constexpr std::size_t wire_size = 28;
  remote_key key;
  access rights = access::none;

  /// The descriptor of a live lease granting `rights`.
  static bulk_descriptor of(const window_lease& lease, access rights) noexcept { return {lease.key(), rights}; }
  /// The wire form (`wire_size` bytes).
  std::array<std::byte, wire_size> encode() const noexcept;
  friend bool operator==(const bulk_descriptor&, const bulk_descriptor&) = default;
};

/// A request (or reply) that starts with a bulk descriptor, as its receiver sees it: the descriptor and the
/// bytes after it (a view into the message: valid while the message is held).
struct bulk_request {
  bulk_descriptor descriptor;
  std::span<const std::byte> payload;
};

/// Reads the descriptor at the start of `message` (a request of `async_bulk_call`, or any message that starts
/// with `bulk_descriptor::encode()`).
/// @par Errors `errc::bad_bulk_descriptor`: shorter than `bulk_descriptor::wire_size` bytes, a wrong magic, or
/// rights other than remote_read / remote_write (or none).
bulk_request parse_bulk_request(std::span<const std::byte> message, error_code& ec) noexcept;
/// As above; throws `system_error` whose text says which of those it was.
bulk_request parse_bulk_request(std::span<const std::byte> message);

namespace detail {

/// Completes `handler` with `args...` on its associated executor (else `ex`), not inside the caller.
template <class Handler, class Executor, class... Args>
void complete_later(Handler&& handler, const Executor& ex, Args&&... args) {
  boost::asio::post(ex, boost::asio::append(std::forward<Handler>(handler), std::forward<Args>(args)...));
}

/// The refusal of a bulk transfer through `d` that needs `right` and moves `bytes` where at most `limit` fit;
/// empty when allowed.
error_code check_bulk(const bulk_descriptor& d, access right, std::uint64_t bytes, std::uint64_t limit) noexcept;

/// What a bulk call keeps at one address while it runs: the lease, the descriptor's bytes, the gathered request,
/// and the call's outcome until the key is dead.
struct bulk_call_state {
  window_lease lease;
  std::array<std::byte, bulk_descriptor::wire_size> descriptor{};
  std::vector<boost::asio::const_buffer> request;
  error_code ec;
  inbound_message reply;
};

/// async_bulk_call as a composed operation: lease (if from a pool) → call → revoke, wait until dead → complete.
/// It holds the endpoint's state, not the endpoint: an endpoint closed or destroyed meanwhile (a session ended
/// under the call) fails the call with its error (`errc::endpoint_closed`), and the key still dies — with the
/// queue pair if that went too (window_lease.hpp).
struct bulk_call_op {
  std::shared_ptr<endpoint_impl> endpoint;
  message_endpoint::executor_type ex;
  message_endpoint* starter;  // the endpoint: used by the first step only, inside the initiating call
  window_pool* pool;  // null: `state->lease` is given
  const memory_region* region;
  window_range range;
  access rights;
  std::unique_ptr<bulk_call_state> state;

  template <class Self>
  void operator()(Self& self) {
    self.reset_cancellation_state([](boost::asio::cancellation_type t) { return t; });  // every type
    if (!valid_rights(rights) || (!pool && !state->lease.active())) {
      // Nothing to describe (a dead lease's key is 0; rights the callee would refuse): refused before anything
      // is posted, completing through the executor (never inside the initiating call) by the last step.
      state->ec = make_error_code(errc::bad_bulk_descriptor);
      const message_endpoint::executor_type where = ex;  // a copy: `self`, which holds `ex`, moves into the post
      return boost::asio::post(where, boost::asio::append(std::move(self), error_code()));
    }
    if (pool) {
      // The bind and the revocation run to their end: a terminal cancellation of a posted bind would move the
      // endpoint's queue pair to the error state. A cancellation meanwhile is seen when the bind completed.
      pool->async_lease(starter->get_queue_pair(), *region, range, rights, {},
                        boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), std::move(self)));
      return;
    }
    call(self);
  }
  template <class Self>
  void operator()(Self& self, error_code ec, window_lease lease) {
    if (ec) return self.complete(ec, inbound_message());  // no key was made
    state->lease = std::move(lease);
    if (self.cancelled() != boost::asio::cancellation_type::none) {
      state->ec = boost::asio::error::operation_aborted;
      return revoke(self);
    }
    call(self);
  }
  template <class Self>
  void operator()(Self& self, error_code ec, inbound_message reply) {
    state->ec = ec;
    state->reply = std::move(reply);
    revoke(self);
  }
  template <class Self>
  void operator()(Self& self, error_code) {  // the key is dead (or was: the lease expired or was invalidated)
    self.complete(state->ec, std::move(state->reply));
  }

  static std::shared_ptr<endpoint_impl> state_of(const message_endpoint& ep) noexcept { return ep.impl_; }

private:
  static bool valid_rights(access r) noexcept {
    return r != access::none && (r & ~(access::remote_read | access::remote_write)) == access::none;
  }
  template <class Self>
  void revoke(Self& self) {
    state->lease.async_revoke(boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), std::move(self)));
  }
  template <class Self>
  void call(Self& self) {
    state->descriptor = bulk_descriptor::of(state->lease, rights).encode();
    state->request.insert(state->request.begin(), boost::asio::buffer(state->descriptor));
    message_endpoint::initiate_on<inbound_message>(endpoint.get(), ex, std::move(self), message_op_kind::call,
                                                   message_type::request, 0, state->request);
  }
};

template <class Token, class ConstBufferSequence>
auto initiate_bulk_call(message_endpoint& ep, window_pool* pool, const memory_region* region, window_range range,
                        access rights, window_lease lease, const ConstBufferSequence& request, Token&& token) {
  auto state = std::make_unique<bulk_call_state>();
  state->lease = std::move(lease);
  for (auto i = boost::asio::buffer_sequence_begin(request); i != boost::asio::buffer_sequence_end(request); ++i)
    state->request.emplace_back(*i);
  return boost::asio::async_compose<Token, void(error_code, inbound_message)>(
      bulk_call_op{bulk_call_op::state_of(ep), ep.get_executor(), &ep, pool, region, range, rights, std::move(state)},
      token, ep.get_executor());
}

}  // namespace detail

/// Calls with a bulk region: binds a window of `pool` over `range` of `region` through the endpoint's queue pair
/// with `rights` (remote_read: the peer reads the payload from it; remote_write: the peer writes its answer into
/// it), sends `request` behind the window's `bulk_descriptor` (one message: `bulk_descriptor::wire_size` +
/// `buffer_size(request)` bytes, at most the slot size), and completes with the reply once the key is dead.
/// @param region registered with `access::mw_bind` and the `rights`, outliving the call.
/// @param range bytes of `region` to expose; its length is what the peer may move (`window_range::all`: the rest
/// of the region).
/// @par Completion Signature `void(error_code, inbound_message reply)`. The handler runs after the window's key
/// is dead, whatever the outcome.
/// @par Errors `errc::bad_bulk_descriptor` before anything is posted: `rights` empty or other than remote_read /
/// remote_write; those of `window_pool::async_lease` (`errc::window_pool_exhausted`, a bind refused before
/// posting, e.g. a right the region lacks), then those of `message_endpoint::async_call` (`errc::message_too_large`,
/// ...).
/// @par Lifetime The region outlives the call. The endpoint and its queue pair may go first (a session closed
/// or destroyed under the call): the call then fails (`operation_aborted` if it was waiting for its reply,
/// `errc::endpoint_closed` if it had not been sent), and still completes only once the key is dead — a type-2
/// key dies with its queue pair; a type-1 window is deallocated when no queue pair is left to invalidate it.
/// @par Per-Operation Cancellation Any type, in any phase: the call is abandoned (as `async_call`'s), the key
/// revoked, and the operation completes with `operation_aborted` once the key is dead. A bind or a revocation
/// on the wire runs to its end first (cancelling a posted request would fail the queue pair).
template <class ConstBufferSequence,
          completion_token_or_handler<void(error_code, inbound_message)> Token = message_endpoint::default_token>
requires boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value auto
async_bulk_call(message_endpoint& ep, window_pool& pool, const memory_region& region, window_range range, access rights,
                const ConstBufferSequence& request, Token&& token = Token{}) {
  return detail::initiate_bulk_call(ep, &pool, &region, range, rights, window_lease(), request,
                                    std::forward<Token>(token));
}
template <completion_token_or_handler<void(error_code, inbound_message)> Token = message_endpoint::default_token>
auto async_bulk_call(message_endpoint& ep, window_pool& pool, const memory_region& region, window_range range,
                     access rights, std::span<const std::byte> request, Token&& token = Token{}) {
  return async_bulk_call(ep, pool, region, range, rights, boost::asio::buffer(request.data(), request.size()),
                         std::forward<Token>(token));
}

/// As above with a lease granted already (bound through the endpoint's queue pair, granting `rights`): the call
/// takes it and revokes it when it ends. An empty or dead lease is refused with `errc::bad_bulk_descriptor`.
template <class ConstBufferSequence,
          completion_token_or_handler<void(error_code, inbound_message)> Token = message_endpoint::default_token>
requires boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value auto
async_bulk_call(message_endpoint& ep, window_lease lease, access rights, const ConstBufferSequence& request,
                Token&& token = Token{}) {
  return detail::initiate_bulk_call(ep, nullptr, nullptr, {}, rights, std::move(lease), request,
                                    std::forward<Token>(token));
}

/// Reads the whole region `from` describes into the start of `to` (one RDMA read through `qp`, the queue pair
/// the request came on).
/// @param to registered local memory (local_write): its size is the most this side accepts.
/// @par Completion Signature `void(error_code, std::size_t bytes)`: `from.key.length` bytes.
/// @par Errors before posting: `errc::bulk_too_large` (`from.key.length` > `to.size()`), `errc::bad_bulk_descriptor`
/// (`from` lacks remote_read); then those of `queue_pair::async_read` (`wc_errc::rem_access_err`: the key is dead,
/// e.g. the caller's call ended, and this queue pair is now in the error state).
/// @par Per-Operation Cancellation As `queue_pair::async_read`.
template <completion_token_or_handler<void(error_code, std::size_t)> Token = queue_pair::default_token>
auto async_bulk_read(queue_pair& qp, const bulk_descriptor& from, registered_span to, Token&& token = Token{}) {
  return boost::asio::async_initiate<Token, void(error_code, std::size_t)>(
      [&qp](auto handler, bulk_descriptor from, registered_span to) {
        if (error_code ec = detail::check_bulk(from, access::remote_read, from.key.length, to.size()))
          return detail::complete_later(std::move(handler), qp.get_executor(), ec, std::size_t{0});
        qp.async_read(to.subspan(0, static_cast<std::size_t>(from.key.length)), from.key, std::move(handler));
      },
      token, from, to);
}

/// Writes `from` to the start of the region `to` describes (one RDMA write through `qp`).
/// @par Completion Signature `void(error_code, std::size_t bytes)`: `from.size()` bytes.
/// @par Errors before posting: `errc::bulk_too_large` (`from.size()` > `to.key.length`), `errc::bad_bulk_descriptor`
/// (`to` lacks remote_write); then those of `queue_pair::async_write`.
/// @par Per-Operation Cancellation As `queue_pair::async_write`.
template <completion_token_or_handler<void(error_code, std::size_t)> Token = queue_pair::default_token>
auto async_bulk_write(queue_pair& qp, registered_span from, const bulk_descriptor& to, Token&& token = Token{}) {
  return boost::asio::async_initiate<Token, void(error_code, std::size_t)>(
      [&qp](auto handler, registered_span from, bulk_descriptor to) {
        if (error_code ec = detail::check_bulk(to, access::remote_write, from.size(), to.key.length))
          return detail::complete_later(std::move(handler), qp.get_executor(), ec, std::size_t{0});
        qp.async_write(from, to.key, std::move(handler));
      },
      token, from, to);
}

}  // namespace coverbs
