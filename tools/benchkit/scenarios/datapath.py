"""datapath — coverbs against perftest and UCX (UCT) on the same device: latency of writes, reads and sends
(busy-polled and event-driven) and write bandwidth (bench/datapath.cpp, bench_datapath).

Runs: tools/lib/bench-datapath [--rounds R] [--lat-iters N] [--bw-iters N] in the guest: perftest, ucx_perftest and
bench_datapath per test and round; it hands its samples to aggregate() below.
"""
import json
import os
import platform
import statistics
import sys

from ..common import BLUE, GNUPLOT_HEAD, GREY, ORANGE, WideTable, met, num, ratio_cell, run_line, spread

TITLE = "Data path: coverbs against perftest and UCX"
# Earlier titles of the section, so a page made before a rename still keeps its figures.
OLD_TITLES = ('Data path: coverbs against perftest',)
PAGE_ORDER = 2  # its place on docs/benchmarks.md
RUNNER = "tools/lib/bench-datapath"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest


UCX_LAT_LIMIT = 1.00  # coverbs / UCX (UCT), write and send latency


def section(d):
    ucx = "write_lat_us_ucx" in d  # results from before UCX was the second peer have no UCX figures
    columns = [("figure", "---"), ("coverbs", "---:"), ("perftest", "---:"), ("ratio", "---:")]
    if ucx:
        columns += [("UCX (UCT)", "---:"), ("ratio vs UCX", "---:")]
    columns += [("target", "---"), ("met?", "---")]
    t = WideTable(columns)
    lat = [("write_lat", "RDMA write latency, 2 B (µs, busy poll)", "ib_write_lat", "put_lat", 1.10, UCX_LAT_LIMIT),
           ("read_lat", "RDMA read latency, 2 B (µs, busy poll)", "ib_read_lat", None, 1.10, None),
           ("send_lat", "send latency, 2 B (µs, busy poll)", "ib_send_lat", "am_lat", 1.10, UCX_LAT_LIMIT),
           ("send_lat_event", "send latency, 2 B (µs, event-driven)", "ib_send_lat -e", None, 1.10, None)]
    rows = [(key, label, tool, utool, d.figure(f"{key}_us_coverbs"), d.figure(f"{key}_us_perftest"),
             d.figure(f"{key}_ratio"),
             d.get(f"{key}_us_ucx"), d.get(f"{key}_ratio_vs_ucx"), limit, ulimit, 2, 1)
            for key, label, tool, utool, limit, ulimit in lat]
    rows.append(("write_bw", "RDMA write bandwidth, 64 KiB (MB/s)", "ib_write_bw", "put_bw zcopy",
                 d.figure("write_bw_bytes_per_s_coverbs"), d.figure("write_bw_bytes_per_s_perftest"),
                 d.figure("write_bw_ratio"),
                 d.get("write_bw_bytes_per_s_ucx"), d.get("write_bw_ratio_vs_ucx"), None, None, 2, 1e6))
    for key, label, tool, utool, c, p, r, u, ur, limit, ulimit, digits, scale in rows:
        targets, oks = [], []
        if key == "write_bw":
            targets.append("≥ 0.90")
            oks.append(met(r >= 0.90))
        elif limit:
            targets.append(f"≤ {limit:.2f}")
            oks.append(met(r <= limit))
        if ucx and ulimit:
            if oks:
                oks[0] += " (perftest)"
            targets.append(f"vs UCX ≤ {ulimit:.2f}")
            oks.append(f"{met(ur <= ulimit)} (UCX)" if ur is not None else "UCX not measured")
        cells = [label, num(c / scale, digits), f"{num(p / scale, digits)} ({tool})", ratio_cell(d, f"{key}_ratio", r)]
        if ucx:
            cells += [f"{num(u / scale, digits)} ({utool})" if u is not None else "—",
                      ratio_cell(d, f"{key}_ratio_vs_ucx", ur)]
        cells += ["; ".join(targets) or "—", " · ".join(oks) or "—"]
        t.row(*cells)
        if key == "read_lat" and d.present("read_lat_ratio_to_raw"):
            rr = d["read_lat_ratio_to_raw"]
            cells = ["RDMA read latency, 2 B, in one process: coverbs and raw verbs alternating (µs)",
                     num(d["read_lat_us_coverbs_interleaved"], digits),
                     f"{num(d['read_lat_us_raw_interleaved'], digits)} (raw verbs, same queue pair)",
                     ratio_cell(d, "read_lat_ratio_to_raw", rr)]
            if ucx:
                cells += ["—", "—"]
            t.row(*cells, "≤ 1.10", met(rr <= 1.10))
        if key == "write_bw" and d.present("write_bw_ratio_to_raw"):
            rr = d["write_bw_ratio_to_raw"]
            cells = ["RDMA write bandwidth, 64 KiB, in one process: coverbs and raw verbs (MB/s)",
                     num(c / scale, digits), f"{num(d['write_bw_bytes_per_s_raw'] / scale, digits)} (raw verbs)",
                     ratio_cell(d, "write_bw_ratio_to_raw", rr)]
            if ucx:
                cells += ["—", "—"]
            t.row(*cells, "≥ 0.95", met(rr >= 0.95))
    out = [run_line(d, f"{d.get('rounds', '?')} rounds, median of the rounds; latency {d.get('lat_iterations', '?')} "
                       f"iterations, bandwidth {d.get('bw_iterations', '?')}"), ""]
    out += t.markdown()
    if d.get("ratio_spread"):
        out += ["", "A ratio is the median of the rounds' ratios (a round's coverbs figure over the same round's "
                    "baseline); in brackets the lowest and the highest of them. The figures are medians of the rounds."]
    if ucx:
        sizes = d.get("ucx_lat_bytes", {})
        notes = [f"UCX: {d.get('ucx_layer', 'UCT')}; put_lat sends {sizes.get('write_lat', '?')} B, am_lat "
                 f"{sizes.get('send_lat', '?')} B (its header alone is 8 B)"]
        gaps = [f"{key} ({why})" for key, why in sorted(d.get("ucx_missing", {}).items())]
        if gaps:
            notes.append("Not measured with UCX: " + "; ".join(gaps))
        if d.get("ucx_ucp_status"):
            notes.append(f"UCP layer: {d['ucx_ucp_status']}")
        out += ["", ". ".join(n.rstrip(".") for n in notes) + "."]
    spreads = []
    for key in ("write_lat", "read_lat", "send_lat", "send_lat_event", "write_bw"):
        for who in ("coverbs", "perftest", "ucx", "raw"):
            s = spread(d, f"{key}_{who}")
            if s and key == "write_bw":
                spreads.append(f"{key} {who} {num(s[0] / 1e6, 1)}–{num(s[1] / 1e6, 1)}")
            elif s:
                spreads.append(f"{key} {who} {num(s[0], 1)}–{num(s[1], 1)}")
    if spreads:
        out += ["", "Spread over the rounds (min–max; µs, MB/s): " + "; ".join(spreads) + "."]
    retx = d.get("write_bw_retransmits")
    if retx:
        names = {"perftest": "ib_write_bw", "ucx": "UCX", "coverbs": "coverbs", "raw": "raw verbs"}
        per = [f"{names.get(tool, tool)} {num(retx[tool].figure('completer_retry_err_median'), 0)} / "
               f"{num(retx[tool].figure('duplicate_request_median'), 0)}"
               for tool in ("perftest", "ucx", "coverbs", "raw") if tool in retx]
        out += ["", "What the device resent during a write-bandwidth run (its hw_counters, median over the rounds; "
                    "completer_retry_err / duplicate_request): " + "; ".join(per) + "."]
    out += ["", "![Datapath: coverbs, perftest and UCX side by side](benchmarks/datapath.png)" if ucx else
            "![Datapath: coverbs and perftest side by side](benchmarks/datapath.png)"]
    return out


