#pragma once
/// @file
/// `message_endpoint`: request/response and one-way messages over a connected RC queue pair, with
/// registered message slots and credit-based flow control (docs/messaging.md).
///
/// @par Slots
/// The endpoint registers one region of `recv_slots + 4` receive slots (4: the control receives of the
/// credit protocol) of `message_header::size + slot_size` bytes each and keeps them posted on the queue
/// pair; a received message is an `inbound_message` viewing its slot (zero copy) until released, then the
/// slot is posted again. A second region holds `send_slots` send slots: a message's bytes are copied into
/// one (from one span or a buffer sequence, gathered) and sent from there, so the caller's buffers are
/// free once the operation completes.
///
/// @par Credits (why the peer never meets receiver-not-ready)
/// A message is sent only with a credit: a receive the peer has posted and reported. Every header returns
/// the receives reposted since the last report (`message_header::data_credits`); when traffic is one-sided,
/// a standalone credit message is sent once half of `recv_slots` (or every credit the peer had) is to be
/// returned. Credit messages travel on 4 control receives of their own, reposted at once and returned in
/// the same way, so an update never waits for the data it unblocks. The first credit message (sent when the
/// loop runs after construction) grants the peer `recv_slots`. An operation with no credit or no free send
/// slot waits, in FIFO order; it never fails for it. Create both endpoints before either side's loop runs
/// (or before the peer sends): the peer's first message must find this side's receives posted. On an rdma_cm
/// connection that means before it is established: `connection_options::prepare` makes the endpoint with
/// `hold_sends` (receives posted while the queue pair is in INIT, before the request or reply goes out), and
/// `start_sending()` once established sends the first credit message (`session.hpp` does both).
///
/// @par Errors
/// A message longer than `slot_size`, or than the peer's slot size (every header carries its sender's), is
/// refused before posting (`errc::message_too_large`, `diagnostic()` names the length and the slot size it
/// exceeds, both sides' when it is the peer's); the endpoint stays
/// usable. Every incoming header is checked
/// (`decode_header`): a violation fails the endpoint with `errc::protocol_violation`, a message beyond the
/// credits granted with `errc::credit_overrun`, a failed work completion with its `wc_errc` — every pending
/// operation completes with that error, later ones too, `error()` keeps it and `diagnostic()` says what
/// arrived. A flushed completion (`wc_errc::wr_flush_err`) is only the consequence of what moved the queue pair
/// to the error state, so the endpoint fails with that cause instead, `queue_pair::error()`: on an rdma_cm
/// connection `errc::connection_reset` (the peer disconnected; a session's operations see the session's cause),
/// `errc::disconnected` or `errc::device_removed`, a device event's error, or another request's failed completion
/// on the same queue pair (e.g. a bulk read's `wc_errc::rem_access_err`). It stays `wr_flush_err` only when the
/// queue pair names no cause (or its cause is a cancelled request's `operation_aborted`). The queue pair is left as it is (close the endpoint, disconnect the peer); nothing else is
/// touched.
///
/// @par Completions
/// Every operation takes any Asio completion token and completes on its handler's associated executor
/// (default: the endpoint's, its queue pair's), never inside the initiating function. Received messages
/// complete their handlers from the queue pair's receive completions (plain callbacks, no coroutine per
/// message).
///
/// @par Per-Operation Cancellation
/// Any cancellation type abandons one operation at once with `operation_aborted`: a call (waiting for
/// credit, or sent — its entry in the call table is freed at once, and its reply, if it arrives, is known by
/// the generation in its correlation id: dropped, its slot reposted, and counted in
/// `message_statistics::replies_dropped`), a receive, or a send still waiting for a credit or a slot. A
/// send already posted cannot be recalled; it completes when the device is done with it.
///
/// @par Lifetime
/// The queue pair and protection domain outlive the endpoint, and the queue pair is not moved: the
/// endpoint posts on it for its whole life, and its receives stay posted after `close()` over deregistered
/// slots (a message that reaches one fails it and moves the queue pair to the error state: close when the
/// peer is done), so the queue pair belongs to one endpoint until it is reset or destroyed.
/// `close()` and destruction complete every pending operation with `operation_aborted`. Messages held by
/// the application, and receives the queue pair holds, keep the slots alive; an `io_context` destroyed
/// with operations pending destroys their handlers without running them.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe; use an endpoint from its queue pair's executor. The
/// messages and requests it hands out may be released (or destroyed) on any thread: the repost is
/// dispatched to the endpoint's executor (`inbound_message.hpp`).

