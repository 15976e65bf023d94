"""rate — the message rate of small RDMA writes and sends from one event loop beside perftest (ib_write_bw,
ib_send_bw) and UCX-UCT (put_bw, am_bw), with the CPU time per message of each, and coverbs with nothing inline
against its default of 64 B (bench/rate.cpp, bench_rate).

Runs: tools/lib/bench-rate [--rounds R] [--duration-ms N] [--quick] [--sizes LIST] [--ops LIST] [--connections LIST]
[--depths LIST] [--inline-zero one|all|none] [--mode events|spin] in the guest: every cell of the grid on the
three peers back to back each round, merged by aggregate() below.
"""
import glob
import json
import os
import re
import statistics

from ..common import (BLUE, GNUPLOT_HEAD, GREY, ORANGE, Tracked, WideTable, met, num, ratio_cell, run_line,
                      size_name, spread_of, write_results)

TITLE = "Message rate: one event loop beside perftest and UCX"
OLD_TITLES = ()
PAGE_ORDER = 6.5  # its place on docs/benchmarks.md: after the scaling scenario
RUNNER = "tools/lib/bench-rate"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest
# The default grid (16 cells, 5 rounds, three peers each) takes about 40 minutes in the emulated guest: set-up
# and teardown of perftest's, UCX's and bench_rate's processes dominate, not the measuring windows.
GUEST_TIMEOUT = 5400

# Issue 34's acceptance: one loop's 8 B write and send rates at least 0.90 of ib_write_bw's and ib_send_bw's.
RATE_TARGET = 0.90
TARGET_SIZE = 8
# The headline cell (the issue's own measurement, and tools/bench scaling's): 8 connections, 32 in flight.
HEADLINE = (8, 32)
PEERS = ("coverbs", "coverbs_inline0", "perftest", "ucx")
TOOLS = {"write": ("ib_write_bw", "put_bw"), "send": ("ib_send_bw", "am_bw")}


def cell_name(op, size, connections, depth):
    """A cell's key in the results: "write_8b_8c_32d"."""
    return f"{op}_{size}b_{connections}c_{depth}d"


def _cells(d):
    """The results' cells as (key, cell) pairs in the grid's order (size, op, connections, depth)."""
    cells = d["cells"]
    order = {"write": 0, "send": 1}
    return sorted(((k, cells[k]) for k in cells), key=lambda kv: (kv[1].figure("size"), order.get(str(kv[1]["op"]), 2),
                                                 kv[1].figure("connections"), kv[1].figure("depth")))


def _label(c):
    """A cell as words: "8 B RDMA writes, 8 connections × 32 in flight"."""
    conns = c.figure("connections")
    what = "RDMA writes" if c["op"] == "write" else "sends"
    return f"{size_name(c.figure('size'))} {what}, {conns} connection{'s' if conns > 1 else ''} × {c.figure('depth')} in flight"


def _cpu(c, peer):
    return num(c[f"cpu_us_per_msg_{peer}"], 1) if c.get(f"cpu_us_per_msg_{peer}") is not None else "—"


