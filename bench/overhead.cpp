// bench_overhead: what coverbs itself adds to an operation, natively on this host — no RDMA device, no
// emulator. coverbs' real data path (initiation, send-queue credits, work-request bookkeeping, completion
// dispatch, handler invocation, coroutine resume) runs against the software verbs device of
// test/fixtures/soft_verbs.hpp, which completes every work request at once inside ibv_post_send; the floor
// is a raw-verbs loop (ibv_post_send, then ibv_poll_cq until the completion) over the same device.
//
//   bench_overhead [--size BYTES] [--ops N] [--batches N] [--mode events|spin] [--max-completions-per-turn N]
//                  [--turn-quota-us US] [--op write|sendrecv|datagram|call|bind|rebind] [--way WAY] [--json]
//
// --op runs one op's ways alone (every op by default), --way one way alone (every way of the op by default;
// a way the op lacks is refused with exit status 2), e.g. to count its instructions with callgrind: a way
// runs ops * (batches + 1) operations (the +1: the warm-up batch).
//
// Each way of running an operation runs --batches batches of --ops operations (after one batch of
// warm-up); ns/op of a batch = its wall time / --ops. Figures per way (median and 99th percentile over
// the batches): {op}_{way}_ns_median, {op}_{way}_ns_p99, and {op}_{way}_over_raw_ns = its median minus
// the raw loop's median; {op}_{way}_completions_per_yield (write, sendrecv, bind, rebind): the completion
// queue's completions over its dispatch turns that yielded (max_completions_per_turn, or fewer when
// turn_quota ran out: natively, with the defaults, 16). op: write (an RDMA write of --size bytes), sendrecv (a receive
// posted, then a send of --size bytes consuming it: two work requests and two completions), datagram (the same on two
// UD queue pairs: coverbs' datagram path, bench/overhead_datagram.hpp), bind (bind_mw of an unbound type-2 window over
// 4 KiB, then invalidate of its key: a BIND_MW and a LOCAL_INV posted one after the other, two completions, with the
// window's bookkeeping of a first bind), rebind (rebind_mw of a bound type-2 window to other rights: a LOCAL_INV
// chained to a BIND_MW, two completions, with the window's bookkeeping; its raw floor posts the same chain). way:
//   raw            post + poll on the software device, no coverbs
//   callback       one operation in flight, its completion handler (a plain function object) starts the next
//   use_awaitable  a coroutine awaiting each operation with asio::use_awaitable
//   deferred       the same with asio::deferred
//   as_tuple       the same with asio::as_tuple(asio::use_awaitable)
//   batch16        16 requests per turn: 16 in flight with callbacks, each handler starting the next while
//                  any is left, so one completion queue turn runs up to 16 handlers whose writes are posted
//                  together at the turn's end
//   raw_batch16    the floor of batch16: 16 posted as one linked list in one ibv_post_send, only the last
//                  signaled, then polled until that one completed (the last list of a batch shorter when
//                  --ops is not a multiple of 16)
// For sendrecv, use_awaitable and deferred are two coroutines, one awaiting each receive, the other each send
// (a receive is always posted before the send it takes); batch16 is 16 receive + send pairs in flight, and
// raw_batch16 16 receives in one ibv_post_recv, then 16 sends in one ibv_post_send, the last signaled.
// Ways per op: write all of them; sendrecv raw, callback, use_awaitable, deferred, raw_batch16, batch16;
// datagram raw, callback, use_awaitable, deferred; call (bench/overhead_call.cpp: a message_endpoint call of
// --size bytes and its reply of --size bytes; raw: two receive + send pairs) raw, callback, use_awaitable, deferred;
// bind raw, callback, use_awaitable, deferred; rebind raw, callback, deferred.
// Targets: write use_awaitable <= raw + 150 ns, callback <= raw + 60 ns, batch16 <= raw_batch16 + 25 ns
// (target_* in the JSON).
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include "fixtures/soft_pair.hpp"
#include "overhead_call.hpp"
#include "overhead_datagram.hpp"
#include <coverbs_support/json_output.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using clock_type = std::chrono::steady_clock;

