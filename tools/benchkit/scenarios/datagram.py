"""datagram — unreliable datagrams (UD) through coverbs beside perftest on the same device: 2 B ping-pong latency
against ib_send_lat -c UD and the 8 B message rate against ib_send_bw -c UD (bench/datagram.cpp, bench_datagram).

Runs: tools/lib/bench-datagram [--rounds R] [--lat-iters N] [--duration-ms N] in the guest: both tools per test and
round, back to back, which goes first alternating; merged by aggregate() below.
"""
import os
import statistics

from ..common import WideTable, met, num, ratio_cell, run_line, spread, spread_of, write_results

TITLE = "Datagrams (UD): latency and message rate beside perftest"
OLD_TITLES = ()
PAGE_ORDER = 6.7  # its place on docs/benchmarks.md: after the message-rate scenario
RUNNER = "tools/lib/bench-datagram"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest

# Issue 35's acceptance: UD latency at most 1.10 of ib_send_lat -c UD's, message rate at least 0.90 of
# ib_send_bw -c UD's.
LAT_TARGET = 1.10
RATE_TARGET = 0.90


def section(d):
    t = WideTable([("figure", "---"), ("coverbs", "---:"), ("perftest", "---:"), ("ratio", "---:"),
                   ("target", "---"), ("met?", "---")])
    rows = (("lat", "UD send latency, 2 B (µs, busy poll; half the round trip, median)", "us", 2, "ib_send_lat -c UD",
             f"≤ {LAT_TARGET:.2f}", lambda x: x <= LAT_TARGET),
            ("rate", f"UD message rate, 8 B, {d.get('depth', '?')} in flight (messages/s; coverbs: received)",
             "msg_per_s", 0, "ib_send_bw -c UD", f"≥ {RATE_TARGET:.2f}", lambda x: x >= RATE_TARGET))
    for test, label, unit, digits, tool, target, ok in rows:
        c, p, ratio = d.get(f"{test}_{unit}_coverbs"), d.get(f"{test}_{unit}_perftest"), d.get(f"{test}_ratio")
        t.row(label, num(c, digits) if c is not None else "not measured",
              f"{num(p, digits)} ({tool})" if p is not None else f"not measured ({tool})",
              ratio_cell(d, f"{test}_ratio", ratio), target, met(None if ratio is None else ok(ratio)))
    extra = (f"{d.get('rounds', '?')} rounds, median of the rounds; latency {d.get('lat_iterations', '?')} round "
             f"trips; rate: coverbs {d.get('duration_ms', '?')} ms, perftest -D {d.get('perftest_seconds', '?')}")
    out = [run_line(d, extra), ""] + t.markdown()
    out += ["", "A ratio is the median of the rounds' ratios (a round's coverbs figure over the same round's perftest "
                "figure, measured right beside it); in brackets the lowest and the highest of them. The figures are "
                "medians of the rounds."]
    notes = ["Both busy-poll their completion queues and send nothing inline (perftest sets no inline size on rxe; "
             "bench_datagram runs with `max_inline_data` 0)",
             "perftest's rate is its client's (what it sent); coverbs' is what its receiver counted, the stricter "
             "figure (UD drops a datagram that finds no receive posted)"]
    extras = []
    if d.get("rate_msg_per_s_perftest_server") is not None:
        extras.append(f"ib_send_bw's server reported {num(d.figure('rate_msg_per_s_perftest_server'), 0)}/s")
    if d.get("rate_sent_msg_per_s_coverbs") is not None:
        extras.append(f"coverbs sent {num(d.figure('rate_sent_msg_per_s_coverbs'), 0)}/s")
    if d.get("rate_dropped_coverbs") is not None:
        extras.append(f"coverbs' receiver missed {num(d.figure('rate_dropped_coverbs'), 0)} per run")
    if d.get("requests_per_doorbell_coverbs") is not None:
        extras.append(f"coverbs posted {num(d.figure('requests_per_doorbell_coverbs'), 1)} sends per doorbell "
                      "(`ibv_post_send` call: a dispatch turn's sends go as one list; ib_send_bw posts one, its "
                      "default post list -l 1)")
    if d.get("perftest_cq_moderation") is not None:
        extras.append(f"ib_send_bw's CQ moderation: one signaled send in {d.figure('perftest_cq_moderation')}")
    if extras:
        notes.append("Medians over the rounds: " + "; ".join(extras))
    spreads = []
    for key, unit in (("lat_coverbs", 2), ("lat_perftest", 2), ("rate_coverbs", 0), ("rate_perftest", 0)):
        s = spread(d, key)
        if s:
            spreads.append(f"{key} {num(s[0], unit)}–{num(s[1], unit)}")
    if spreads:
        notes.append("Spread over the rounds (min–max; µs, messages/s): " + "; ".join(spreads))
    missing = d.get("missing")
    if missing:
        notes.append("Not measured: " + "; ".join(f"{k} ({v})" for k, v in sorted(missing.items())))
    out += ["", ". ".join(notes) + "."]
    return out


