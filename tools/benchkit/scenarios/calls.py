"""calls — the message layer (message_endpoint: async_call / async_receive_request / async_reply; bulk.hpp:
async_bulk_call) beside what it is built on (bench/calls.cpp, bench_calls): call latency against coverbs' own
send/receive ping-pong, the call rate (callers on one loop) against ib_send_bw (one way and both ways) and UCX-UCT's
am_bw, and a bulk call's
1 MiB payload (read by the callee) against plain 1 MiB RDMA reads (ib_read_bw, and coverbs' own).

Runs: tools/lib/bench-calls [--rounds R] [--quick] [--lat-iters N] [--duration-ms N] [--sizes LIST]
[--bulk-iters N] [--bulk-depth N] in the guest: every part on its peers back to back each round, the order
rotating by round; merged by aggregate() below, which also prints the table and whether each target was met.
"""
import os
import statistics

from ..common import Tracked, WideTable, met, num, ratio_cell, run_line, size_name, spread, spread_of, write_results

TITLE = "Calls: the message layer beside ping-pong, perftest and UCX"
OLD_TITLES = ()
PAGE_ORDER = 6.8  # its place on docs/benchmarks.md: after the datagram scenario
RUNNER = "tools/lib/bench-calls"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest
GUEST_TIMEOUT = 3600

# Issue 37's acceptance: a call's round trip at most 1.10 of coverbs' send/receive ping-pong; calls from one loop
# (8 connections × 32 in flight) at least 0.85 of ib_send_bw's messages/s "counted in messages both ways"; a bulk
# call's 1 MiB payload at least 0.90 of ib_read_bw's 1 MiB read bandwidth. The callers run on one loop, the callees
# on another (as ib_send_bw's and am_bw's client and server processes). The rate target is judged two ways: a call
# counted as two messages against ib_send_bw one way (rate_SIZE), and against ib_send_bw -b, both ways at once
# with its messages of both directions (rate_SIZE_bidi), the stricter reading. The rate with both ends on one loop
# (one thread) is shown beside them, with no target.
LAT_TARGET = 1.10
RATE_TARGET = 0.85
BULK_TARGET = 0.90


def _rate_sizes(d):
    return sorted(int(k) for k in d.get("rate", {}))


def _targets(d):
    """(name, words, ratio, target words, met) of each target, in the table's order."""
    out = [("latency", "call round trip / ping-pong round trip", d.get("lat_ratio"), f"≤ {LAT_TARGET:.2f}",
            None if d.get("lat_ratio") is None else d.figure("lat_ratio") <= LAT_TARGET)]
    li = d.get("lat_ratio_interleaved")
    if "lat_ratio_interleaved" in d:
        out.append(("latency_interleaved", "call round trip / ping-pong round trip, in one launch, in turn", li,
                    f"≤ {LAT_TARGET:.2f}", None if li is None else d.figure("lat_ratio_interleaved") <= LAT_TARGET))
    for size in _rate_sizes(d):
        c = d["rate"][str(size)]
        ratio = c.get("ratio_perftest")
        out.append((f"rate_{size}", f"{size_name(size)} calls, messages/s / ib_send_bw's (one way)", ratio,
                    f"≥ {RATE_TARGET:.2f}", None if ratio is None else ratio >= RATE_TARGET))
        bidi = c.get("ratio_perftest_bidi")
        if bidi is not None or c.get("msg_per_s_perftest_bidi") is not None:
            out.append((f"rate_{size}_bidi", f"{size_name(size)} calls, messages/s / ib_send_bw -b's (both ways)",
                        bidi, f"≥ {RATE_TARGET:.2f}", None if bidi is None else bidi >= RATE_TARGET))
    ratio = d.get("bulk_ratio_perftest")
    out.append(("bulk", "bulk call MB/s / ib_read_bw's", ratio, f"≥ {BULK_TARGET:.2f}",
                None if ratio is None else ratio >= BULK_TARGET))
    return out


def _or(v, digits, unit=""):
    return "not measured" if v is None else num(v, digits) + unit