#include <coverbs/detail/handler_executor.hpp>
#include <coverbs/detail/message_ops.hpp>
#include <coverbs/detail/token_check.hpp>
#include <coverbs/error.hpp>
#include <coverbs/inbound_message.hpp>
#include <coverbs/inbound_request.hpp>
#include <coverbs/message_header.hpp>
#include <coverbs/queue_pair.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace coverbs {

class protection_domain;
namespace detail {
struct bulk_call_op;
}  // namespace detail

/// Sizes of an endpoint's slots. The two sides may differ: each header carries its sender's `slot_size`, and a
/// message is refused before posting (`errc::message_too_large`) unless it fits both this side's slots and the
/// peer's. No data, request or reply is sent before the peer's first header (which also brings the first credits);
/// each side's own first credit message goes out at once.
struct message_options {
  std::size_t slot_size = 4096;   ///< payload bytes per message (the header's 24 bytes come on top)
  std::uint32_t recv_slots = 32;  ///< data receives kept posted: what the peer may send ahead (1..65535)
  std::uint32_t send_slots = 32;  ///< messages this side may have in flight at once (>= 1)
};

/// What an endpoint has done (cumulative), and the calls it has in flight now.
struct message_statistics {
  std::uint64_t messages_sent = 0;        ///< data, requests and replies posted
  std::uint64_t messages_received = 0;    ///< data, requests and replies received
  std::uint64_t credit_updates_sent = 0;  ///< standalone credit messages posted
  std::uint64_t credit_updates_received = 0;
  std::uint64_t credit_waits = 0;     ///< times an operation found no credit or send slot and waited
  std::uint64_t calls_abandoned = 0;  ///< calls cancelled after their request was sent
  std::uint64_t replies_dropped = 0;  ///< replies that arrived for abandoned calls
  /// Not cumulative: calls sent and awaiting their reply now, the entries of the call table in use. An
  /// abandoned call leaves it at once, whether or not its reply ever comes.
  std::uint64_t calls_in_flight = 0;
};

/// A message endpoint on a connected RC queue pair. Move-only.
class message_endpoint {
public:
  using executor_type = queue_pair::executor_type;
  using default_token = detail::default_token_t<executor_type>;

  /// Registers the slots in `pd` and posts the receives on `qp` (connected, or at least in INIT).
  /// @throws system_error: `boost::system::errc::invalid_argument` (slot_size 0 or above the queue pair's
  /// max_message_size() less the header, recv_slots outside 1..65535, send_slots 0: the text names the
  /// option and the value), `errc::device_limit_exceeded` (recv_slots + 4 above the queue pair's
  /// max_recv_wr: the text names both), `errc::receive_queue_is_shared` (the queue pair uses a shared receive
  /// queue), or what `memory_region` throws.
  message_endpoint(protection_domain& pd, queue_pair& qp, const message_options& options = {});
  /// Tag of the constructor that posts the receives and sends nothing until `start_sending()`.
  struct hold_sends_t {
    explicit hold_sends_t() = default;
  };
  static constexpr hold_sends_t hold_sends{};
  /// As above, but nothing is posted on the send queue — not even the first credit message — until
  /// `start_sending()`: for a queue pair not yet able to send (INIT or RTR, e.g. inside
  /// `connection_options::prepare`), whose peer may already send to it once connected. Operations started
  /// meanwhile wait.
  message_endpoint(protection_domain& pd, queue_pair& qp, const message_options& options, hold_sends_t);
  message_endpoint(message_endpoint&&) noexcept;
  message_endpoint& operator=(message_endpoint&&) noexcept;
  message_endpoint(const message_endpoint&) = delete;
  message_endpoint& operator=(const message_endpoint&) = delete;
  /// `close()`.
  ~message_endpoint();