def plot_script(d, tmp):
    # Each peer: median, lowest and highest round, and the label above its bar ("" and NaN where not measured).
    peers = [("coverbs", "coverbs", BLUE), ("perftest", "perftest", ORANGE)]
    if "write_lat_us_ucx" in d:
        peers.append(("ucx", "UCX (UCT)", GREY))

    def cells(key, who, value, scale=1.0):
        if value is None:
            return ["NaN", "NaN", "NaN", '""']
        m = value / scale
        lo, hi = spread(d, f"{key}_{who}") or (value, value)
        return [f"{m:.3f}", f"{lo / scale:.3f}", f"{hi / scale:.3f}", f'"{m:.1f}"']

    rows = [("write", "write_lat"), ("read", "read_lat"), ("send", "send_lat"), ("send (events)", "send_lat_event")]
    with open(os.path.join(tmp, "lat.dat"), "w") as f:
        for label, key in rows:
            vals = []
            for who, _, _ in peers:
                vals += cells(key, who, d.get(f"{key}_us_{who}"))
            f.write(f'"{label}" ' + " ".join(vals) + "\n")
    with open(os.path.join(tmp, "bw.dat"), "w") as f:
        vals = []
        for who, _, _ in peers:
            vals += cells("write_bw", who, d.get(f"write_bw_bytes_per_s_{who}"), 1e6)
        f.write('"write 64 KiB" ' + " ".join(vals) + "\n")
    n = len(peers)
    width = 1.0 / (n + 1)  # a cluster of n bars and a gap of one

    def plot(data):
        parts = []
        for i, (_, title, colour) in enumerate(peers):
            c = 2 + 4 * i
            parts.append(f'"{data if i == 0 else ""}" using {c}:{c + 1}:{c + 2}{":xtic(1)" if i == 0 else ""} '
                         f'title "{title}" lc rgb "{colour}"')
        for i in range(n):
            c = 2 + 4 * i
            parts.append(f'"" using ($0{(i - (n - 1) / 2) * width:+.4f}):{c + 2}:{c + 3} with labels offset 0,0.7 '
                         "notitle")
        return "plot " + ", \\\n     ".join(parts)

    against = "perftest and UCX" if n == 3 else "perftest"
    title = (f"Data path on {d.get('device', '?')}: coverbs against {against} "
             f"(bars: median of {d.get('rounds', '?')} rounds; whiskers: min-max of the rounds)")
    sizes = "2 B; UCX's send 8 B" if n == 3 else "2 B"
    return GNUPLOT_HEAD + f"""set terminal pngcairo size 1100,600 font "DejaVu Sans,11" noenhanced
set output "{os.path.join(tmp, 'datapath.png')}"
set datafile missing "NaN"
set multiplot title "{title}" font ",12"
set style data histogram
set style histogram errorbars gap 1 lw 1
set bars front
set yrange [0:*]
set offsets 0,0,graph 0.12,0
set title "Latency, {sizes}\\n(microseconds, lower is better)"
set origin 0,0
set size 0.68,0.93
{plot(f"{tmp}/lat.dat")}
set title "Bandwidth, RDMA write 64 KiB\\n(MB/s, higher is better)"
set origin 0.68,0
set size 0.32,0.93
set key top right
{plot(f"{tmp}/bw.dat")}
unset multiplot
"""


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return [("datapath.png", plot_script(d, tmp))]