def section(d):
    d = d if isinstance(d, Tracked) else Tracked(d)
    t = WideTable([("figure", "---"), ("coverbs", "---:"), ("baseline", "---:"), ("ratio", "---:"),
                   ("UCX-UCT", "---:"), ("ratio vs UCX", "---:"), ("target", "---"), ("met?", "---")])
    lr = d.get("lat_ratio")
    t.row("call latency, 8 B request and reply, one in flight (µs, round trip, median; busy poll)",
          _or(d.get("lat_us_call"), 2), f"{_or(d.get('lat_us_pingpong'), 2)} (coverbs send/receive ping-pong)",
          ratio_cell(d, "lat_ratio", lr), "—", "—", f"≤ {LAT_TARGET:.2f}",
          met(None if lr is None else lr <= LAT_TARGET))
    if "lat_ratio_interleaved" in d:
        li = d.get("lat_ratio_interleaved")
        t.row("… the same, in one launch: a ping-pong round trip and a call in turn, each timed alone (µs, "
              "medians; the ratio: of the launch's medians)", _or(d.get("lat_us_call_interleaved"), 2),
              f"{_or(d.get('lat_us_pingpong_interleaved'), 2)} (the same launch's ping-pongs)",
              ratio_cell(d, "lat_ratio_interleaved", li), "—", "—", f"≤ {LAT_TARGET:.2f}",
              met(None if li is None else li <= LAT_TARGET))
    for size in _rate_sizes(d):
        c = d["rate"][str(size)]
        r, ur = c.get("ratio_perftest"), c.get("ratio_ucx")
        t.row(f"calls, a loop per side, {size_name(size)}, {d.get('connections', '?')} connections × "
              f"{d.get('depth', '?')} in flight (messages/s both ways: 2 per call)",
              _or(c.get("msg_per_s_coverbs"), 0), f"{_or(c.get('msg_per_s_perftest'), 0)} (ib_send_bw)",
              ratio_cell(c, "ratio_perftest", r), f"{_or(c.get('msg_per_s_ucx'), 0)} (am_bw)",
              ratio_cell(c, "ratio_ucx", ur), f"≥ {RATE_TARGET:.2f}", met(None if r is None else r >= RATE_TARGET))
        if c.get("msg_per_s_perftest_bidi") is not None:
            rb = c.get("ratio_perftest_bidi")
            t.row(f"… the same calls, {size_name(size)}, beside ib_send_bw -b (both ways at once, its messages of both)",
                  _or(c.get("msg_per_s_coverbs"), 0), f"{_or(c.get('msg_per_s_perftest_bidi'), 0)} (ib_send_bw -b)",
                  ratio_cell(c, "ratio_perftest_bidi", rb), "—", "—", f"≥ {RATE_TARGET:.2f}",
                  met(None if rb is None else rb >= RATE_TARGET))
        if c.get("msg_per_s_one_loop") is not None:
            r1 = c.get("ratio_one_loop")
            t.row(f"… the same, {size_name(size)}, callers and callees on one loop (one thread for both ends)",
                  _or(c.get("msg_per_s_one_loop"), 0), f"{_or(c.get('msg_per_s_perftest'), 0)} (ib_send_bw)",
                  ratio_cell(c, "ratio_one_loop", r1), "—", "—", "—", met(None))
    br = d.get("bulk_ratio_perftest")
    mb = lambda k: None if d.get(k) is None else d.figure(k) / 1e6  # noqa: E731
    t.row(f"bulk call, {size_name(d.get('bulk_size', 1 << 20))} read by the callee, {d.get('bulk_depth', '?')} in "
          "flight (MB/s)", _or(mb("bulk_bytes_per_s_coverbs"), 1),
          f"{_or(mb('bulk_bytes_per_s_perftest'), 1)} (ib_read_bw)", ratio_cell(d, "bulk_ratio_perftest", br), "—",
          "—", f"≥ {BULK_TARGET:.2f}", met(None if br is None else br >= BULK_TARGET))
    rr = d.get("bulk_ratio_read")
    t.row(f"… beside coverbs' own RDMA reads of {size_name(d.get('bulk_size', 1 << 20))}, same depth (MB/s)",
          _or(mb("bulk_bytes_per_s_coverbs"), 1), f"{_or(mb('bulk_bytes_per_s_read'), 1)} (coverbs reads)",
          ratio_cell(d, "bulk_ratio_read", rr), "—", "—", "—", met(None))
    extra = (f"{d.get('rounds', '?')} rounds, median of the rounds; latency {d.get('lat_iterations', '?')} round trips; "
             f"calls {d.get('duration_ms', '?')} ms per figure; coverbs' rate and bulk completion queues "
             f"{d.get('mode', '?')}; perftest -D "
             f"{d.get('perftest_seconds', '?')} -f 1; UCX {d.get('ucx_tl', '?')}; bulk {d.get('bulk_iterations', '?')} "
             f"calls and reads, ib_read_bw -D {d.get('bulk_perftest_seconds', '?')}")
    out = [run_line(d, extra), ""] + t.markdown()
    out += ["", "A ratio is the median of the rounds' ratios (a round's coverbs figure over the same round's baseline, "
                "measured right beside it); in brackets the lowest and the highest of them. The figures are medians "
                "of the rounds. A call is a request and a reply: its rate counts two messages, ib_send_bw's and "
                "am_bw's one per send, ib_send_bw -b's (both directions at once) the messages of both directions. In the latency and rate rows each side has a loop (thread) of its own, as "
                "perftest's and UCX's two processes: every call starts from the callers' one loop, every answer from "
                "the callees' one loop. The \"one loop\" rows and the bulk rows run the callers' and the callees' "
                "endpoints on a single loop, which then also carries the kernel's work for both ends (rxe copies and "
                "checksums a message in the context of the thread that posts it). "
                "UCX drives one endpoint with connections × in flight outstanding (am_bw's window -W at "
                "most 127)."]
    spreads = []
    for key, digits in (("lat_call_us", 2), ("lat_pingpong_us", 2)):
        s = spread(d, key)
        if s:
            spreads.append(f"{key} {num(s[0], digits)}–{num(s[1], digits)}")
    if spreads:
        out += ["", "Spread over the rounds (min–max, µs): " + "; ".join(spreads) + "."]
    missing = d.get("missing")
    if missing:
        out += ["", "Not measured: " + "; ".join(f"{k} ({v})" for k, v in sorted(missing.items())) + "."]
    return out