  executor_type get_executor() const noexcept { return ex_; }
  std::size_t slot_size() const noexcept;
  /// The queue pair the endpoint posts on (e.g. to bind a window through it for a bulk call, bulk.hpp).
  /// @throws system_error `errc::endpoint_closed` on a moved-from endpoint.
  queue_pair& get_queue_pair() const;
  /// The peer's `message_options::slot_size`, from its headers; 0 until its first one arrived (until then
  /// nothing is sent: there is no credit either).
  std::size_t peer_slot_size() const noexcept;
  /// Empty while healthy; the error that failed the endpoint; `errc::endpoint_closed` once closed.
  error_code error() const noexcept;
  /// What the last refusal or failure was about, with the numbers (e.g. "a message of 5000 bytes does not
  /// fit the slot size 4096 (message_options::slot_size)"); empty if none.
  std::string diagnostic() const;
  message_statistics statistics() const noexcept;
  /// Data credits this side holds (messages it may send before the peer reports more).
  std::uint32_t credits() const noexcept;
  /// Ends the hold of a `hold_sends` endpoint (its queue pair must be in RTS, the connection established): the
  /// first credit message and the operations waiting go out. Otherwise nothing.
  void start_sending() noexcept;
  /// Completes every pending operation with `operation_aborted`; later ones fail with
  /// `errc::endpoint_closed`. Received messages stay valid; their slots are not posted again. Deregisters the
  /// slots (see Lifetime in docs/messaging.md: close when the peer is done, or `shutdown()`, disconnect, close).
  void close() noexcept;
  /// As `close()`, but the slots stay registered (and the receives posted) until `close()` or destruction: a
  /// message the peer sends meanwhile lands in registered memory and is dropped, and the queue pair stays
  /// healthy. For closing a connection in order: `shutdown()`, then disconnect (the queue pair moves to the
  /// error state), then `close()`.
  void shutdown() noexcept;

  /// Sends `request` (a buffer sequence, gathered into one message) and completes with the peer's reply.
  /// Any number may be in flight; they complete in any order, each with its own reply.
  /// @par Completion Signature `void(error_code, inbound_message reply)`
  /// @par Errors `errc::message_too_large` (before posting: longer than this side's or the peer's slot size),
  /// `operation_aborted` (cancelled or closed), the endpoint's error.
  template <class ConstBufferSequence,
            completion_token_or_handler<void(error_code, inbound_message)> Token = default_token>
  requires boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value auto
  async_call(const ConstBufferSequence& request, Token&& token = default_token{}) {
    return initiate<inbound_message>(std::forward<Token>(token), detail::message_op_kind::call, message_type::request,
                                     0, request);
  }
  /// As above with one span.
  template <completion_token_or_handler<void(error_code, inbound_message)> Token = default_token>
  auto async_call(std::span<const std::byte> request, Token&& token = default_token{}) {
    return async_call(boost::asio::buffer(request.data(), request.size()), std::forward<Token>(token));
  }

  /// Waits for the next request of a call.
  /// @par Completion Signature `void(error_code, inbound_request)`
  template <completion_token_or_handler<void(error_code, inbound_request)> Token = default_token>
  auto async_receive_request(Token&& token = default_token{}) {
    return initiate<inbound_request>(std::forward<Token>(token), detail::message_op_kind::receive_request,
                                     message_type::request, 0, boost::asio::const_buffer());
  }