def aggregate(argv):
    """Run by tools/lib/bench-datapath as `benchkit aggregate datapath ARGS...`; argv = [program, OUT, DEVICE, ROUNDS,
    LAT_ITERS, BW_ITERS, SAMPLES_TXT, REJECTED_TXT, BY_ROUND_TXT, UCX_WHY_TXT, UCX_TL, UCX_AM_BYTES, UCP_STATUS,
    RETRANSMITS_TXT]; writes OUT (datapath.json) and prints it without its samples."""
    out, dev, rounds, lat_iters, bw_iters, samples = argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5]), argv[6]
    rejected = {k: v for k, *v in (line.split() for line in open(argv[7]) if line.strip())}
    by_round = {}  # (round, key) -> value
    for line in open(argv[8]):
        rnd, k, v = line.split()
        by_round[(int(rnd), k)] = float(v)
    ucx_why = dict(line.rstrip("\n").split("\t", 1) for line in open(argv[9]) if line.strip())
    ucx_tl, ucx_am_bytes, ucp_status = argv[10], int(argv[11]), argv[12]
    s = {}
    for line in open(samples):
        k, *v = line.split()
        s[k] = [float(x) for x in v]
    missing = [k for k in ("write_lat", "read_lat", "send_lat", "send_lat_event", "write_bw")
               for who in ("coverbs", "perftest") if not s.get(f"{k}_{who}")]
    if missing:
        sys.exit("bench-datapath: no samples for " + ", ".join(missing))
    med = {k: statistics.median(v) for k, v in s.items()}


    def per_round(t, other):
        """coverbs / OTHER of test T in each round where both were measured."""
        return [by_round[(n, f"{t}_coverbs")] / by_round[(n, f"{t}_{other}")] for n in range(1, rounds + 1)
                if (n, f"{t}_coverbs") in by_round and by_round.get((n, f"{t}_{other}"))]


    # A ratio is the median of the rounds' ratios (each round's figures follow each other closely, so the
    # machine's drift between rounds mostly cancels out of them); ratio_spread keeps each round's ratio and
    # their median, minimum and maximum. Without a round that measured both, the ratio of the medians.
    spread = {}
    def ratio(t, other):
        per = per_round(t, other)
        name = {"perftest": f"{t}_ratio", "ucx": f"{t}_ratio_vs_ucx", "raw": f"{t}_ratio_to_raw"}[other]
        if not per:
            return round(med[f"{t}_coverbs"] / med[f"{t}_{other}"], 3)
        spread[name] = {"median": round(statistics.median(per), 3), "min": round(min(per), 3),
                        "max": round(max(per), 3), "rounds": [round(x, 3) for x in per]}
        return spread[name]["median"]


    r = {"device": dev, "kernel": platform.release(), "rounds": rounds, "lat_iterations": lat_iters,
         "bw_iterations": bw_iters, "lat_bytes": 2, "bw_bytes": 65536,
         "method": "median over rounds of t_typical (us) / bytes per second; each test runs on perftest, UCX and coverbs back to back, the order rotating each round",
         "ratio_method": "median of the per-round ratios"}
    for t in ("write_lat", "read_lat", "send_lat", "send_lat_event"):
        r[f"{t}_us_coverbs"] = round(med[f"{t}_coverbs"], 3)
        r[f"{t}_us_perftest"] = round(med[f"{t}_perftest"], 3)
        r[f"{t}_ratio"] = ratio(t, "perftest")
    # Reads in one process, raw verbs and coverbs alternating: each launch's own ratio, their median and spread.
    if s.get("read_lat_ratio_to_raw"):
        per = s["read_lat_ratio_to_raw"]
        r["read_lat_us_coverbs_interleaved"] = round(med["read_lat_interleaved_coverbs"], 3)
        r["read_lat_us_raw_interleaved"] = round(med["read_lat_interleaved_raw"], 3)
        r["read_lat_ratio_to_raw"] = round(statistics.median(per), 3)
        spread["read_lat_ratio_to_raw"] = {"median": r["read_lat_ratio_to_raw"], "min": round(min(per), 3),
                                           "max": round(max(per), 3), "rounds": [round(x, 3) for x in per]}
        r["read_lat_ratio_to_raw_method"] = ("bench_datapath --way interleaved: each iteration one raw-verbs read "
                                             "(ibv_post_send + busy ibv_poll_cq) and one co_await'ed read on the same "
                                             "queue pair; per launch median / median, then the median over rounds")
    r["write_bw_bytes_per_s_coverbs"] = round(med["write_bw_coverbs"], 1)
    r["write_bw_bytes_per_s_perftest"] = round(med["write_bw_perftest"], 1)
    r["write_bw_ratio"] = ratio("write_bw", "perftest")
    # The same writes as raw verbs in bench_datapath's own process, beside coverbs' in each round.
    if s.get("write_bw_raw"):
        r["write_bw_bytes_per_s_raw"] = round(med["write_bw_raw"], 1)
        r["write_bw_ratio_to_raw"] = ratio("write_bw", "raw")
        r["write_bw_raw_method"] = ("bench_datapath --test write_bw --way raw: ibv_post_send of each 64 KiB write, "
                                    "every one signaled, 128 outstanding, ibv_poll_cq 16 at a time, on the same "
                                    "kind of queue pair in the same process; run right beside coverbs' each round")

    # UCX (UCT): a figure where some round measured it, else null and the reason under ucx_missing.
    r["ucx_layer"] = f"UCT, transport {ucx_tl} on {dev}:1 (ucx_perftest; busy polling)"
    r["ucx_lat_bytes"] = {"write_lat": 2, "send_lat": ucx_am_bytes}
    r["ucx_ucp_status"] = ucp_status
    missing_ucx = {}
    for t, unit, digits in (("write_lat", "us", 3), ("send_lat", "us", 3), ("write_bw", "bytes_per_s", 1)):
        key = f"{t}_{unit}_ucx"
        if s.get(f"{t}_ucx"):
            r[key] = round(med[f"{t}_ucx"], digits)
            r[f"{t}_ratio_vs_ucx"] = ratio(t, "ucx")
        else:
            r[key] = r[f"{t}_ratio_vs_ucx"] = None
            missing_ucx[t] = ucx_why.get(f"{t}_ucx", "no round measured it")
    missing_ucx["read_lat"] = "not run: the UCX comparison covers write and send latency and write bandwidth"
    missing_ucx["send_lat_event"] = "ucx_perftest's UCT tests have no event-driven (sleeping) mode"
    r["ucx_missing"] = missing_ucx
    # What the device resent during each write-bandwidth run (rxe's hw_counters), per tool: each round's counts
    # and their medians. Absent where the device has no such counters.
    retx = {}
    for line in open(argv[13]):
        rnd, tool, retries, dups = line.split()
        t = retx.setdefault(tool, {"completer_retry_err": [], "duplicate_request": []})
        t["completer_retry_err"].append(int(retries))
        t["duplicate_request"].append(int(dups))
    if retx:
        r["write_bw_retransmits"] = {
            tool: {**{f"{k}_median": statistics.median(v) for k, v in t.items()}, "rounds": t} for tool, t in retx.items()}
        r["write_bw_retransmits_method"] = ("the device's port-1 hw_counters completer_retry_err (a requester's ACK "
                                            "timeout that resent) and duplicate_request (a responder that saw a packet "
                                            "again), read before and after each write-bandwidth run of a tool")
    r["ratio_spread"] = spread
    r["samples"] = s
    if rejected:
        r["rejected_samples"] = rejected
    json.dump(r, open(out, "w"), indent=2)
    print(json.dumps({k: v for k, v in r.items() if k != "samples"}, indent=2))