struct config {
  std::size_t size = 8;
  int ops = 1000;
  int batches = 300;
  std::string mode = "events";
  unsigned max_completions_per_turn = cv::completion_queue_options{}.max_completions_per_turn;
  long turn_quota_us = cv::completion_queue_options{}.turn_quota.count();
  std::string op;   // empty: every op
  std::string way;  // empty: every way of each op
  bool json = false;
};

constexpr const char* usage_text = "[--size BYTES] [--ops N] [--batches N] [--mode events|spin] "
                                   "[--max-completions-per-turn N] [--turn-quota-us US] [--op "
                                   "write|sendrecv|datagram|call|bind|rebind] [--way WAY] [--json]";

/// The ways each op runs, in the order they run (see the header).
struct op_ways {
  const char* op;
  std::vector<std::string> ways;
};
const std::vector<op_ways> ways_of_ops = {
    {"write", {"raw", "callback", "use_awaitable", "deferred", "as_tuple", "raw_batch16", "batch16"}},
    {"sendrecv", {"raw", "callback", "use_awaitable", "deferred", "raw_batch16", "batch16"}},
    {"datagram", {"raw", "callback", "use_awaitable", "deferred"}},
    {"call", {"raw", "callback", "use_awaitable", "deferred"}},
    {"bind", {"raw", "callback", "use_awaitable", "deferred"}},
    {"rebind", {"raw", "callback", "deferred"}}};

config parse(int argc, char** argv) {
  config c;
  CLI::App app{"", "bench_overhead"};
  bench::describe(app, usage_text,
                  "Nanoseconds per operation that coverbs adds, natively: its data path on a software verbs device "
                  "that completes each work request at once, against a raw-verbs loop on the same device.");
  app.add_option("--size", c.size)->transform(command_line::size(1, 1u << 20));
  app.add_option("--ops", c.ops)->transform(command_line::count(16, 1'000'000));
  app.add_option("--batches", c.batches)->transform(command_line::count(10, 100'000));
  app.add_option("--mode", c.mode)->check(command_line::one_of({"events", "spin"}));
  app.add_option("--max-completions-per-turn", c.max_completions_per_turn)->transform(command_line::count(1, 4096));
  app.add_option("--turn-quota-us", c.turn_quota_us)->check(CLI::Range(0L, 1'000'000L));
  app.add_option("--op", c.op)
      ->check(command_line::one_of({"write", "sendrecv", "datagram", "call", "bind", "rebind"}));
  app.add_option("--way", c.way)
      ->check(
          command_line::one_of({"raw", "callback", "use_awaitable", "deferred", "as_tuple", "raw_batch16", "batch16"}));
  app.add_flag("--json", c.json);
  bench::parse(app, argc, argv);
  for (const op_ways& o : ways_of_ops) {
    if (c.way.empty() || (!c.op.empty() && c.op != o.op)) continue;
    if (std::find(o.ways.begin(), o.ways.end(), c.way) != o.ways.end()) return c;
    if (c.op.empty()) continue;
    std::string ways;
    for (const std::string& w : o.ways)
      ways += (ways.empty() ? "" : ", ") + w;
    bench::usage_error(app, "--op " + c.op + " has no way '" + c.way + "' (its ways: " + ways + ")");
  }
  return c;
}

[[noreturn]] void fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "bench_overhead: %s failed: %s\n", what, why.c_str());
  std::exit(1);
}

void check(const cv::error_code& ec, const char* what) {
  if (ec) fail(what, ec.message());
}

}  // namespace

void bench_overhead::datagram_failed(const char* what, const char* why) { fail(what, why); }
void bench_overhead::call_failed(const char* what, const std::string& why) { fail(what, why); }

namespace {

struct figures {
  double median = 0, p99 = 0;
};

/// Runs `batch(ops)` once to warm up, then `batches` times; ns per operation, median and p99 over batches.
figures measure(const config& c, const std::function<void(int)>& batch) {
  batch(c.ops);
  std::vector<double> ns;
  ns.reserve(static_cast<std::size_t>(c.batches));
  for (int i = 0; i < c.batches; ++i) {
    const auto t0 = clock_type::now();
    batch(c.ops);
    const auto t1 = clock_type::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / c.ops);
  }
  std::sort(ns.begin(), ns.end());
  const auto at = [&](double q) { return ns[std::min(ns.size() - 1, static_cast<std::size_t>(q * ns.size()))]; };
  return {at(0.5), at(0.99)};
}