def plots(d, tmp):
    """No plot: a handful of figures and their ratios fit the table."""
    return []


def aggregate(argv):
    """Run by tools/lib/bench-calls as `benchkit aggregate calls ARGS...`; argv = [program, OUT, DEVICE, ROUNDS,
    LAT_ITERS, DURATION_MS, SIZES, CONNECTIONS, DEPTH, BULK_SIZE, BULK_DEPTH, BULK_ITERS, PERFTEST_SECONDS,
    BULK_PERFTEST_SECONDS, UCX_TL, MODE, SAMPLES] with SAMPLES holding "ROUND KEY VALUE" lines; writes OUT with the
    medians over rounds, each ratio as the median of the rounds' own ratios with its spread, and each target's
    verdict; prints it without its samples, then the table."""
    (out, dev, rounds, lat_iters, duration_ms, sizes, connections, depth, bulk_size, bulk_depth, bulk_iters,
     perftest_seconds, bulk_seconds, ucx_tl, mode, samples_path) = argv[1:17]
    rounds = int(rounds)
    by_round = {}  # (round, key) -> value
    for line in open(samples_path):
        f = line.split()
        if len(f) == 3:
            by_round[(int(f[0]), f[1])] = float(f[2])
    samples = {}
    for (_, key), v in sorted(by_round.items()):
        samples.setdefault(key, []).append(v)
    missing, spreads = {}, {}

    def median(key, digits):
        if key in samples:
            return round(statistics.median(samples[key]), digits)
        missing[key] = "no round gave a figure"
        return None

    def ratio(top, bottom, name, into):
        per = [by_round[(n, top)] / by_round[(n, bottom)] for n in range(1, rounds + 1)
               if (n, top) in by_round and by_round.get((n, bottom))]
        if not per:
            return None
        into[name] = spread_of(per)
        return into[name]["median"]

    r = {"device": dev, "rounds": rounds, "lat_iterations": int(lat_iters), "lat_bytes": 8,
         "duration_ms": int(duration_ms), "connections": int(connections), "depth": int(depth),
         "perftest_seconds": int(perftest_seconds), "ucx_tl": ucx_tl, "bulk_size": int(bulk_size),
         "bulk_depth": int(bulk_depth), "bulk_iterations": int(bulk_iters),
         "bulk_perftest_seconds": int(bulk_seconds), "mode": mode,
         "method": "per part and round, the peers back to back, the order rotating by round: latency, bench_calls "
                   "call_lat and pingpong (median round trip, busy poll, a loop per side) and interleaved (both in one "
                   "launch, in turn: its ratio of medians); rate, bench_calls call_rate "
                   "(calls x 2 per second, a loop per side; and both ends on one loop), ib_send_bw -q C -t D (MsgRate), the same with -b, and ucx_perftest am_bw -O C*D; bulk, "
                   "bench_calls bulk (payload bytes per second, one loop), ib_read_bw -q 1 -t DEPTH (MsgRate x size) and "
                   "bench_calls read; medians over rounds",
         "ratio_method": "median of the per-round ratios"}
    r["lat_us_call"] = median("lat_call_us", 3)
    r["lat_us_pingpong"] = median("lat_pingpong_us", 3)
    r["lat_ratio"] = ratio("lat_call_us", "lat_pingpong_us", "lat_ratio", spreads)
    r["lat_us_call_interleaved"] = median("lat_interleaved_call_us", 3) if "lat_interleaved_call_us" in samples else None
    r["lat_us_pingpong_interleaved"] = (median("lat_interleaved_pingpong_us", 3)
                                        if "lat_interleaved_pingpong_us" in samples else None)
    per = samples.get("lat_interleaved_ratio")
    if per:
        spreads["lat_ratio_interleaved"] = spread_of(per)
        r["lat_ratio_interleaved"] = spreads["lat_ratio_interleaved"]["median"]
    else:
        r["lat_ratio_interleaved"] = None
        missing["lat_interleaved_ratio"] = "no round gave a figure"
    r["rate"] = {}
    for size in (int(s) for s in sizes.split(",")):
        c, cs = {"size": size}, {}
        for peer in ("coverbs", "perftest", "ucx", "one_loop", "perftest_bidi"):
            c[f"msg_per_s_{peer}"] = median(f"rate_{size}_{peer}", 1)
        c["ratio_perftest"] = ratio(f"rate_{size}_coverbs", f"rate_{size}_perftest", "ratio_perftest", cs)
        c["ratio_ucx"] = ratio(f"rate_{size}_coverbs", f"rate_{size}_ucx", "ratio_ucx", cs)
        c["ratio_one_loop"] = ratio(f"rate_{size}_one_loop", f"rate_{size}_perftest", "ratio_one_loop", cs)
        c["ratio_perftest_bidi"] = ratio(f"rate_{size}_coverbs", f"rate_{size}_perftest_bidi", "ratio_perftest_bidi", cs)
        c["ratio_spread"] = cs
        r["rate"][str(size)] = c
    for peer in ("coverbs", "perftest", "read"):
        r[f"bulk_bytes_per_s_{peer}"] = median(f"bulk_{peer}", 1)
    r["bulk_ratio_perftest"] = ratio("bulk_coverbs", "bulk_perftest", "bulk_ratio_perftest", spreads)
    r["bulk_ratio_read"] = ratio("bulk_coverbs", "bulk_read", "bulk_ratio_read", spreads)
    r["ratio_spread"] = spreads
    r["targets"] = {name: {"what": words, "ratio": value, "target": target, "met": ok}
                    for name, words, value, target, ok in _targets(Tracked(r))}
    if missing:
        r["missing"] = missing
    r["samples"] = samples
    write_results(out, r)
    print("\n".join(section(Tracked(r))))
    for name, words, value, target, ok in _targets(Tracked(r)):
        verdict = "not measured" if ok is None else ("met" if ok else "NOT met")
        print(f"target {name}: {words} = {'—' if value is None else num(value, 3)}, target {target}: {verdict}")