def plots(d, tmp):
    """No plot: two figures and their ratios fit the table."""
    return []


def aggregate(argv):
    """Run by tools/lib/bench-datagram as `benchkit aggregate datagram ARGS...`; argv = [program, OUT, DEVICE,
    ROUNDS, LAT_ITERS, DURATION_MS, PERFTEST_SECONDS, DEPTH, WORK] with WORK/by-round.txt ("ROUND KEY VALUE") and
    WORK/info.txt ("KEY VALUE"); writes OUT with the medians over rounds, each ratio as the median of the rounds'
    own ratios with its spread, and prints it without its samples."""
    out, dev, rounds, lat_iters, duration_ms, perftest_seconds, depth, work = argv[1:9]
    rounds = int(rounds)
    by_round = {}  # (round, key) -> value
    for line in open(os.path.join(work, "by-round.txt")):
        f = line.split()
        if len(f) == 3:
            by_round[(int(f[0]), f[1])] = float(f[2])
    info = {}
    for line in open(os.path.join(work, "info.txt")):
        f = line.split()
        if len(f) == 2:
            info[f[0]] = int(f[1])
    samples = {}
    for (n, key), v in sorted(by_round.items()):
        samples.setdefault(key, []).append(v)
    med = {k: statistics.median(v) for k, v in samples.items()}

    r = {"device": dev, "rounds": rounds, "lat_iterations": int(lat_iters), "lat_bytes": 2, "rate_bytes": 8,
         "depth": int(depth), "duration_ms": int(duration_ms), "perftest_seconds": int(perftest_seconds),
         "method": "per test, ib_send_lat / ib_send_bw -c UD and bench_datagram back to back, which goes first "
                   "alternating by round; latency: t_typical (us, half the round trip, median); rate: perftest's "
                   "client's MsgRate, coverbs' datagrams received per second; medians over rounds",
         "ratio_method": "median of the per-round ratios (coverbs / perftest)"}
    missing, spreads = {}, {}
    for test, unit, digits in (("lat", "us", 3), ("rate", "msg_per_s", 1)):
        for who in ("coverbs", "perftest"):
            key = f"{test}_{who}"
            if key in med:
                r[f"{test}_{unit}_{who}"] = round(med[key], digits)
            else:
                r[f"{test}_{unit}_{who}"] = None
                missing[key] = "no round gave a figure"
        per = [by_round[(n, f"{test}_coverbs")] / by_round[(n, f"{test}_perftest")] for n in range(1, rounds + 1)
               if (n, f"{test}_coverbs") in by_round and by_round.get((n, f"{test}_perftest"))]
        if per:
            spreads[f"{test}_ratio"] = spread_of(per)
            r[f"{test}_ratio"] = spreads[f"{test}_ratio"]["median"]
        else:
            r[f"{test}_ratio"] = None
    for key, name, digits in (("rate_perftest_server", "rate_msg_per_s_perftest_server", 1),
                              ("rate_coverbs_sent", "rate_sent_msg_per_s_coverbs", 1),
                              ("rate_coverbs_dropped", "rate_dropped_coverbs", 0),
                              ("rate_coverbs_requests_per_doorbell", "requests_per_doorbell_coverbs", 2)):
        if key in med:
            r[name] = round(med[key], digits)
    for key in ("perftest_lat_max_inline_data", "perftest_rate_max_inline_data", "perftest_cq_moderation",
                "coverbs_max_inline_data_granted", "coverbs_max_datagram_size"):
        if key in info:
            r[key] = info[key]
    r["lat_target"], r["rate_target"] = LAT_TARGET, RATE_TARGET
    r["ratio_spread"] = spreads
    if missing:
        r["missing"] = missing
    r["samples"] = samples
    write_results(out, r)
