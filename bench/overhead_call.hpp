#pragma once
// bench_overhead's call op (bench/overhead.cpp): one call through two message endpoints (message_endpoint.hpp)
// over the software pair's queue pairs — the client's async_call of --size bytes, the server's
// async_receive_request and async_reply of --size bytes, the reply released: two sends and two receives on the
// device, the endpoints' headers, slots, credits and call table around them. Its raw floor is two receive +
// send pairs on raw verbs (the sendrecv op's raw way, twice): what a request and its reply cost the device.
// Compiled on its own (overhead_call.cpp): the message layer's templates in overhead.cpp's translation unit
// moved GCC's inlining of the other ops' initiations (the 8 B write's by 8 instructions per operation).
#include "fixtures/soft_pair.hpp"

#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace bench_overhead {

/// A failed step (of these helpers): exits through the bench's `fail`.
[[noreturn]] void call_failed(const char* what, const std::string& why);

/// The two endpoints over the pair (a: client, b: server) and their payloads (overhead_call.cpp).
struct call_rig;
struct call_rig_deleter {
  void operator()(call_rig* r) const noexcept;
};
using call_rig_ptr = std::unique_ptr<call_rig, call_rig_deleter>;
call_rig_ptr make_call_rig(soft_verbs::soft_pair& pair, std::size_t size);

/// `ops` calls answered with callbacks.
void callback_calls(boost::asio::io_context& io, call_rig& r, int ops);
/// `ops` calls, the client and the server each a coroutine awaiting with `asio::use_awaitable`.
void awaitable_calls(boost::asio::io_context& io, call_rig& r, int ops);
/// The same, awaiting with `asio::deferred`.
void deferred_calls(boost::asio::io_context& io, call_rig& r, int ops);

}  // namespace bench_overhead
