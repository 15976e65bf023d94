#pragma once
// Test support: a device, a protection domain, an io_context, and two connected RC queue pairs on rxe0.
#include <coverbs/coverbs.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <vector>

namespace test {

namespace cv = coverbs;

/// Registered memory for tests: `size` bytes with the given rights.
struct test_buffer {
  std::vector<std::byte> bytes;
  cv::memory_region mr;
  test_buffer(cv::protection_domain& pd, std::size_t size,
              cv::access rights = cv::access::local_write | cv::access::remote_write | cv::access::remote_read |
                                  cv::access::remote_atomic)
      : bytes(size), mr(pd, bytes, rights) {}
  cv::registered_span span() const { return cv::span_of(mr); }
  cv::registered_span span(std::size_t off, std::size_t n) const { return cv::span_of(mr, off, n); }
  cv::remote_key key() const { return cv::remote_key_of(mr); }
  void fill(char c) { std::fill(bytes.begin(), bytes.end(), std::byte(c)); }
  std::string str(std::size_t off, std::size_t n) const {
    return std::string(reinterpret_cast<const char*>(bytes.data()) + off, n);
  }
};

/// A test's time limit scaled by COVERBS_TIMEOUT_SCALE (a whole number, default 1): the one knob that
/// also scales meson's and the guest's limits, for a slow host or a sanitizer build.
inline std::chrono::seconds scaled(std::chrono::seconds limit) {
  const char* s = std::getenv("COVERBS_TIMEOUT_SCALE");
  const long k = s ? std::strtol(s, nullptr, 10) : 1;
  return limit * (k >= 1 && k <= 999 ? k : 1);
}

/// An io_context with watchdog'd run helpers: nothing in a test may hang. Limits are scaled().
struct event_loop {
  boost::asio::io_context io;

  /// Runs `coro` (an awaitable factory) on the loop; fails the test if it does not finish within `limit`.
  template <class F>
  auto run(F&& coro, std::chrono::seconds limit = std::chrono::seconds(30)) {
    auto fut = boost::asio::co_spawn(io, std::forward<F>(coro)(), boost::asio::use_future);
    io.restart();
    const auto deadline = std::chrono::steady_clock::now() + scaled(limit);
    while (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
           std::chrono::steady_clock::now() < deadline) {
      io.restart();
      io.run_for(std::chrono::milliseconds(100));
    }
    REQUIRE(fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready);  // nothing hangs
    return fut.get();
  }

  /// Runs the loop until `done()` or `limit`; returns done().
  template <class Pred>
  bool run_until(Pred done, std::chrono::seconds limit = std::chrono::seconds(30)) {
    io.restart();
    const auto deadline = std::chrono::steady_clock::now() + scaled(limit);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io.restart();
      io.run_for(std::chrono::milliseconds(20));
    }
    return done();
  }
};

struct rc_pair : event_loop {
  cv::device dev = cv::device::open();
  cv::protection_domain pd{dev};
  cv::completion_queue cq;
  cv::queue_pair a, b;

  explicit rc_pair(cv::queue_pair_options o = {}, cv::completion_queue_options co = {})
      : cq(io, dev, co), a(pd, cq, o), b(pd, cq, o) {
    cv::connect_pair(a, b);
  }
};

}  // namespace test

namespace test {

/// Captures one completion: `slot.handler()` is a callback token, `slot.done()` says whether it ran.
template <class T>
struct completion {
  std::optional<coverbs::error_code> ec;
  T value{};
  int calls = 0;
  auto handler() {
    return [this](coverbs::error_code e, T v) {
      ec = e;
      value = v;
      ++calls;
    };
  }
  bool done() const { return ec.has_value(); }
};

}  // namespace test
