// bench_windows: what a memory-window bind costs, and what changing a peer's rights costs with windows
// versus re-registering memory — through coverbs and through raw verbs in the same run.
//
//   bench_windows [--device NAME] [--iters N] [--rereg-iters N] [--json]
//
// Figures (medians, microseconds; time stamps from the cycle counter, as perftest takes them):
//   mw1_bind_us            coverbs bind_mw of a type-1 window (ibv_bind_mw), posted to completion
//   mw2_bind_us            coverbs `co_await bind_mw` of an unbound type-2 window (IBV_WR_BIND_MW), from the
//                          call until the coroutine runs again
//   mw2_rebind_us          coverbs rebind_mw changing a bound type-2 window's rights (LOCAL_INV + BIND_MW chain)
//   rereg_or_reg_us        the same rights change on a 1 MiB region: ibv_rereg_mr where the device supports it,
//                          else ibv_dereg_mr + ibv_reg_mr
//   mw_vs_rereg_speedup    rereg_or_reg_us / mw2_rebind_us
//   raw_mw2_bind_us        the type-2 bind as a raw-verbs loop (ibv_post_send, busy ibv_poll_cq)
//   bind_overhead_ratio    mw2_bind_us / raw_mw2_bind_us (coverbs on a busy-polling completion queue)
//   mw2_bind_handler_us    the same bind with a plain completion handler (no coroutine): the runtime's own
//                          cost without Asio's awaitable machinery
//   bind_overhead_ratio_handler  mw2_bind_handler_us / raw_mw2_bind_us
//   mw2_bind_event_us      mw2_bind_us on an event-driven completion queue (sleeps on the channel)
//   loop_turn_us           one `co_await post(...)` round trip through the same io_context (the loop's own cost)
//   handler_turn_us        one post(handler) round trip through the same io_context
// Every iteration measures each figure once (raw verbs first), so that the machine's noise hits all alike.
#include <coverbs/coverbs.hpp>

#include "cli.hpp"
#include "../tools/json_output.hpp"
#include "../tools/progress.hpp"
#include "../tools/statistics.hpp"
#include "stamp_clock.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using bench::stamp_clock;
using asio::awaitable;
using ticks = std::uint64_t;

ticks since(ticks t) { return stamp_clock::now() - t; }

constexpr auto region_rights = cv::access::local_write | cv::access::remote_read | cv::access::remote_write |
                               cv::access::remote_atomic | cv::access::mw_bind;

/// Runs `coro` on `io` to completion.
template <class F>
void run(asio::io_context& io, F&& coro) {
  bool done = false;
  asio::co_spawn(io, std::forward<F>(coro)(), [&](std::exception_ptr e) {
    done = true;
    if (e) std::rethrow_exception(e);
  });
  io.restart();
  io.run();
  if (!done) throw cv::system_error(cv::errno_code(EIO), "bench coroutine did not finish");
}

/// Durations in cycle-counter ticks.
struct samples {
  std::vector<ticks> mw1, mw2, mw2_rebind, mw2_event, mw2_handler, raw_mw2, rereg, loop_turn, handler_turn;
};

/// The windows and queue pairs of one run.
struct setup {
  cv::queue_pair& qp;        // busy-polling completion queue
  cv::queue_pair& qp_event;  // event-driven completion queue
  cv::memory_region& mr;
  cv::memory_window &w1, &w2, &w2_rebind, &w2_event;
  ibv_qp* raw_qp;
  ibv_cq* raw_cq;
  ibv_mw* raw_mw;
};

void raw_bind(const setup& u, samples& s);

/// One iteration of every data-path figure, interleaved so that the machine's noise hits each alike.
awaitable<void> round(const setup& u, int n, samples& s) {
  const auto time = [](std::vector<ticks>& into, ticks t) { into.push_back(since(t)); };
  for (int i = 0; i < n; ++i) {
    raw_bind(u, s);

    auto t = stamp_clock::now();
    co_await cv::bind_mw(u.qp, u.w2, u.mr, {0, 4096}, cv::access::remote_read);
    time(s.mw2, t);
    co_await cv::invalidate(u.qp, u.w2);

    t = stamp_clock::now();
    co_await cv::bind_mw(u.qp, u.w1, u.mr, {0, 4096}, cv::access::remote_read);
    time(s.mw1, t);

    const auto rights = i % 2 ? cv::access::remote_read : cv::access::remote_write;
    t = stamp_clock::now();
    co_await cv::rebind_mw(u.qp, u.w2_rebind, u.mr, {0, 4096}, rights);
    time(s.mw2_rebind, t);

    t = stamp_clock::now();
    co_await cv::bind_mw(u.qp_event, u.w2_event, u.mr, {0, 4096}, cv::access::remote_read);
    time(s.mw2_event, t);
    co_await cv::invalidate(u.qp_event, u.w2_event);

    t = stamp_clock::now();
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    time(s.loop_turn, t);
  }
}