/// The raw-verbs floor: its own CQ and queue pairs on the software device, driven by libibverbs' inline
/// data-path calls alone.
struct raw_verbs {
  ibv_pd* pd;
  ibv_cq* cq;
  ibv_qp *a, *b;
  ibv_sge sge;
  ibv_send_wr wr[16]{};
  ibv_recv_wr rwr[16]{};

  raw_verbs(ibv_context* ctx, soft_verbs::soft_pair& rig, std::size_t size) {
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    a = ibv_create_qp(pd, &init);
    b = ibv_create_qp(pd, &init);
    if (!pd || !cq || !a || !b) fail("creating the raw-verbs objects", "no memory");
    ibv_qp_attr attr{};
    attr.dest_qp_num = b->qp_num;
    ibv_modify_qp(a, &attr, IBV_QP_DEST_QPN);
    attr.dest_qp_num = a->qp_num;
    ibv_modify_qp(b, &attr, IBV_QP_DEST_QPN);
    sge = rig.local_span(size).to_sge();
    for (ibv_send_wr& w : wr) {
      w.wr_id = static_cast<std::uint64_t>(&w - wr);
      w.sg_list = &sge;
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.send_flags = IBV_SEND_SIGNALED;
      w.wr.rdma.remote_addr = rig.remote_key(size).addr;
      w.wr.rdma.rkey = 2;
    }
    for (ibv_recv_wr& r : rwr) {
      r.sg_list = &sge;  // the receive lands in the local buffer too: only the cost matters here
      r.num_sge = 1;
    }
  }
  ~raw_verbs() {
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
  }

  void wait(int n) {
    ibv_wc wc[16];
    while (n > 0) {
      const int got = ibv_poll_cq(cq, 16, wc);
      for (int i = 0; i < got; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) fail("raw ibv_poll_cq", ibv_wc_status_str(wc[i].status));
      n -= got;
    }
  }
  /// Polls until the completion of the send request `last_wr_id` (an unsignaled one before it has none) and
  /// `recvs` receive completions.
  void wait_for(std::uint64_t last_wr_id, int recvs = 0) {
    ibv_wc wc[16];
    for (bool seen = false; !seen || recvs > 0;) {
      const int got = ibv_poll_cq(cq, 16, wc);
      for (int i = 0; i < got; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) fail("raw ibv_poll_cq", ibv_wc_status_str(wc[i].status));
        if (wc[i].opcode & IBV_WC_RECV)
          --recvs;
        else
          seen = seen || wc[i].wr_id == last_wr_id;
      }
    }
  }
  void post(ibv_qp* qp, ibv_send_wr* w) {
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, w, &bad)) fail("raw ibv_post_send", "refused");
  }
  void write(int ops) {
    wr[0].next = nullptr;
    for (int i = 0; i < ops; ++i) {
      post(a, &wr[0]);
      wait(1);
    }
  }
  /// `ops` writes, posted 16 to a linked list in one ibv_post_send, only its last request signaled (the
  /// last list shorter when `ops` is not a multiple of 16); each list is polled until its last completed.
  void write_batch16(int ops) { post_lists(ops, IBV_WR_RDMA_WRITE, false); }
  /// `ops` receive + send pairs: 16 receives in one ibv_post_recv, then 16 sends in one list as write_batch16.
  void sendrecv_batch16(int ops) { post_lists(ops, IBV_WR_SEND, true); }
  /// `ops` requests of `opcode`, 16 to a list (each list after as many receives when `with_recvs`).
  void post_lists(int ops, ibv_wr_opcode opcode, bool with_recvs) {
    for (int done = 0; done < ops;) {
      const int n = std::min(16, ops - done);
      for (int i = 0; i < n; ++i) {
        wr[i].opcode = opcode;
        wr[i].send_flags = i + 1 < n ? 0 : IBV_SEND_SIGNALED;
        wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
        rwr[i].next = i + 1 < n ? &rwr[i + 1] : nullptr;
      }
      if (with_recvs) {
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_recv(b, &rwr[0], &bad)) fail("raw ibv_post_recv", "refused");
      }
      post(a, &wr[0]);
      wait_for(wr[n - 1].wr_id, with_recvs ? n : 0);
      done += n;
    }
    for (ibv_send_wr& w : wr) {
      w.opcode = IBV_WR_RDMA_WRITE;
      w.send_flags = IBV_SEND_SIGNALED;
    }
    wr[0].next = nullptr;
    rwr[0].next = nullptr;
  }
  /// A BIND_MW of the unbound window with the next key, then LOCAL_INV of that key: as bind_mw, then invalidate.
  void bind_invalidate(ibv_mw* mw, ibv_mr* mr, int ops) {
    ibv_send_wr bind{}, inv{};
    bind.opcode = IBV_WR_BIND_MW;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_mw.mw = mw;
    bind.bind_mw.bind_info.mr = mr;
    bind.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(mr->addr);
    bind.bind_mw.bind_info.length = 4096;
    bind.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    for (int i = 0; i < ops; ++i) {
      bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
      post(a, &bind);
      wait(1);
      mw->rkey = bind.bind_mw.rkey;
      inv.invalidate_rkey = mw->rkey;
      post(a, &inv);
      wait(1);
    }
  }
  /// LOCAL_INV of the window's key chained to a BIND_MW with the next key, as rebind_mw posts it.
  void rebind(ibv_mw* mw, ibv_mr* mr, int ops) {
    ibv_send_wr inv{}, bind{};
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.next = &bind;
    bind.opcode = IBV_WR_BIND_MW;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_mw.mw = mw;
    bind.bind_mw.bind_info.mr = mr;
    bind.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(mr->addr);
    bind.bind_mw.bind_info.length = 4096;
    for (int i = 0; i < ops; ++i) {
      inv.invalidate_rkey = mw->rkey;
      bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
      bind.bind_mw.bind_info.mw_access_flags = i % 2 ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
      post(a, &inv);
      wait(2);
      mw->rkey = bind.bind_mw.rkey;
    }
  }
  void sendrecv(int ops) {
    ibv_send_wr send = wr[0];
    send.opcode = IBV_WR_SEND;
    send.next = nullptr;
    for (int i = 0; i < ops; ++i) {
      ibv_recv_wr* bad = nullptr;
      if (ibv_post_recv(b, &rwr[0], &bad)) fail("raw ibv_post_recv", "refused");
      post(a, &send);
      wait(2);
    }
  }
};