def section(d):
    t = WideTable([("cell (one loop)", "---"), ("coverbs (messages/s)", "---:"), ("perftest", "---:"),
                   ("ratio", "---:"), ("UCX-UCT", "---:"), ("ratio vs UCX", "---:"),
                   ("CPU µs per message: coverbs / perftest / UCX", "---:"), ("target", "---"), ("met?", "---")])
    inline_rows, inlined_anyway = [], False
    for key, c in _cells(d):
        op, size, conns, depth = str(c["op"]), c.figure("size"), c.figure("connections"), c.figure("depth")
        tool, utool = TOOLS[op]
        label = _label(c)
        if (conns, depth) == HEADLINE:
            label = f"**{label}**"
        cv, p, u = c.get("msg_per_s_coverbs"), c.get("msg_per_s_perftest"), c.get("msg_per_s_ucx")
        r, ur = c.get("ratio_perftest"), c.get("ratio_ucx")
        target, ok = "—", None
        if size == TARGET_SIZE and r is not None:
            target, ok = f"≥ {RATE_TARGET:.2f} of {tool}", r >= RATE_TARGET
        t.row(label, num(cv, 0) if cv is not None else "not measured",
              f"{num(p, 0)} ({tool})" if p is not None else f"not measured ({tool})", ratio_cell(c, "ratio_perftest", r),
              f"{num(u, 0)} ({utool})" if u is not None else f"not measured ({utool})", ratio_cell(c, "ratio_ucx", ur),
              " / ".join(_cpu(c, peer) for peer in ("coverbs", "perftest", "ucx")), target, met(ok))
        if c.get("msg_per_s_coverbs_inline0") is not None:
            z = c["msg_per_s_coverbs_inline0"]
            granted = c.get("max_inline_data_granted_coverbs_inline0")
            inlined_anyway = inlined_anyway or (granted is not None and granted >= size)
            inline_rows.append((label, num(cv, 0) if cv is not None else "—", num(z, 0),
                                ratio_cell(c, "ratio_inline0", c.get("ratio_inline0")),
                                f"{_cpu(c, 'coverbs')} / {_cpu(c, 'coverbs_inline0')}",
                                f"{granted} B" if granted is not None else "—"))
    extra = (f"{d.get('rounds', '?')} rounds, median of the rounds; coverbs {d.get('duration_ms', '?')} ms per figure, "
             f"{d.get('mode', '?')} completion queue; perftest -D {d.get('perftest_seconds', '?')} -f 1; "
             f"UCX {d.get('ucx_tl', '?')}")
    out = [run_line(d, extra), ""] + t.markdown()
    out += ["", "A ratio is the median of the rounds' ratios (a round's coverbs figure over the same round's "
                "baseline, measured right beside it); in brackets the lowest and the highest of them. The rates are "
                f"medians of the rounds. The target applies to the {TARGET_SIZE} B rows; the issue's own figure is "
                f"the row in bold ({HEADLINE[0]} connections, {HEADLINE[1]} in flight)."]
    notes = ["UCX-UCT drives one endpoint: connections × in flight outstanding on it (-O; am_bw's flow-control "
             "window -W at most 127, its limit), the short (inline) layout"]
    moderation, inline = {}, set()
    for _, c in _cells(d):
        if c.get("perftest_cq_moderation") is not None:
            moderation.setdefault(c.figure("depth"), set()).add(c.figure("perftest_cq_moderation"))
        if c.get("perftest_max_inline_data") is not None:
            inline.add(c.figure("perftest_max_inline_data"))
    if moderation:
        notes.append("perftest's CQ moderation (one signaled request in N): " + "; ".join(
            f"{'/'.join(str(m) for m in sorted(ms))} at {depth} in flight" for depth, ms in sorted(moderation.items())))
    if inline:
        notes.append(f"perftest's inline size: {'/'.join(str(i) for i in sorted(inline))} B")
    rpd = d.get("requests_per_doorbell_coverbs")
    if rpd:
        cells = d["cells"]
        notes.append("coverbs' send requests per doorbell (`ibv_post_send` call), median over the rounds: " +
                     "; ".join(f"{_label(cells[k])} {num(rpd[k], 1)}" for k in rpd))
    if notes:
        out += ["", ". ".join(notes) + "."]
    if inline_rows:
        it = WideTable([("cell", "---"), ("inline up to 64 B (messages/s)", "---:"), ("inline 0", "---:"),
                        ("inline 0 / inline 64", "---:"), ("CPU µs per message: 64 / 0", "---:"),
                        ("inline the device granted at 0", "---:")])
        for row in inline_rows:
            it.row(*row)
        out += ["", "coverbs with `max_inline_data` 0 against its default 64 (issue 34, item 4), in the same rounds:",
                ""] + it.markdown()
        if inlined_anyway:
            out += ["", "Where the device granted at least the message size when asked for 0 (rxe rounds the inline "
                        "size up to its work-request slot), coverbs still posted those messages inline: the rows "
                        "compare like with like only above that size."]
    missing = d.get("missing")
    if missing:
        out += ["", "Not measured: " + "; ".join(f"{k} ({v})" for k, v in sorted(missing.items())) + "."]
    out += ["", "![Message rate: coverbs, perftest and UCX from one loop](benchmarks/rate.png)"]
    return out


