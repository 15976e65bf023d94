#pragma once
// kv_cache: what the server (server.cpp) and its clients (client.cpp) share.
//
// The protocol, on a session's calls (messaging.md):
//   put: a bulk call (bulk.hpp) whose request is 'P' + key behind the descriptor of the client's window over the
//        value (remote_read); the server reads the value with one RDMA read and answers with nothing (stored) or
//        with why not (text).
//   get: a call 'G' + key; the answer is the descriptor of a window over the value leased to this client alone
//        (bound through its session's queue pair, remote_read), or nothing when the key is not stored.
// A put over a stored key stores the new value, then evicts the old one: every client's window over it is
// invalidated, and the put is answered once those keys are dead. A client reading with an old key gets rem_access_err (its queue pair is then
// in the error state): it connects again and gets the key anew.
#include "common/prelude.hpp"

#include <coverbs/coverbs.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kv {

namespace asio = boost::asio;
namespace cv = coverbs;
using example::tuple;
using failure = std::runtime_error;  ///< what a client throws when a check does not hold

inline constexpr std::size_t max_value = std::size_t{64} << 20;  ///< the longest value the server stores, bytes

/// Both sides' sessions: 1 KiB slots, so a value travels by bulk transfer, never in a message.
inline cv::session_options session_options() {
  cv::session_options o;
  o.messages.slot_size = 1024;
  o.messages.recv_slots = 16;
  o.messages.send_slots = 16;
  return o;
}

/// The cache server on `l` until cancelled; `on_end` hears why each session ended.
asio::awaitable<void> serve(cv::listener& l, std::function<void(const cv::session_report&)> on_end);

/// Client `id` against host:port with values of `size` bytes: put, get and read back, replace (which evicts the
/// old value), a read with the old key that must fail, a new session and a get that must see the new value.
/// Throws `std::runtime_error` naming what did not hold.
asio::awaitable<void> run_client(std::string host, std::uint16_t port, unsigned id, std::size_t size);

/// Bytes as text (a key in a request).
inline std::string_view text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

/// The bytes of value `version` of client `id` (what the self-test checks).
inline std::vector<std::byte> value_of(unsigned id, unsigned version, std::size_t size) {
  std::vector<std::byte> v(size);
  for (std::size_t i = 0; i < size; ++i)
    v[i] = static_cast<std::byte>(i * 31 + id * 7 + version * 101 + (i >> 12));
  return v;
}

}  // namespace kv