/// A plain completion handler that starts the next write while any is left to start.
struct write_chain {
  soft_verbs::soft_pair* rig;
  std::size_t size;
  int* to_start;
  void start() const {
    --*to_start;
    rig->a.async_write(rig->local_span(size), rig->remote_key(size), *this);
  }
  void operator()(cv::error_code ec, std::size_t) const {
    check(ec, "async_write");
    if (*to_start > 0) start();
  }
};

/// A receive on b and a send from a; the next pair starts when both completed.
struct sendrecv_chain {
  soft_verbs::soft_pair* rig;
  std::size_t size;
  int* to_start;
  int* pending;
  void start() const {
    --*to_start;
    *pending = 2;
    rig->b.async_recv(rig->remote_span(size), [self = *this](cv::error_code ec, cv::received) {
      check(ec, "async_recv");
      self.done();
    });
    rig->a.async_send(rig->local_span(size), [self = *this](cv::error_code ec, std::size_t) {
      check(ec, "async_send");
      self.done();
    });
  }
  void done() const {
    if (--*pending == 0 && *to_start > 0) start();
  }
};

void run(asio::io_context& io) {
  io.restart();
  io.run();
}

enum class awaiting { use_awaitable, deferred, as_tuple };

/// A coroutine awaiting `ops` writes one after the other, each with the token `how` names.
void await_writes(asio::io_context& io, soft_verbs::soft_pair& rig, std::size_t size, int ops, awaiting how) {
  asio::co_spawn(
      io,
      [&rig, size, ops, how]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i) {
          const auto local = rig.local_span(size);
          const auto remote = rig.remote_key(size);
          switch (how) {
          case awaiting::use_awaitable: (void)co_await rig.a.async_write(local, remote, asio::use_awaitable); break;
          case awaiting::deferred: (void)co_await rig.a.async_write(local, remote, asio::deferred); break;
          case awaiting::as_tuple: {
            auto [ec, n] = co_await rig.a.async_write(local, remote, asio::as_tuple(asio::use_awaitable));
            check(ec, "async_write");
            break;
          }
          }
        }
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  run(io);
}

