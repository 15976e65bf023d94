#pragma once
// Two connected RC queue pairs on one completion queue of a software verbs device (soft_verbs.hpp), with
// a buffer of "registered" memory: coverbs' real data path, natively on any host. For the overhead bench
// and its unit-test twin; link test/support/soft_verbs.cpp into the executable.
#include "soft_verbs.hpp"

#include <coverbs/coverbs.hpp>

#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <vector>

namespace soft_verbs {

struct soft_pair {
  soft_verbs::device soft;
  coverbs::device dev = coverbs::device::adopt(soft.context());
  coverbs::protection_domain pd{dev};
  coverbs::completion_queue cq;
  coverbs::queue_pair a, b;
  std::vector<std::byte> local, remote;  // the software device checks no keys: any lkey/rkey does

  soft_pair(boost::asio::io_context& io, std::uint32_t depth, std::size_t bytes,
            const coverbs::completion_queue_options& cq_options = {})
      : cq(io, dev, cq_options), a(pd, cq, options(depth)), b(pd, cq, options(depth)), local(bytes), remote(bytes) {
    coverbs::connect_pair(a, b);
  }

  coverbs::registered_span local_span(std::size_t n) { return {std::span(local).subspan(0, n), 1}; }
  coverbs::registered_span remote_span(std::size_t n) { return {std::span(remote).subspan(0, n), 2}; }
  coverbs::remote_key remote_key(std::size_t n) {
    return {reinterpret_cast<std::uint64_t>(remote.data()), n, 2};
  }

private:
  static coverbs::queue_pair_options options(std::uint32_t depth) {
    coverbs::queue_pair_options o;
    o.max_send_wr = depth;
    o.max_recv_wr = depth;
    return o;
  }
};

}  // namespace soft_verbs
