// bench_overhead: what coverbs itself adds to an operation, natively on this host — no RDMA device, no
// emulator. coverbs' real data path (initiation, send-queue credits, work-request bookkeeping, completion
// dispatch, handler invocation, coroutine resume) runs against the software verbs device of
// test/fixtures/soft_verbs.hpp, which completes every work request at once inside ibv_post_send; the floor
// is a raw-verbs loop (ibv_post_send, then ibv_poll_cq until the completion) over the same device.
//
//   bench_overhead [--size BYTES] [--ops N] [--batches N] [--mode events|spin]
//                  [--op write|sendrecv|bind|rebind] [--json]
//
// --op runs one op's ways alone (every op by default), e.g. to count its instructions with perf stat.
//
// Each way of running an operation runs --batches batches of --ops operations (after one batch of
// warm-up); ns/op of a batch = its wall time / --ops. Figures per way (median and 99th percentile over
// the batches): {op}_{way}_ns_median, {op}_{way}_ns_p99, and {op}_{way}_over_raw_ns = its median minus
// the raw loop's median. op: write (an RDMA write of --size bytes), sendrecv (a receive posted, then a
// send of --size bytes consuming it: two work requests and two completions), bind (bind_mw of an unbound
// type-2 window over 4 KiB, then invalidate of its key: a BIND_MW and a LOCAL_INV posted one after the
// other, two completions, with the window's bookkeeping of a first bind), rebind (rebind_mw of a bound
// type-2 window to other rights: a LOCAL_INV chained to a BIND_MW, two completions, with the window's
// bookkeeping; its raw floor posts the same chain). way:
//   raw            post + poll on the software device, no coverbs
//   callback       one operation in flight, its completion handler (a plain function object) starts the next
//   use_awaitable  a coroutine awaiting each operation with asio::use_awaitable
//   deferred       the same with asio::deferred
//   as_tuple       the same with asio::as_tuple(asio::use_awaitable)
//   batch16        16 in flight with callbacks (each handler starts the next while any is left)
//   raw_batch16    the floor of batch16: 16 posted as one chain, then polled until all 16 completed (the
//                  last chain of a batch shorter when --ops is not a multiple of 16)
// Targets: write use_awaitable <= raw + 150 ns, callback <= raw + 60 ns (target_* in the JSON).
#include <coverbs/coverbs.hpp>

#include "fixtures/soft_pair.hpp"
#include <coverbs_support/json_output.hpp>
#include "cli.hpp"

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
#include <string>
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
  std::string op;  // empty: every op
  bool json = false;
};

constexpr const char* usage_text =
    "[--size BYTES] [--ops N] [--batches N] [--mode events|spin] [--op write|sendrecv|bind|rebind] [--json]";

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
  app.add_option("--op", c.op)->check(command_line::one_of({"write", "sendrecv", "bind", "rebind"}));
  app.add_flag("--json", c.json);
  bench::parse(app, argc, argv);
  return c;
}

[[noreturn]] void fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "bench_overhead: %s failed: %s\n", what, why.c_str());
  std::exit(1);
}

