// bench_windows: what a memory-window bind costs, and what changing a peer's rights costs with windows
// versus re-registering memory — through coverbs and through raw verbs in the same run.
//
//   bench_windows [--device NAME] [--iters N] [--rereg-iters N] [--rounds R] [--json]
//
// Figures (medians, microseconds; time stamps from the cycle counter, as perftest takes them):
//   mw1_bind_us            coverbs bind_mw of a type-1 window (ibv_bind_mw), posted to completion
//   mw2_bind_us            coverbs `co_await bind_mw` of an unbound type-2 window (IBV_WR_BIND_MW), from the
//                          call until the coroutine runs again, with the default token (`deferred`)
//   mw2_bind_use_awaitable_us  the same with `asio::use_awaitable`, the default before it was `deferred`
//   mw2_rebind_us          coverbs rebind_mw changing a bound type-2 window's rights (LOCAL_INV + BIND_MW chain)
//   rereg_or_reg_us        the same rights change on a 1 MiB region: ibv_rereg_mr where the device supports it,
//                          else ibv_dereg_mr + ibv_reg_mr
//   mw_vs_rereg_speedup    rereg_or_reg_us / mw2_rebind_us
//   raw_mw2_bind_us        the type-2 bind as a raw-verbs loop (ibv_post_send, busy ibv_poll_cq)
//   raw_mw2_rebind_us      the rights change as a raw-verbs loop: the same LOCAL_INV + BIND_MW chain as rebind_mw
//                          (both signaled, one ibv_post_send), busy-polled until both completions are in
//   mw_ceiling             rereg_or_reg_us / raw_mw2_rebind_us: the most a window can gain over re-registration
//                          on this device (re-registration is raw verbs already), measured in the same run
//   mw_speedup_of_ceiling  mw_vs_rereg_speedup / mw_ceiling (= raw_mw2_rebind_us / mw2_rebind_us): how much of
//                          that gain coverbs keeps
//   bind_overhead_ratio    mw2_bind_us / raw_mw2_bind_us (coverbs on a busy-polling completion queue)
//   mw2_bind_handler_us    the same bind with a plain completion handler (no coroutine): the runtime's own
//                          cost without Asio's awaitable machinery
//   bind_overhead_ratio_handler  mw2_bind_handler_us / raw_mw2_bind_us
//   bind_overhead_ratio_use_awaitable  mw2_bind_use_awaitable_us / raw_mw2_bind_us
//   mw2_bind_event_us      mw2_bind_us on an event-driven completion queue (sleeps on the channel)
//   loop_turn_us           one `co_await post(...)` round trip through the same io_context (the loop's own cost)
//   handler_turn_us        one post(handler) round trip through the same io_context
//   bind_polls_per_op, rebind_polls_per_op  ibv_poll_cq calls of the busy-polling queue per mw2 bind (default
//                          token) and per rebind: 1 when the completions are in at the first poll
//   ratio_spread           for each ratio above: its value in each round (from that round's medians) and the
//                          median, minimum and maximum of those; each ratio above is that median
// Every iteration measures each figure once (raw verbs first), so that the machine's noise hits all alike; the
// rounds (5 by default) alternate the order of the coroutine, handler and re-registration phases.
#include <coverbs/coverbs.hpp>

#include <coverbs_support/json_output.hpp>
#include <coverbs_support/progress.hpp>
#include <coverbs_support/statistics.hpp>
#include "cli.hpp"
#include "stamp_clock.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using bench::stamp_clock;
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
  std::vector<ticks> mw1, mw2, mw2_use_awaitable, mw2_rebind, mw2_event, mw2_handler, raw_mw2, raw_mw2_rebind, rereg,
      loop_turn, handler_turn;
  std::uint64_t bind_polls = 0, binds = 0, rebind_polls = 0, rebinds = 0;  // ibv_poll_cq calls of the busy queue
};

