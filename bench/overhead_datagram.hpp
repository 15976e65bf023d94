#pragma once
// bench_overhead's datagram op (bench/overhead.cpp): a receive posted on one UD queue pair, then a datagram of
// --size bytes sent from another consuming it — two work requests and two completions, as the sendrecv op,
// through coverbs' datagram path (the GRH slot in front of the receive, the sender parsed from it, wr.ud) or
// raw verbs on the same software device (soft_verbs.hpp), whose receive names a 40-byte GRH area and the
// payload in one SGE, as a raw-verbs UD program does.
#include "fixtures/soft_datagram_pair.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <exception>
#include <vector>

namespace bench_overhead {

namespace cv = coverbs;
namespace asio = boost::asio;

/// A failed step (of these helpers): exits through the bench's `fail`.
[[noreturn]] void datagram_failed(const char* what, const char* why);

/// The raw-verbs floor: two UD queue pairs of its own on the pair's device, an address handle, a receive of
/// GRH + payload in one buffer.
struct raw_datagram {
  ibv_pd* pd;
  ibv_cq* cq;
  ibv_qp *a, *b;
  ibv_ah* ah;
  std::vector<unsigned char> in;
  ibv_sge send_sge, recv_sge;
  ibv_send_wr send{};
  ibv_recv_wr recv{};

  raw_datagram(soft_verbs::soft_datagram_pair& rig, std::size_t size) : in(40 + size) {
    ibv_context* ctx = rig.soft.context();
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_UD;
    init.cap.max_send_wr = init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    a = ibv_create_qp(pd, &init);
    b = ibv_create_qp(pd, &init);
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.port_num = 1;
    ah = ibv_create_ah(pd, &attr);
    if (!pd || !cq || !a || !b || !ah) datagram_failed("creating the raw-verbs UD objects", "no memory");
    for (ibv_qp* q : {a, b}) {
      ibv_qp_attr m{};
      m.qp_state = IBV_QPS_INIT;
      m.qkey = cv::rdma_cm_udp_qkey;
      ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_QKEY);
      m.qp_state = IBV_QPS_RTS;
      ibv_modify_qp(q, &m, IBV_QP_STATE);
    }
    send_sge = rig.local_span(size).to_sge();
    recv_sge = {reinterpret_cast<std::uintptr_t>(in.data()), static_cast<std::uint32_t>(in.size()), 1};
    send.sg_list = &send_sge;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED;
    send.wr.ud.ah = ah;
    send.wr.ud.remote_qpn = b->qp_num;
    send.wr.ud.remote_qkey = cv::rdma_cm_udp_qkey;
    recv.sg_list = &recv_sge;
    recv.num_sge = 1;
  }
  ~raw_datagram() {
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_ah(ah);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
  }
  raw_datagram(const raw_datagram&) = delete;
  raw_datagram& operator=(const raw_datagram&) = delete;

  /// `ops` times: post a receive on b, send a datagram from a, poll both completions (and read the sender
  /// from the work completion, as a server does to answer).
  void sendrecv(int ops) {
    volatile std::uint32_t sender = 0;
    for (int i = 0; i < ops; ++i) {
      ibv_recv_wr* bad_recv = nullptr;
      ibv_send_wr* bad_send = nullptr;
      if (ibv_post_recv(b, &recv, &bad_recv)) datagram_failed("raw ibv_post_recv", "refused");
      if (ibv_post_send(a, &send, &bad_send)) datagram_failed("raw ibv_post_send", "refused");
      ibv_wc wc[2];
      for (int n = 2; n > 0;) {
        const int got = ibv_poll_cq(cq, 2, wc);
        for (int k = 0; k < got; ++k) {
          if (wc[k].status != IBV_WC_SUCCESS) datagram_failed("raw ibv_poll_cq", ibv_wc_status_str(wc[k].status));
          if (wc[k].opcode & IBV_WC_RECV) sender = wc[k].src_qp;
        }
        n -= got;
      }
    }
    (void)sender;
  }
};

/// A receive on b and a datagram from a; the next pair starts when both completed.
struct datagram_chain {
  soft_verbs::soft_datagram_pair* rig;
  std::size_t size;
  int* to_start;
  int* pending;
  void start() const {
    --*to_start;
    *pending = 2;
    rig->b.async_recv(rig->remote_span(size), [self = *this](cv::error_code ec, cv::received_datagram) {
      if (ec) datagram_failed("async_recv (datagram)", ec.message().c_str());
      self.done();
    });
    rig->a.async_send_to(rig->to_b(), rig->local_span(size), [self = *this](cv::error_code ec, std::size_t) {
      if (ec) datagram_failed("async_send_to", ec.message().c_str());
      self.done();
    });
  }
  void done() const {
    if (--*pending == 0 && *to_start > 0) start();
  }
};

/// Two coroutines: one awaiting `ops` receives (`recv()`, an awaitable operation), the other `ops` sends
/// (`send()`); a send starts only while a receive is posted (else the run fails naming `what`).
template <class Recv, class Send>
void await_pairs(asio::io_context& io, int ops, Recv recv, Send send, const char* what) {
  int posted = 0;  // receives posted minus sends started
  const auto rethrow = [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  };
  asio::co_spawn(
      io,
      [&posted, ops, recv]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i) {
          ++posted;
          (void)co_await recv();
        }
      },
      rethrow);
  asio::co_spawn(
      io,
      [&posted, ops, send, what]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i) {
          if (posted-- <= 0) datagram_failed(what, "no receive posted before it");
          (void)co_await send();
        }
      },
      rethrow);
  io.restart();
  io.run();
}

/// As the sendrecv op's coroutines, on the datagram queue pairs (UD would drop a datagram with no receive).
template <class Token>
void await_datagrams(asio::io_context& io, soft_verbs::soft_datagram_pair& rig, std::size_t size, int ops, Token token) {
  await_pairs(
      io, ops, [&rig, size, token] { return rig.b.async_recv(rig.remote_span(size), token); },
      [&rig, size, token] { return rig.a.async_send_to(rig.to_b(), rig.local_span(size), token); }, "async_send_to");
}

}  // namespace bench_overhead