void check(const cv::error_code& ec, const char* what) {
  if (ec) fail(what, ec.message());
}

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
  ibv_recv_wr rwr{};

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
      w.sg_list = &sge;
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.send_flags = IBV_SEND_SIGNALED;
      w.wr.rdma.remote_addr = rig.remote_key(size).addr;
      w.wr.rdma.rkey = 2;
    }
    rwr.sg_list = &sge;  // the receive lands in the local buffer too: only the cost matters here
    rwr.num_sge = 1;
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
  /// `ops` writes, posted 16 to a chain (the last chain shorter when `ops` is not a multiple of 16).
  void write_batch16(int ops) {
    for (int done = 0; done < ops;) {
      const int n = std::min(16, ops - done);
      for (int i = 0; i + 1 < n; ++i)
        wr[i].next = &wr[i + 1];
      wr[n - 1].next = nullptr;
      post(a, &wr[0]);
      wait(n);
      done += n;
    }
    wr[0].next = nullptr;
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
      if (ibv_post_recv(b, &rwr, &bad)) fail("raw ibv_post_recv", "refused");
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

/// bind_mw of an unbound window, then invalidate of its key (the default token), `ops` times.
void await_binds(asio::io_context& io, soft_verbs::soft_pair& rig, cv::memory_window& w, cv::memory_region& mr,
                 int ops) {
  asio::co_spawn(
      io,
      [&, ops]() -> asio::awaitable<void> {
        for (int i = 0; i < ops; ++i) {
          co_await cv::bind_mw(rig.a, w, mr, {0, 4096}, cv::access::remote_read);
          co_await cv::invalidate(rig.a, w);
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
};

}  // namespace

int main(int argc, char** argv) {
  const config c = parse(argc, argv);
  try {
    asio::io_context io;
    cv::completion_queue_options cq_options;
    if (c.mode == "spin") cq_options.spin = cv::completion_queue_options::spin_forever;
    soft_verbs::soft_pair rig(io, 64, c.size, cq_options);
    raw_verbs raw(rig.soft.context(), rig, c.size);
    const std::size_t size = c.size;
    std::vector<result> results;
    const auto add = [&](const char* op, const char* way, const std::function<void(int)>& batch) {
      if (c.op.empty() || c.op == op) results.push_back({op, way, measure(c, batch)});
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

    if (c.op.empty() || c.op == "bind") {
      window_setup u(rig.pd);
      add("bind", "raw", [&](int ops) { raw.bind_invalidate(u.raw, u.mr.native_handle(), ops); });
      add("bind", "callback", [&](int ops) {
        int to_start = ops;
        bind_chain{&rig, &u.window, &u.mr, &to_start}.start();
        run(io);
      });
      add("bind", "deferred", [&](int ops) { await_binds(io, rig, u.window, u.mr, ops); });
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

    const auto median_of = [&](const std::string& op, const std::string& way) {
      for (const result& r : results)
        if (r.op == op && r.way == way) return r.f.median;
      return 0.0;
    };
    const auto r1 = [](double x) { return json_output::rounded(x, 1); };
    if (c.json) {
      json_output::json::object o{{"where", "host"}, {"device", "software"},   {"mode", c.mode},
                                  {"size", size},    {"ops_per_batch", c.ops}, {"batches", c.batches}};
      for (const result& r : results) {
        const std::string key = r.op + "_" + r.way;
        o[key + "_ns_median"] = r1(r.f.median);
        o[key + "_ns_p99"] = r1(r.f.p99);
        if (r.way != "raw" && r.way != "raw_batch16") {
          const std::string floor = r.way == "batch16" ? "raw_batch16" : "raw";
          o[key + "_over_raw_ns"] = r1(r.f.median - median_of(r.op, floor));
        }
      }
      if (o.contains("write_raw_ns_median")) {  // the targets are the write's
        o["target_write_callback_over_raw_ns"] = 60;
        o["target_write_use_awaitable_over_raw_ns"] = 150;
      }
      json_output::print(o);
    } else {
      std::printf("%-9s %-14s %12s %12s %12s\n", "op", "way", "ns/op med", "ns/op p99", "over raw");
      for (const result& r : results) {
        const bool floor = r.way == "raw" || r.way == "raw_batch16";
        const double over = r.f.median - median_of(r.op, r.way == "batch16" ? "raw_batch16" : "raw");
        char over_text[32] = "";
        if (!floor) std::snprintf(over_text, sizeof over_text, "%.1f", over);
        std::printf("%-9s %-14s %12.1f %12.1f %12s\n", r.op.c_str(), r.way.c_str(), r.f.median, r.f.p99, over_text);
      }
    }
  } catch (const std::exception& e) {
    fail("the benchmark", e.what());
  }
  return 0;
}