/// Two coroutines: one awaiting `ops` receives on b, the other `ops` sends from a, each with `token`. A send
/// starts only while a receive is posted: the receiver posts the next as soon as its last completed, in the
/// completion queue turn that completes the send too (the software device completes the receive first).
template <class Token>
void await_sendrecvs(asio::io_context& io, soft_verbs::soft_pair& rig, std::size_t size, int ops, Token token) {
  bench_overhead::await_pairs(
      io, ops, [&rig, size, token] { return rig.b.async_recv(rig.remote_span(size), token); },
      [&rig, size, token] { return rig.a.async_send(rig.local_span(size), token); }, "async_send");
}

/// One rebind_mw (the default token) of a bound window after the other, alternating its rights.
void await_rebinds(asio::io_context& io, soft_verbs::soft_pair& rig, cv::memory_window& w, cv::memory_region& mr,
                   int ops) {
  asio::co_spawn(
      io,
      [&, ops]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i)
          co_await cv::rebind_mw(rig.a, w, mr, {0, 4096}, i % 2 ? cv::access::remote_read : cv::access::remote_write);
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  run(io);
}

/// bind_mw of an unbound window, then invalidate of its key, `ops` times, each awaited with `token`.
template <class Token>
void await_binds(asio::io_context& io, soft_verbs::soft_pair& rig, cv::memory_window& w, cv::memory_region& mr, int ops,
                 Token token) {
  asio::co_spawn(
      io,
      [&, ops, token]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i) {
          co_await cv::bind_mw(rig.a, w, mr, {0, 4096}, cv::access::remote_read, token);
          co_await cv::invalidate(rig.a, w, token);
        }
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  run(io);
}

/// A bind whose completion handler invalidates the key, whose handler starts the next bind while any is left.
struct bind_chain {
  soft_verbs::soft_pair* rig;
  cv::memory_window* w;
  cv::memory_region* mr;
  int* to_start;
  void start() const {
    --*to_start;
    cv::bind_mw(rig->a, *w, *mr, {0, 4096}, cv::access::remote_read, *this);
  }
  void operator()(cv::error_code ec, cv::remote_key) const {
    check(ec, "bind_mw");
    cv::invalidate(rig->a, *w, [self = *this](cv::error_code e) {
      check(e, "invalidate");
      if (*self.to_start > 0) self.start();
    });
  }
};

/// A rebind whose completion handler starts the next while any is left to start.
struct rebind_chain {
  soft_verbs::soft_pair* rig;
  cv::memory_window* w;
  cv::memory_region* mr;
  int* to_start;
  void start() const {
    const auto rights = --*to_start % 2 ? cv::access::remote_read : cv::access::remote_write;
    cv::rebind_mw(rig->a, *w, *mr, {0, 4096}, rights, *this);
  }
  void operator()(cv::error_code ec, cv::remote_key) const {
    check(ec, "rebind_mw");
    if (*to_start > 0) start();
  }
};

/// A type-2 window over a 4 KiB region of its own (whatever --size says), and a raw-verbs window beside it.
struct window_setup {
  static constexpr auto rights =
      cv::access::local_write | cv::access::remote_read | cv::access::remote_write | cv::access::mw_bind;
  std::vector<std::byte> bytes = std::vector<std::byte>(4096);
  cv::memory_region mr;
  cv::memory_window window;
  ibv_mw* raw;
  explicit window_setup(cv::protection_domain& pd)
      : mr(pd, bytes, rights), window(pd, cv::window_type::type2),
        raw(ibv_alloc_mw(pd.native_handle(), IBV_MW_TYPE_2)) {
    if (!raw) fail("ibv_alloc_mw", "no memory");
  }
  window_setup(const window_setup&) = delete;
  window_setup& operator=(const window_setup&) = delete;
  ~window_setup() { ibv_dealloc_mw(raw); }
};