/// The samples of one round added to `all`.
void append(samples& all, const samples& r) {
  const auto add = [](std::vector<ticks>& to, const std::vector<ticks>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  add(all.mw1, r.mw1);
  add(all.mw2, r.mw2);
  add(all.mw2_use_awaitable, r.mw2_use_awaitable);
  add(all.mw2_rebind, r.mw2_rebind);
  add(all.mw2_event, r.mw2_event);
  add(all.mw2_handler, r.mw2_handler);
  add(all.raw_mw2, r.raw_mw2);
  add(all.raw_mw2_rebind, r.raw_mw2_rebind);
  add(all.rereg, r.rereg);
  add(all.loop_turn, r.loop_turn);
  add(all.handler_turn, r.handler_turn);
  all.bind_polls += r.bind_polls;
  all.binds += r.binds;
  all.rebind_polls += r.rebind_polls;
  all.rebinds += r.rebinds;
}

/// The windows and queue pairs of one run.
struct setup {
  cv::completion_queue& cq;  // busy-polling
  cv::queue_pair& qp;        // on cq
  cv::queue_pair& qp_event;  // event-driven completion queue
  cv::memory_region& mr;
  cv::memory_window &w1, &w2, &w2_rebind, &w2_event;
  ibv_qp* raw_qp;
  ibv_cq* raw_cq;
  ibv_mw* raw_mw;
  ibv_mw* raw_mw_rebind;  // bound before the first round; each iteration changes its rights
};

void raw_bind(const setup& u, samples& s);
void raw_rebind(const setup& u, int i, samples& s);

/// One iteration of every data-path figure, interleaved so that the machine's noise hits each alike.
awaitable<void> round(const setup& u, int n, samples& s) {
  const auto time = [](std::vector<ticks>& into, ticks t) { into.push_back(since(t)); };
  for (int i = 0; i < n; ++i) {
    raw_bind(u, s);
    raw_rebind(u, i, s);

    // The bind with the default token (deferred) and through use_awaitable (a coroutine frame of its own for
    // the initiation), in alternating order: the first coverbs operation of an iteration starts the queue's
    // polling afresh (a loop turn), the second is posted from inside the dispatch turn that resumed the
    // coroutine and is found in the same turn, about 1.5 us sooner in the guest.
    for (int k = 0; k < 2; ++k) {
      const auto t = stamp_clock::now();
      if ((k == 0) == (i % 2 == 0)) {
        const auto polls = u.cq.stats().polls;
        co_await cv::bind_mw(u.qp, u.w2, u.mr, {0, 4096}, cv::access::remote_read);
        time(s.mw2, t);
        s.bind_polls += u.cq.stats().polls - polls;
        ++s.binds;
      } else {
        co_await cv::bind_mw(u.qp, u.w2, u.mr, {0, 4096}, cv::access::remote_read, asio::use_awaitable);
        time(s.mw2_use_awaitable, t);
      }
      co_await cv::invalidate(u.qp, u.w2);
    }

    auto t = stamp_clock::now();
    co_await cv::bind_mw(u.qp, u.w1, u.mr, {0, 4096}, cv::access::remote_read);
    time(s.mw1, t);

    const auto rights = i % 2 ? cv::access::remote_read : cv::access::remote_write;
    const auto polls = u.cq.stats().polls;
    t = stamp_clock::now();
    co_await cv::rebind_mw(u.qp, u.w2_rebind, u.mr, {0, 4096}, rights);
    time(s.mw2_rebind, t);
    s.rebind_polls += u.cq.stats().polls - polls;
    ++s.rebinds;

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

/// A type-2 bind of `mw` over the region's first 4 KiB with a fresh key, as one work request.
ibv_send_wr bind_wr(const setup& u, ibv_mw* mw, unsigned rights) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info.mr = u.mr.native_handle();
  wr.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(u.mr.data());
  wr.bind_mw.bind_info.length = 4096;
  wr.bind_mw.bind_info.mw_access_flags = rights;
  return wr;
}

/// Raw verbs: a type-2 bind (timed) and its LOCAL_INV, busy-polling the queue pair's own completion queue.
void raw_bind(const setup& u, samples& s) {
  ibv_send_wr wr = bind_wr(u, u.raw_mw, IBV_ACCESS_REMOTE_READ), *bad = nullptr;
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

/// Raw verbs: the rights change of a bound type-2 window as rebind_mw posts it — LOCAL_INV of the live key
/// chained to a BIND_MW with a fresh one, both signaled, one ibv_post_send — timed until both completions are in.
void raw_rebind(const setup& u, int i, samples& s) {
  ibv_send_wr bind = bind_wr(u, u.raw_mw_rebind, i % 2 ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE);
  ibv_send_wr inv{}, *bad = nullptr;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = u.raw_mw_rebind->rkey;
  inv.next = &bind;
  const auto t = stamp_clock::now();
  if (int rc = ibv_post_send(u.raw_qp, &inv, &bad))
    throw cv::system_error(cv::errno_code(rc), "ibv_post_send(LOCAL_INV + BIND_MW)");
  poll_one(u.raw_cq);
  poll_one(u.raw_cq);
  s.raw_mw2_rebind.push_back(since(t));
  u.raw_mw_rebind->rkey = bind.bind_mw.rkey;
}

/// The first bind of the window raw_rebind rebinds (not timed).
void raw_first_bind(const setup& u) {
  ibv_send_wr wr = bind_wr(u, u.raw_mw_rebind, IBV_ACCESS_REMOTE_READ), *bad = nullptr;
  if (int rc = ibv_post_send(u.raw_qp, &wr, &bad)) throw cv::system_error(cv::errno_code(rc), "ibv_post_send(BIND_MW)");
  poll_one(u.raw_cq);
  u.raw_mw_rebind->rkey = wr.bind_mw.rkey;
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

/// A ratio's value in each round, and the median, minimum and maximum of those.
struct spread {
  std::vector<double> rounds;
  double median() const { return statistics::median(rounds); }
  double min() const { return *std::min_element(rounds.begin(), rounds.end()); }
  double max() const { return *std::max_element(rounds.begin(), rounds.end()); }
};

}  // namespace

int main(int argc, char** argv) {
  const char* prog = "bench_windows";
  const char* usage = "[--device NAME] [--iters N] [--rereg-iters N] [--rounds R] [--json]";
  std::string name;
  int iters = 2000, rereg_iters = 200, rounds = 5;
  bool json = false;
  CLI::App app{"", prog};
  bench::describe(app, usage,
                  "Memory-window bind, rebind and invalidation against re-registration, coverbs against raw verbs in "
                  "one run; --iters and --rereg-iters are split over --rounds rounds (5). See the source's header "
                  "for each figure.");
  app.add_option("--device", name);
  app.add_option("--iters", iters)->transform(command_line::count(5, 1000000));
  app.add_option("--rereg-iters", rereg_iters)->transform(command_line::count(5, 100000));
  app.add_option("--rounds", rounds)->transform(command_line::count(1, 99));
  app.add_flag("--json", json);
  bench::parse(app, argc, argv);
  if (iters < rounds || rereg_iters < rounds)
    bench::usage_error(app, "--iters (" + std::to_string(iters) + ") and --rereg-iters (" +
                                std::to_string(rereg_iters) + ") are split over --rounds " + std::to_string(rounds) +
                                ": each needs at least one per round");
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
    ibv_mw* raw_mw_rebind = ibv_alloc_mw(pd.native_handle(), IBV_MW_TYPE_2);
    if (!raw_mw_rebind) throw cv::system_error(cv::verbs_null_result(raw_mw_rebind), "ibv_alloc_mw");

    std::vector<samples> per_round(static_cast<std::size_t>(rounds));
    stamp_clock clock;
    const setup u{
        cq, a, e, mr, w1, w2, w2_rebind, w2_event, ra.native_handle(), cq_raw.native_handle(), raw_mw, raw_mw_rebind};
    run(io, [&]() -> awaitable<void> { co_await cv::bind_mw(a, w2_rebind, mr, {0, 4096}, cv::access::remote_read); });
    raw_first_bind(u);
    progress::phases phase(prog, rounds + 1);
    for (int r = 0; r < rounds; ++r) {
      phase.next("round " + std::to_string(r + 1) + " of " + std::to_string(rounds) + ": " +
                 std::to_string(iters / rounds) + " binds of each kind, " + std::to_string(rereg_iters / rounds) +
                 " re-registrations");
      samples& s = per_round[static_cast<std::size_t>(r)];
      const auto coroutines = [&] { run(io, [&] { return round(u, iters / rounds, s); }); };
      const auto handlers = [&] { handler_round(io, u, iters / rounds, s); };
      const auto rereg = [&] { rereg_round(pd, rereg_bytes, caps.rereg_mr, rereg_iters / rounds, s); };
      if (r % 2 == 0) {
        coroutines();
        handlers();
        rereg();
      } else {  // the other order, so that a drift of the machine within a round does not favour one side
        rereg();
        handlers();
        coroutines();
      }
    }
    ibv_dealloc_mw(raw_mw_rebind);
    ibv_dealloc_mw(raw_mw);
    phase.next("done");

    samples s;
    for (const samples& r : per_round)
      append(s, r);
    const auto median_us = [k = clock.us_per_tick()](const std::vector<ticks>& v) { return statistics::median(v) * k; };
    const double mw1 = median_us(s.mw1), mw2 = median_us(s.mw2), rebind = median_us(s.mw2_rebind),
                 raw = median_us(s.raw_mw2), raw_rebind = median_us(s.raw_mw2_rebind), event = median_us(s.mw2_event),
                 rereg = median_us(s.rereg), turn = median_us(s.loop_turn), handler = median_us(s.mw2_handler),
                 handler_turn = median_us(s.handler_turn);
    // Each ratio is the median of its per-round values, each from that round's own medians: the rounds follow
    // each other closely, so the machine's drift between them mostly cancels out of a round's ratio (a ratio
    // of medians pooled over all rounds can even fall outside the rounds' range). The spread stays beside it.
    std::vector<std::pair<const char*, spread>> spreads{
        {"mw_vs_rereg_speedup", {}},         {"mw_ceiling", {}},
        {"mw_speedup_of_ceiling", {}},       {"bind_overhead_ratio", {}},
        {"bind_overhead_ratio_handler", {}}, {"bind_overhead_ratio_use_awaitable", {}}};
    for (const samples& r : per_round) {
      const double r_rereg = median_us(r.rereg), r_rebind = median_us(r.mw2_rebind),
                   r_raw_rebind = median_us(r.raw_mw2_rebind), r_raw = median_us(r.raw_mw2);
      spreads[0].second.rounds.push_back(r_rereg / r_rebind);
      spreads[1].second.rounds.push_back(r_rereg / r_raw_rebind);
      spreads[2].second.rounds.push_back(r_raw_rebind / r_rebind);
      spreads[3].second.rounds.push_back(median_us(r.mw2) / r_raw);
      spreads[4].second.rounds.push_back(median_us(r.mw2_handler) / r_raw);
      spreads[5].second.rounds.push_back(median_us(r.mw2_use_awaitable) / r_raw);
    }
    const double speedup = spreads[0].second.median(), ceiling = spreads[1].second.median(),
                 share = spreads[2].second.median(), overhead = spreads[3].second.median(),
                 overhead_handler = spreads[4].second.median(), overhead_use_awaitable = spreads[5].second.median(),
                 use_awaitable = median_us(s.mw2_use_awaitable);
    const char* how = caps.rereg_mr ? "ibv_rereg_mr" : "ibv_dereg_mr+ibv_reg_mr";
    if (json) {
      const auto r2 = [](double x) { return json_output::rounded(x, 2); };
      const auto r3 = [](double x) { return json_output::rounded(x, 3); };
      json_output::json::object spread_json;
      for (const auto& [key, v] : spreads) {
        json_output::json::array each;
        for (double x : v.rounds)
          each.push_back(r3(x));
        spread_json[key] = {
            {"median", r3(v.median())}, {"min", r3(v.min())}, {"max", r3(v.max())}, {"rounds", std::move(each)}};
      }
      json_output::print(json_output::json::object{{"device", dev.name()},
                                                   {"iters", iters},
                                                   {"rereg_iters", rereg_iters},
                                                   {"rounds", rounds},
                                                   {"rereg_method", how},
                                                   {"mw1_bind_us", r2(mw1)},
                                                   {"mw2_bind_us", r2(mw2)},
                                                   {"mw2_rebind_us", r2(rebind)},
                                                   {"rereg_or_reg_us", r2(rereg)},
                                                   {"mw_vs_rereg_speedup", r2(speedup)},
                                                   {"raw_mw2_bind_us", r2(raw)},
                                                   {"raw_mw2_rebind_us", r2(raw_rebind)},
                                                   {"mw_ceiling", r2(ceiling)},
                                                   {"mw_speedup_of_ceiling", r3(share)},
                                                   {"bind_overhead_ratio", r3(overhead)},
                                                   {"mw2_bind_handler_us", r2(handler)},
                                                   {"bind_overhead_ratio_handler", r3(overhead_handler)},
                                                   {"mw2_bind_use_awaitable_us", r2(use_awaitable)},
                                                   {"bind_overhead_ratio_use_awaitable", r3(overhead_use_awaitable)},
                                                   {"mw2_bind_event_us", r2(event)},
                                                   {"loop_turn_us", r2(turn)},
                                                   {"handler_turn_us", r2(handler_turn)},
                                                   {"bind_polls_per_op", r2(double(s.bind_polls) / s.binds)},
                                                   {"rebind_polls_per_op", r2(double(s.rebind_polls) / s.rebinds)},
                                                   {"ratio_method", "median of the per-round ratios"},
                                                   {"ratio_spread", std::move(spread_json)}});
    } else {
      std::printf("device %s, %d binds per figure, %d re-registrations (%s), %d rounds\n", dev.name().c_str(), iters,
                  rereg_iters, how, rounds);
      std::printf("  mw1_bind_us                  %10.2f\n  mw2_bind_us                  %10.2f\n"
                  "  mw2_rebind_us                %10.2f\n  rereg_or_reg_us              %10.2f\n"
                  "  mw_vs_rereg_speedup          %10.2f\n  raw_mw2_bind_us              %10.2f\n"
                  "  raw_mw2_rebind_us            %10.2f\n  mw_ceiling                   %10.2f\n"
                  "  mw_speedup_of_ceiling        %10.3f\n"
                  "  bind_overhead_ratio          %10.3f\n  mw2_bind_handler_us          %10.2f\n"
                  "  bind_overhead_ratio_handler  %10.3f\n  mw2_bind_event_us            %10.2f\n"
                  "  loop_turn_us                 %10.2f\n  handler_turn_us              %10.2f\n",
                  mw1, mw2, rebind, rereg, speedup, raw, raw_rebind, ceiling, share, overhead, handler,
                  overhead_handler, event, turn, handler_turn);
      for (const auto& [key, v] : spreads)
        std::printf("  %-28s per round: median %.3f, min %.3f, max %.3f\n", key, v.median(), v.min(), v.max());
    }
  } catch (const cv::system_error& e) {
    std::fprintf(stderr, "bench_windows: %s\n", e.what());
    return 1;
  }
  return 0;
}
