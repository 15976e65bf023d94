// Handlers of the wrong completion signature, one per operation, for the compile_time_help test: built with
// -DCOVERBS_WRONG_HANDLERS each HANDLER call must fail with coverbs' one static_assert naming the signature the
// handler must have, and each NO_EXECUTOR call (cancel_after with no executor to run its timer on) with
// cancel_after's one static_assert; built without, the same calls with the right handlers must compile.
#include <coverbs/coverbs.hpp>
#if __has_include(<rdma/rdma_cma.h>)
#include <coverbs/cm.hpp>
#endif

namespace cv = coverbs;

#ifdef COVERBS_WRONG_HANDLERS
#define HANDLER(right, wrong) wrong
#define NO_EXECUTOR(right, wrong) wrong
#else
#define HANDLER(right, wrong) right
#define NO_EXECUTOR(right, wrong) right
#endif

// Never called: instantiating these calls is the test.
[[maybe_unused]] void every_operation(cv::queue_pair& qp, cv::datagram_queue_pair& dq, cv::shared_receive_queue& srq,
                                      cv::memory_window& w, cv::memory_region& mr, cv::window_pool& pool,
                                      cv::device_events& events, cv::registered_span s, cv::remote_key k,
                                      cv::datagram_destination to) {
  using cv::error_code;
  qp.async_send(s, HANDLER([](error_code, std::size_t) {}, [](error_code) {}));
  qp.async_recv(s, HANDLER([](error_code, cv::received) {}, [](error_code, std::size_t) {}));
  qp.async_write(s, k, HANDLER([](error_code, std::size_t) {}, [](error_code, int, int) {}));
  qp.async_read(s, k, HANDLER([](error_code, std::size_t) {}, [](std::size_t) {}));
  qp.async_fetch_add(s, k, 1, HANDLER([](error_code, std::uint64_t) {}, [](error_code, cv::received) {}));
  dq.async_send_to(to, s, HANDLER([](error_code, std::size_t) {}, [](error_code, cv::received) {}));
  dq.async_recv(s, HANDLER([](error_code, cv::received_datagram) {}, [](error_code, cv::srq_received) {}));
  srq.async_recv(s, HANDLER([](error_code, cv::srq_received) {}, [](error_code) {}));
  cv::bind_mw(qp, w, mr, {0, 64}, cv::access::remote_read, HANDLER([](error_code, cv::remote_key) {}, [](error_code) {}));
  cv::invalidate(qp, w, HANDLER([](error_code) {}, [](error_code, cv::remote_key) {}));
  pool.async_lease(qp, mr, {0, 64}, cv::access::remote_read, std::chrono::seconds(1),
                   HANDLER([](error_code, cv::window_lease) {}, [](error_code, cv::remote_key) {}));
  events.async_wait_event(HANDLER([](error_code, cv::device_event) {}, [](error_code) {}));
}

[[maybe_unused]] void registration(cv::protection_domain& pd, std::span<std::byte> bytes, cv::buffer_pool& pool) {
  using cv::error_code;
  cv::reg_mr(cv::default_registration_service(), pd, bytes, cv::access::local_write,
             HANDLER([](error_code, cv::memory_region) {}, [](error_code, std::size_t) {}));
  pool.async_allocate(64, HANDLER([](error_code, cv::registered_buffer) {}, [](error_code) {}));
}

[[maybe_unused]] void caching(cv::registration_cache& cache, cv::protection_domain& pd, std::span<std::byte> bytes) {
  using cv::error_code;
  cache.async_acquire(pd, bytes, cv::access::local_write,
                      HANDLER([](error_code, cv::shared_region) {}, [](error_code, cv::memory_region) {}));
}

[[maybe_unused]] void messaging(cv::message_endpoint& e, cv::inbound_request& r, std::span<const std::byte> bytes) {
  using cv::error_code;
  e.async_call(bytes, HANDLER([](error_code, cv::inbound_message) {}, [](error_code, std::size_t) {}));
  e.async_receive_request(HANDLER([](error_code, cv::inbound_request) {}, [](error_code, cv::inbound_message) {}));
  e.async_reply(r, bytes, HANDLER([](error_code) {}, [](error_code, cv::inbound_message) {}));
  e.async_send_message(bytes, HANDLER([](error_code) {}, [](cv::inbound_message) {}));
  e.async_receive_message(HANDLER([](error_code, cv::inbound_message) {}, [](error_code) {}));
}

// cancel_after on an operation that names no I/O executor (a window pool's lease, a registration) needs the
// handler's: a callback with none meets cancel_after's one static_assert; bound to a loop, it compiles.
[[maybe_unused]] void deadlines(boost::asio::io_context& io, cv::queue_pair& qp, cv::memory_region& mr,
                                cv::window_pool& pool, cv::protection_domain& pd, std::span<std::byte> bytes) {
  using cv::error_code;
  using namespace std::chrono_literals;
  const auto lease = [](error_code, cv::window_lease) {};
  const auto registered = [](error_code, cv::memory_region) {};
  pool.async_lease(qp, mr, {0, 64}, cv::access::remote_read, 1s,
                   cv::cancel_after(10ms, NO_EXECUTOR(boost::asio::bind_executor(io, lease), lease)));
  cv::reg_mr(cv::default_registration_service(), pd, bytes, cv::access::local_write,
             cv::cancel_after(10ms, NO_EXECUTOR(boost::asio::bind_executor(io, registered), registered)));
}

#if __has_include(<rdma/rdma_cma.h>)
[[maybe_unused]] void connections(boost::asio::io_context& io, cv::listener& l, cv::connection& c,
                                  cv::protection_domain& pd, cv::datagram_queue_pair& dq) {
  using cv::error_code;
  l.async_accept(HANDLER([](error_code, cv::connection) {}, [](error_code) {}));
  cv::async_connect(io, "host", "7471", HANDLER([](error_code, cv::connection) {}, [](cv::connection) {}));
  c.async_disconnect(HANDLER([](error_code) {}, [](error_code, std::size_t) {}));
  cv::async_resolve_datagram_peer(pd, dq, "host", "7471", {},
                                  HANDLER([](error_code, cv::datagram_peer) {}, [](error_code, cv::connection) {}));
}
#endif