struct result {
  std::string op, way;
  figures f;
  double completions_per_yield = 0;  // of the queue's dispatch turns over the way's run; 0: it never yielded
};

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  try {
    asio::io_context io;
    cv::completion_queue_options cq_options;
    if (c.mode == "spin") cq_options.spin = cv::completion_queue_options::spin_forever;
    cq_options.max_completions_per_turn = c.max_completions_per_turn;
    cq_options.turn_quota = std::chrono::microseconds(c.turn_quota_us);
    soft_verbs::soft_pair rig(io, 64, c.size, cq_options);
    raw_verbs raw(rig.soft.context(), rig, c.size);
    const std::size_t size = c.size;
    std::vector<result> results;
    const auto add = [&](const char* op, const char* way, const std::function<void(int)>& batch) {
      if ((c.op.empty() || c.op == op) && (c.way.empty() || c.way == way)) {
        // The ops on the rig's queue (datagram and call run on queues of their own).
        const bool on_rig = std::string_view(op) != "datagram" && std::string_view(op) != "call";
        const cv::completion_queue_stats before = rig.cq.stats();
        const figures f = measure(c, batch);
        const cv::completion_queue_stats after = rig.cq.stats();
        const auto yields = after.yields - before.yields;
        results.push_back(
            {op, way, f,
             on_rig && yields ? static_cast<double>(after.completions - before.completions) / yields : 0.0});
      }
    };

    add("write", "raw", [&](int ops) { raw.write(ops); });
    add("write", "callback", [&](int ops) {
      int to_start = ops;
      write_chain{&rig, size, &to_start}.start();
      run(io);
    });
    add("write", "use_awaitable", [&](int ops) { await_writes(io, rig, size, ops, awaiting::use_awaitable); });
    add("write", "deferred", [&](int ops) { await_writes(io, rig, size, ops, awaiting::deferred); });
    add("write", "as_tuple", [&](int ops) { await_writes(io, rig, size, ops, awaiting::as_tuple); });
    add("write", "raw_batch16", [&](int ops) { raw.write_batch16(ops); });
    add("write", "batch16", [&](int ops) {
      int to_start = ops;
      const write_chain chain{&rig, size, &to_start};
      for (int i = 0; i < 16; ++i)
        chain.start();
      run(io);
    });
    add("sendrecv", "raw", [&](int ops) { raw.sendrecv(ops); });
    add("sendrecv", "callback", [&](int ops) {
      int to_start = ops, pending = 0;
      sendrecv_chain{&rig, size, &to_start, &pending}.start();
      run(io);
    });
    add("sendrecv", "use_awaitable", [&](int ops) { await_sendrecvs(io, rig, size, ops, asio::use_awaitable); });
    add("sendrecv", "deferred", [&](int ops) { await_sendrecvs(io, rig, size, ops, asio::deferred); });
    add("sendrecv", "raw_batch16", [&](int ops) { raw.sendrecv_batch16(ops); });
    add("sendrecv", "batch16", [&](int ops) {
      int to_start = ops, pending[16]{};
      for (int& p : pending)
        sendrecv_chain{&rig, size, &to_start, &p}.start();
      run(io);
    });

    // A datagram is one packet: the software device's MTU is 4096 bytes (all ops run without --op only up to it).
    if (c.op == "datagram" && size > 4096) fail("--op datagram", "--size is above the MTU, 4096 bytes");
    if ((c.op.empty() && size <= 4096) || c.op == "datagram") {
      cv::datagram_options o;
      o.max_send_wr = o.max_recv_wr = 64;
      soft_verbs::soft_datagram_pair dg(io, o, size, cq_options);
      bench_overhead::raw_datagram raw_dg(dg, size);
      add("datagram", "raw", [&](int ops) { raw_dg.sendrecv(ops); });
      add("datagram", "callback", [&](int ops) {
        int to_start = ops, pending = 0;
        bench_overhead::datagram_chain{&dg, size, &to_start, &pending}.start();
        run(io);
      });
      add("datagram", "use_awaitable",
          [&](int ops) { bench_overhead::await_datagrams(io, dg, size, ops, asio::use_awaitable); });
      add("datagram", "deferred", [&](int ops) { bench_overhead::await_datagrams(io, dg, size, ops, asio::deferred); });
    }
    // Calls: the slot holds --size bytes (at least 64). On a pair of their own: the endpoints keep receives posted
    // on their queue pairs until those are destroyed, and the ops after them run their loops to the end.
    if (c.op.empty() || c.op == "call") {
      soft_verbs::soft_pair call_pair(io, 64, size, cq_options);
      const bench_overhead::call_rig_ptr calls = bench_overhead::make_call_rig(call_pair, size);
      add("call", "raw", [&](int ops) { raw.sendrecv(2 * ops); });
      add("call", "callback", [&](int ops) { bench_overhead::callback_calls(io, *calls, ops); });
      add("call", "use_awaitable", [&](int ops) { bench_overhead::awaitable_calls(io, *calls, ops); });
      add("call", "deferred", [&](int ops) { bench_overhead::deferred_calls(io, *calls, ops); });
    }
    if (c.op.empty() || c.op == "bind") {
      window_setup u(rig.pd);
      add("bind", "raw", [&](int ops) { raw.bind_invalidate(u.raw, u.mr.native_handle(), ops); });
      add("bind", "callback", [&](int ops) {
        int to_start = ops;
        bind_chain{&rig, &u.window, &u.mr, &to_start}.start();
        run(io);
      });
      add("bind", "use_awaitable", [&](int ops) { await_binds(io, rig, u.window, u.mr, ops, asio::use_awaitable); });
      add("bind", "deferred", [&](int ops) { await_binds(io, rig, u.window, u.mr, ops, asio::deferred); });
    }
    if (c.op.empty() || c.op == "rebind") {
      window_setup u(rig.pd);  // bound once before the rebinds
      cv::bind_mw(rig.a, u.window, u.mr, {0, 4096}, cv::access::remote_read,
                  [](cv::error_code ec, cv::remote_key) { check(ec, "bind_mw"); });
      run(io);
      add("rebind", "raw", [&](int ops) { raw.rebind(u.raw, u.mr.native_handle(), ops); });
      add("rebind", "callback", [&](int ops) {
        int to_start = ops;
        rebind_chain{&rig, &u.window, &u.mr, &to_start}.start();
        run(io);
      });
      add("rebind", "deferred", [&](int ops) { await_rebinds(io, rig, u.window, u.mr, ops); });
      cv::invalidate(rig.a, u.window, [](cv::error_code ec) { check(ec, "invalidate"); });
      run(io);
    }

    /// The median of `r` over its floor's (raw, or raw_batch16 for batch16); none for a floor itself, or when
    /// the floor did not run (--way).
    const auto over_floor = [&](const result& r) -> std::optional<double> {
      if (r.way == "raw" || r.way == "raw_batch16") return std::nullopt;
      const std::string floor = r.way == "batch16" ? "raw_batch16" : "raw";
      for (const result& f : results)
        if (f.op == r.op && f.way == floor) return r.f.median - f.f.median;
      return std::nullopt;
    };
    const auto r1 = [](double x) { return json_output::rounded(x, 1); };
    if (c.json) {
      json_output::json::object o{{"where", "host"},
                                  {"device", "software"},
                                  {"mode", c.mode},
                                  {"max_completions_per_turn", c.max_completions_per_turn},
                                  {"turn_quota_us", c.turn_quota_us},
                                  {"size", size},
                                  {"ops_per_batch", c.ops},
                                  {"batches", c.batches}};
      for (const result& r : results) {
        const std::string key = r.op + "_" + r.way;
        o[key + "_ns_median"] = r1(r.f.median);
        o[key + "_ns_p99"] = r1(r.f.p99);
        if (const auto over = over_floor(r)) o[key + "_over_raw_ns"] = r1(*over);
        if (r.completions_per_yield > 0) o[key + "_completions_per_yield"] = r1(r.completions_per_yield);
      }
      if (o.contains("write_raw_ns_median")) {  // the targets are the write's
        o["target_write_callback_over_raw_ns"] = 60;
        o["target_write_use_awaitable_over_raw_ns"] = 150;
      }
      if (o.contains("write_raw_batch16_ns_median")) o["target_write_batch16_over_raw_ns"] = 25;
      json_output::print(o);
    } else {
      std::printf("%-9s %-14s %12s %12s %12s\n", "op", "way", "ns/op med", "ns/op p99", "over raw");
      for (const result& r : results) {
        char over_text[32] = "";
        if (const auto over = over_floor(r)) std::snprintf(over_text, sizeof over_text, "%.1f", *over);
        std::printf("%-9s %-14s %12.1f %12.1f %12s\n", r.op.c_str(), r.way.c_str(), r.f.median, r.f.p99, over_text);
      }
    }
  } catch (const std::exception& e) {
    fail("the benchmark", e.what());
  }
  return 0;
}