void poll_one(ibv_cq* cq) {
  ibv_wc wc{};
  int got = 0;
  while ((got = ibv_poll_cq(cq, 1, &wc)) == 0) {
  }
  if (got < 0 || wc.status != IBV_WC_SUCCESS)
    throw cv::system_error(got < 0 ? cv::errno_code(EIO) : cv::make_error_code(wc.status), "raw bind loop");
}

/// Raw verbs: a type-2 bind (timed) and its LOCAL_INV, busy-polling the queue pair's own completion queue.
void raw_bind(const setup& u, samples& s) {
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = u.raw_mw;
  wr.bind_mw.rkey = ibv_inc_rkey(u.raw_mw->rkey);
  wr.bind_mw.bind_info.mr = u.mr.native_handle();
  wr.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(u.mr.data());
  wr.bind_mw.bind_info.length = 4096;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  const auto t = stamp_clock::now();
  if (int rc = ibv_post_send(u.raw_qp, &wr, &bad)) throw cv::system_error(cv::errno_code(rc), "ibv_post_send(BIND_MW)");
  poll_one(u.raw_cq);
  s.raw_mw2.push_back(since(t));
  u.raw_mw->rkey = wr.bind_mw.rkey;
  ibv_send_wr inv{};
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = u.raw_mw->rkey;
  if (int rc = ibv_post_send(u.raw_qp, &inv, &bad))
    throw cv::system_error(cv::errno_code(rc), "ibv_post_send(LOCAL_INV)");
  poll_one(u.raw_cq);
}

/// The type-2 bind with completion handlers instead of a coroutine (and a bare loop turn), `n` times.
void handler_round(asio::io_context& io, const setup& u, int n, samples& s) {
  const auto run = [&io] {
    io.restart();
    io.run();
  };
  for (int i = 0; i < n; ++i) {
    ticks done = 0;
    cv::error_code ec;
    const ticks t = stamp_clock::now();
    cv::bind_mw(u.qp, u.w2, u.mr, {0, 4096}, cv::access::remote_read, [&](cv::error_code e, cv::remote_key) {
      done = stamp_clock::now();
      ec = e;
    });
    run();
    if (ec) throw cv::system_error(ec, "bind_mw (completion handler)");
    s.mw2_handler.push_back(done - t);
    cv::invalidate(u.qp, u.w2, [&](cv::error_code e) { ec = e; });
    run();
    if (ec) throw cv::system_error(ec, "invalidate (completion handler)");
    const ticks p = stamp_clock::now();
    asio::post(io, [&] { done = stamp_clock::now(); });
    run();
    s.handler_turn.push_back(done - p);
  }
}

/// The same rights change by re-registering: rereg where supported, else dereg + reg.
void rereg_round(cv::protection_domain& pd, std::vector<std::byte>& buffer, bool rereg, int n, samples& s) {
  const int flags[2] = {IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE};
  ibv_mr* mr = ibv_reg_mr(pd.native_handle(), buffer.data(), buffer.size(), flags[0]);
  if (!mr) throw cv::system_error(cv::verbs_null_result(mr), "ibv_reg_mr(1 MiB)");
  for (int i = 0; i < n; ++i) {
    const int f = flags[(i + 1) % 2];
    const auto t = stamp_clock::now();
    if (rereg) {
      if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, f) != 0)
        throw cv::system_error(cv::errno_code(errno), "ibv_rereg_mr");
    } else {
      ibv_dereg_mr(mr);
      mr = ibv_reg_mr(pd.native_handle(), buffer.data(), buffer.size(), f);
      if (!mr) throw cv::system_error(cv::verbs_null_result(mr), "ibv_reg_mr(1 MiB)");
    }
    s.rereg.push_back(since(t));
  }
  ibv_dereg_mr(mr);
}

}  // namespace