def plot_script(d, tmp):
    d = d if isinstance(d, Tracked) else Tracked(d)
    rows = _cells(d)
    with open(os.path.join(tmp, "rate.dat"), "w") as f:
        for _, c in rows:
            label = f"{c['op']} {c['size']} B\\n{c['connections']}×{c['depth']}"
            vals = [c.get(f"msg_per_s_{p}") for p in ("coverbs", "perftest", "ucx")]
            f.write(f'"{label}" ' + " ".join("NaN" if v is None else f"{v:.1f}" for v in vals) + "\n")
    title = (f"Message rate from one event loop on {d.get('device', '?')} (median of {d.get('rounds', '?')} rounds; "
             f"higher is better)\\ncells: operation, size, connections × operations in flight per connection")
    return GNUPLOT_HEAD + f"""set terminal pngcairo size {max(1000, 90 * len(rows))},560 font "DejaVu Sans,10" noenhanced
set output "{os.path.join(tmp, 'rate.png')}"
set title "{title}"
set datafile missing "NaN"
set style data histogram
set style histogram clustered gap 1
set yrange [0:*]
set offsets 0,0,graph 0.22,0
set bmargin 4
set ylabel "messages per second"
set key top left
plot "{tmp}/rate.dat" using 2:xtic(1) title "coverbs" lc rgb "{BLUE}", \\
     "" using 3 title "perftest (ib_write_bw / ib_send_bw)" lc rgb "{ORANGE}", \\
     "" using 4 title "UCX-UCT (put_bw / am_bw)" lc rgb "{GREY}"
"""


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return [("rate.png", plot_script(d, tmp))]