  /// Answers `request` with `reply` (the request itself may be released before or after). Each request takes
  /// one reply.
  /// @par Completion Signature `void(error_code)`, once the reply's send has completed.
  /// @par Errors `errc::message_too_large` (before posting), `boost::system::errc::invalid_argument` (before
  /// posting: the request holds no call — default-constructed or moved from — or was answered already; a reply
  /// refused or cancelled before posting leaves it unanswered), `operation_aborted` (cancelled before
  /// posting, or closed), the endpoint's error.
  template <class ConstBufferSequence, completion_token_or_handler<void(error_code)> Token = default_token>
  requires boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value auto
  async_reply(const inbound_request& request, const ConstBufferSequence& reply, Token&& token = default_token{}) {
    return initiate<void>(std::forward<Token>(token), detail::message_op_kind::send, message_type::reply,
                          request.correlation_id(), reply);
  }
  template <completion_token_or_handler<void(error_code)> Token = default_token>
  auto async_reply(const inbound_request& request, std::span<const std::byte> reply, Token&& token = default_token{}) {
    return async_reply(request, boost::asio::buffer(reply.data(), reply.size()), std::forward<Token>(token));
  }

  /// Sends a one-way message (the peer receives it with `async_receive_message`).
  /// @par Completion Signature `void(error_code)`, once the send has completed.
  template <class ConstBufferSequence, completion_token_or_handler<void(error_code)> Token = default_token>
  requires boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value auto
  async_send_message(const ConstBufferSequence& message, Token&& token = default_token{}) {
    return initiate<void>(std::forward<Token>(token), detail::message_op_kind::send, message_type::data, 0, message);
  }
  template <completion_token_or_handler<void(error_code)> Token = default_token>
  auto async_send_message(std::span<const std::byte> message, Token&& token = default_token{}) {
    return async_send_message(boost::asio::buffer(message.data(), message.size()), std::forward<Token>(token));
  }

  /// Waits for the next one-way message.
  /// @par Completion Signature `void(error_code, inbound_message)`
  template <completion_token_or_handler<void(error_code, inbound_message)> Token = default_token>
  auto async_receive_message(Token&& token = default_token{}) {
    return initiate<inbound_message>(std::forward<Token>(token), detail::message_op_kind::receive_message,
                                     message_type::data, 0, boost::asio::const_buffer());
  }

private:
  // A bulk call keeps the endpoint's state (not the endpoint, which may go first) to make its call.
  friend struct detail::bulk_call_op;

  template <class Result>
  struct initiation {
    detail::endpoint_impl* impl;  // null: a moved-from endpoint (endpoint_closed)
    executor_type ex;
    executor_type get_executor() const noexcept { return ex; }
    template <class Handler, class Buffers>
    void operator()(Handler&& handler, detail::message_op_kind kind, message_type type, std::uint64_t id,
                    const Buffers& buffers) const {
      using op_type = detail::message_op_impl<Result, executor_type, std::decay_t<Handler>, Buffers>;
      std::decay_t<Handler> h(std::forward<Handler>(handler));
      auto* op = op_type::create(std::move(h), ex, buffers);
      op->kind = kind;
      op->type = type;
      op->correlation_id = id;
      op->length = boost::asio::buffer_size(buffers);
      detail::start_message_op(impl, op, ex);
    }
  };

  template <class Result, class Token, class Buffers>
  static auto initiate_on(detail::endpoint_impl* impl, const executor_type& ex, Token&& token,
                          detail::message_op_kind kind, message_type type, std::uint64_t id, const Buffers& buffers) {
    using signature = typename detail::message_signature<Result>::type;
    return detail::initiate_checked<Token, signature>(initiation<Result>{impl, ex}, token, kind, type, id, buffers);
  }
  template <class Result, class Token, class Buffers>
  auto initiate(Token&& token, detail::message_op_kind kind, message_type type, std::uint64_t id,
                const Buffers& buffers) {
    return initiate_on<Result>(impl_.get(), ex_, std::forward<Token>(token), kind, type, id, buffers);
  }

  std::shared_ptr<detail::endpoint_impl> impl_;
  executor_type ex_;
};

}  // namespace coverbs