int main(int argc, char** argv) {
  const char* prog = "bench_windows";
  const char* usage = "[--device NAME] [--iters N] [--rereg-iters N] [--json]";
  std::string name;
  int iters = 2000, rereg_iters = 200;
  bool json = false;
  CLI::App app{"", prog};
  bench::describe(app, usage,
                  "Memory-window bind, rebind and invalidation against re-registration, coverbs against raw verbs in "
                  "one run; see the source's header for each figure.");
  app.add_option("--device", name);
  app.add_option("--iters", iters)->check(command_line::count(5, 1000000));
  app.add_option("--rereg-iters", rereg_iters)->check(command_line::count(5, 100000));
  app.add_flag("--json", json);
  bench::parse(app, argc, argv);
  try {
    cv::device dev = cv::device::open(name);
    const cv::device_caps& caps = dev.caps();
    cv::protection_domain pd(dev);
    asio::io_context io(1), idle(1);  // one thread: Asio skips its cross-thread locking
    cv::completion_queue cq(io, dev, {.spin = cv::completion_queue_options::spin_forever});
    cv::completion_queue cq_event(io, dev);
    cv::completion_queue cq_raw(idle, dev);  // polled by hand; its loop never runs
    const cv::queue_pair_options o{.max_send_wr = 16, .max_recv_wr = 16};
    cv::queue_pair a(pd, cq, o), b(pd, cq, o), e(pd, cq_event, o), f(pd, cq_event, o), ra(pd, cq_raw, o),
        rb(pd, cq_raw, o);
    cv::connect_pair(a, b);
    cv::connect_pair(e, f);
    cv::connect_pair(ra, rb);
    std::vector<std::byte> bytes(1 << 20, std::byte{1}), rereg_bytes(1 << 20, std::byte{1});
    cv::memory_region mr(pd, bytes, region_rights);
    cv::memory_window w1(pd, cv::window_type::type1), w2(pd, cv::window_type::type2),
        w2_rebind(pd, cv::window_type::type2), w2_event(pd, cv::window_type::type2);
    ibv_mw* raw_mw = ibv_alloc_mw(pd.native_handle(), IBV_MW_TYPE_2);
    if (!raw_mw) throw cv::system_error(cv::verbs_null_result(raw_mw), "ibv_alloc_mw");

    samples s;
    stamp_clock clock;
    const setup u{a, e, mr, w1, w2, w2_rebind, w2_event, ra.native_handle(), cq_raw.native_handle(), raw_mw};
    run(io, [&]() -> awaitable<void> { co_await cv::bind_mw(a, w2_rebind, mr, {0, 4096}, cv::access::remote_read); });
    constexpr int rounds = 5;
    progress::phases phase(prog, rounds + 1);
    for (int r = 0; r < rounds; ++r) {
      phase.next("round " + std::to_string(r + 1) + " of " + std::to_string(rounds) + ": " +
                 std::to_string(iters / rounds) + " binds of each kind, " + std::to_string(rereg_iters / rounds) +
                 " re-registrations");
      run(io, [&] { return round(u, iters / rounds, s); });
      handler_round(io, u, iters / rounds, s);
      rereg_round(pd, rereg_bytes, caps.rereg_mr, rereg_iters / rounds, s);
    }
    ibv_dealloc_mw(raw_mw);
    phase.next("done");

    const auto median_us = [k = clock.us_per_tick()](const std::vector<ticks>& v) { return statistics::median(v) * k; };
    const double mw1 = median_us(s.mw1), mw2 = median_us(s.mw2), rebind = median_us(s.mw2_rebind),
                 raw = median_us(s.raw_mw2), event = median_us(s.mw2_event), rereg = median_us(s.rereg),
                 turn = median_us(s.loop_turn), handler = median_us(s.mw2_handler),
                 handler_turn = median_us(s.handler_turn);
    const char* how = caps.rereg_mr ? "ibv_rereg_mr" : "ibv_dereg_mr+ibv_reg_mr";
    if (json) {
      const auto r2 = [](double x) { return json_output::rounded(x, 2); };
      const auto r3 = [](double x) { return json_output::rounded(x, 3); };
      json_output::print(json_output::json::object{{"device", dev.name()},
                                                   {"iters", iters},
                                                   {"rereg_iters", rereg_iters},
                                                   {"rereg_method", how},
                                                   {"mw1_bind_us", r2(mw1)},
                                                   {"mw2_bind_us", r2(mw2)},
                                                   {"mw2_rebind_us", r2(rebind)},
                                                   {"rereg_or_reg_us", r2(rereg)},
                                                   {"mw_vs_rereg_speedup", r2(rereg / rebind)},
                                                   {"raw_mw2_bind_us", r2(raw)},
                                                   {"bind_overhead_ratio", r3(mw2 / raw)},
                                                   {"mw2_bind_handler_us", r2(handler)},
                                                   {"bind_overhead_ratio_handler", r3(handler / raw)},
                                                   {"mw2_bind_event_us", r2(event)},
                                                   {"loop_turn_us", r2(turn)},
                                                   {"handler_turn_us", r2(handler_turn)}});
    } else {
      std::printf("device %s, %d binds per figure, %d re-registrations (%s)\n", dev.name().c_str(), iters,
                  rereg_iters, how);
      std::printf("  mw1_bind_us                  %10.2f\n  mw2_bind_us                  %10.2f\n"
                  "  mw2_rebind_us                %10.2f\n  rereg_or_reg_us              %10.2f\n"
                  "  mw_vs_rereg_speedup          %10.2f\n  raw_mw2_bind_us              %10.2f\n"
                  "  bind_overhead_ratio          %10.3f\n  mw2_bind_handler_us          %10.2f\n"
                  "  bind_overhead_ratio_handler  %10.3f\n  mw2_bind_event_us            %10.2f\n"
                  "  loop_turn_us                 %10.2f\n  handler_turn_us              %10.2f\n",
                  mw1, mw2, rebind, rereg, rereg / rebind, raw, mw2 / raw, handler, handler / raw, event, turn,
                  handler_turn);
    }
  } catch (const cv::system_error& e) {
    std::fprintf(stderr, "bench_windows: %s\n", e.what());
    return 1;
  }
  return 0;
}