def aggregate(argv):
    """Run by tools/lib/bench-rate as `benchkit aggregate rate ARGS...`; argv = [program, OUT, DEVICE, ROUNDS,
    DURATION_MS, MODE, PERFTEST_SECONDS, UCX_TL, WORK] with WORK/samples.txt ("ROUND CELL PEER MSG_PER_S
    CPU_US_PER_MSG" lines), WORK/info.txt ("CELL PEER KEY VALUE") and WORK/coverbs-ROUND-CELL-INLINE.json
    (bench_rate); writes OUT with each cell's medians, its ratios (the median of each round's ratio) and their
    spread, and prints it without its samples."""
    out, dev, rounds, duration_ms, mode, perftest_seconds, ucx_tl, work = argv[1:9]
    rounds = int(rounds)
    by_round = {}  # (round, cell, peer) -> (msg/s, cpu us per msg)
    for line in open(os.path.join(work, "samples.txt")):
        f = line.split()
        if len(f) == 5:
            by_round[(int(f[0]), f[1], f[2])] = (float(f[3]), float(f[4]))
    coverbs_json = {}  # (round, cell, inline) -> bench_rate's object
    for path in glob.glob(os.path.join(work, "coverbs-*.json")):
        m = re.match(r"coverbs-(\d+)-(.+)-(\d+)\.json$", os.path.basename(path))
        try:
            coverbs_json[(int(m.group(1)), m.group(2), int(m.group(3)))] = json.load(open(path))
        except ValueError:
            pass  # a failed launch left no object: the round has no coverbs figure
    info = {}
    for line in open(os.path.join(work, "info.txt")):
        f = line.split()
        if len(f) == 4 and f[3]:
            info[(f[0], f[1], f[2])] = f[3]

    r = {"device": dev, "rounds": rounds, "duration_ms": int(duration_ms), "mode": mode,
         "perftest_seconds": int(perftest_seconds), "ucx_tl": ucx_tl,
         "method": "per cell, coverbs (bench_rate), perftest (ib_write_bw / ib_send_bw, duration mode, default CQ "
                   "moderation) and UCX-UCT (ucx_perftest put_bw / am_bw, one endpoint with connections x depth "
                   "outstanding) back to back, the order rotating by round and cell; medians over rounds, ratios the "
                   "median of each round's ratio",
         "cpu_method": "coverbs: getrusage of its process over the run / messages; perftest: utime + stime of client "
                       "and server between two reads inside the measuring window, per second / the message rate; UCX: "
                       "the same between its first and last progress line used / the iterations between them",
         "cells": {}}
    samples, missing, rpd = {}, {}, {}
    cells = sorted({cell for _, cell, _ in by_round} | {cell for _, cell, _ in coverbs_json})
    for cell in cells:
        m = re.match(r"(write|send)_(\d+)b_(\d+)c_(\d+)d$", cell)
        c = {"op": m.group(1), "size": int(m.group(2)), "connections": int(m.group(3)), "depth": int(m.group(4))}
        spread = {}
        for peer in PEERS:
            rates = [by_round[(n, cell, peer)][0] for n in range(1, rounds + 1) if (n, cell, peer) in by_round]
            cpus = [by_round[(n, cell, peer)][1] for n in range(1, rounds + 1) if (n, cell, peer) in by_round]
            if rates:
                c[f"msg_per_s_{peer}"] = round(statistics.median(rates), 1)
                c[f"cpu_us_per_msg_{peer}"] = round(statistics.median(cpus), 3)
                samples[f"{cell}.msg_per_s_{peer}"] = rates
                samples[f"{cell}.cpu_us_per_msg_{peer}"] = cpus
            elif peer != "coverbs_inline0":
                c[f"msg_per_s_{peer}"] = c[f"cpu_us_per_msg_{peer}"] = None
                missing[f"{cell} {peer}"] = "no round gave a figure"
        for name, peer, base in (("ratio_perftest", "coverbs", "perftest"), ("ratio_ucx", "coverbs", "ucx"),
                                 ("ratio_inline0", "coverbs_inline0", "coverbs")):
            per = [by_round[(n, cell, peer)][0] / by_round[(n, cell, base)][0] for n in range(1, rounds + 1)
                   if (n, cell, peer) in by_round and by_round.get((n, cell, base), (0,))[0] > 0]
            if per:
                spread[name] = spread_of(per)
                c[name] = spread[name]["median"]
            elif name != "ratio_inline0":
                c[name] = None
        for inline, peer in ((64, "coverbs"), (0, "coverbs_inline0")):
            runs = [coverbs_json[(n, cell, inline)] for n in range(1, rounds + 1) if (n, cell, inline) in coverbs_json]
            if runs:
                c[f"max_inline_data_granted_{peer}"] = runs[-1].get("max_inline_data_granted")
                per_db = [x["requests_per_doorbell"] for x in runs if "requests_per_doorbell" in x]
                if per_db:
                    c[f"requests_per_doorbell_{peer}"] = round(statistics.median(per_db), 2)
                    if peer == "coverbs":
                        rpd[cell] = c[f"requests_per_doorbell_{peer}"]
        for key in ("max_inline_data", "cq_moderation"):
            if (cell, "perftest", key) in info:
                c[f"perftest_{key}"] = int(info[(cell, "perftest", key)])
        c["ratio_spread"] = spread
        r["cells"][cell] = c
    if rpd:
        r["requests_per_doorbell_coverbs"] = rpd
    # The headline figures (issue 34's acceptance): 8 B, one loop, 8 connections, 32 in flight.
    for op in ("write", "send"):
        c = r["cells"].get(cell_name(op, TARGET_SIZE, *HEADLINE))
        if c and c.get("ratio_perftest") is not None:
            r[f"{op}_rate_ratio"] = c["ratio_perftest"]
    if missing:
        r["missing"] = missing
    r["samples"] = samples
    write_results(out, r)
