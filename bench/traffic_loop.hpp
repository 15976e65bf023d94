#pragma once
// One event loop carrying a stream of small RDMA writes or sends over loopback RC connections: an
// io_context run by the thread that calls run(), one completion queue, and --connections pairs of queue
// pairs on it. Used by bench_scaling (one loop against two) and bench_rate (one loop beside perftest and
// UCX).
//
// Each connection keeps `depth` operations of `size` bytes in flight from one queue pair to the other (a
// completion handler initiates the next); for sends the other side keeps 4 × depth receives posted,
// re-posting each from its completion handler. The loop stops issuing when its own clock read (every 16
// completions) says the period is over, rather than waiting for a timer's turn, then waits for what is in
// flight.
#include <coverbs/coverbs.hpp>

#include <boost/asio/io_context.hpp>

#include <time.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

namespace bench {

/// What one loop carries.
struct traffic_options {
  int connections = 1;   ///< loopback connections (two queue pairs each) on the loop's completion queue
  int depth = 32;        ///< operations in flight per connection
  std::size_t size = 8;  ///< bytes per write or send
  bool send = false;     ///< sends into receives; false: RDMA writes
  bool spin = false;     ///< the completion queue busy-polls (spin_forever); false: completion events
  /// queue_pair_options::max_inline_data of every queue pair (writes and sends up to this size go inline).
  std::uint32_t max_inline_data = coverbs::queue_pair_options{}.max_inline_data;
};

/// The CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID), in seconds.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// One event loop and its connections (see the header above).
class traffic_loop {
public:
  using clock_type = std::chrono::steady_clock;

  /// Opens the loop's completion queue, registers 2 × size bytes per connection in `pd` and connects the
  /// queue pairs. @throws coverbs::system_error from the verbs (e.g. device_limit_exceeded for a
  /// max_inline_data above the device's cap).
  traffic_loop(coverbs::device& dev, coverbs::protection_domain& pd, const traffic_options& o)
      : o_(o), cq_(io_, dev, cq_options(o)), bytes_(2 * o.size * static_cast<std::size_t>(o.connections)),
        mr_(pd, bytes_, coverbs::access::local_write | coverbs::access::remote_write) {
    coverbs::queue_pair_options q;
    q.max_send_wr = static_cast<std::uint32_t>(o.depth + 8);
    q.max_recv_wr = static_cast<std::uint32_t>(recv_depth(o) + 8);
    q.max_inline_data = o.max_inline_data;
    for (int i = 0; i < o.connections; ++i) {
      auto& k = *conns_.emplace_back(std::make_unique<connection>(pd, cq_, q));
      coverbs::connect_pair(k.a, k.b);
      const std::size_t at = 2 * o.size * static_cast<std::size_t>(i);
      k.local = coverbs::span_of(mr_, at, o.size);
      k.landing = coverbs::span_of(mr_, at + o.size, o.size);
      k.remote = coverbs::remote_key_of(mr_).slice(at + o.size, o.size);
    }
  }

  /// Runs the traffic on the calling thread until `end`, then until what is in flight has completed. An
  /// exception (a failed operation) is kept for rethrow().
  void run(clock_type::time_point end) {
    end_ = end;
    const double cpu0 = thread_cpu_seconds();
    try {
      for (auto& k : conns_) {
        if (o_.send)
          for (int i = 0; i < recv_depth(o_); ++i)
            recv(*k);
        for (int i = 0; i < o_.depth; ++i)
          issue(*k);
      }
      io_.run();
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_ = clock_type::now();
    cpu_seconds_ = thread_cpu_seconds() - cpu0;
  }

  /// Writes or sends completed by run().
  std::uint64_t completed() const noexcept { return completed_; }
  /// CPU time of the thread that called run(), during run(), in seconds.
  double cpu_seconds() const noexcept { return cpu_seconds_; }
  clock_type::time_point finished() const noexcept { return finished_; }
  /// The loop's completion-queue counters (doorbells, requests, completions).
  coverbs::completion_queue_stats stats() const noexcept { return cq_.stats(); }
  /// The inline size the device granted the queue pairs (queue_pair::max_inline_data()).
  std::uint32_t max_inline_data() const noexcept { return conns_.front()->a.max_inline_data(); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

private:
  struct connection {
    coverbs::queue_pair a, b;  // a writes or sends to b
    coverbs::registered_span local, landing;
    coverbs::remote_key remote;
    connection(coverbs::protection_domain& pd, coverbs::completion_queue& cq, const coverbs::queue_pair_options& o)
        : a(pd, cq, o), b(pd, cq, o) {}
  };

  static int recv_depth(const traffic_options& o) { return 4 * o.depth; }
  static coverbs::completion_queue_options cq_options(const traffic_options& o) {
    coverbs::completion_queue_options c;
    c.depth = o.connections * 2 * (o.depth + 8 + recv_depth(o) + 8) + 64;
    c.spin = o.spin ? coverbs::completion_queue_options::spin_forever : std::chrono::nanoseconds(0);
    return c;
  }

  /// Reads the clock every 16 completions: past the end, the loop stops issuing.
  bool stopping() {
    if (!stop_ && ++checks_ % 16 == 0 && clock_type::now() >= end_) stop_ = true;
    return stop_;
  }

  void issue(connection& k) {
    ++in_flight_;
    auto done = [this, &k](coverbs::error_code ec, std::size_t) {
      if (ec) throw coverbs::system_error(ec, o_.send ? "send" : "RDMA write");
      --in_flight_;
      ++completed_;
      if (!stopping())
        issue(k);
      else if (in_flight_ == 0)
        io_.stop();  // the receives still posted keep the queue waiting; they are flushed at destruction
    };
    if (o_.send)
      k.a.async_send(k.local, done);
    else
      k.a.async_write(k.local, k.remote, done);
  }

  void recv(connection& k) {
    k.b.async_recv(k.landing, [this, &k](coverbs::error_code ec, coverbs::received) {
      if (ec == boost::asio::error::operation_aborted) return;  // flushed when the queue pair is destroyed
      if (ec) throw coverbs::system_error(ec, "receive");
      if (!stop_) recv(k);
    });
  }

  const traffic_options o_;
  boost::asio::io_context io_{1};
  coverbs::completion_queue cq_;
  std::vector<std::byte> bytes_;
  coverbs::memory_region mr_;
  std::vector<std::unique_ptr<connection>> conns_;
  clock_type::time_point end_, finished_;
  bool stop_ = false;
  std::uint64_t checks_ = 0, completed_ = 0;
  int in_flight_ = 0;
  double cpu_seconds_ = 0;
  std::exception_ptr error_;
};

}  // namespace bench
