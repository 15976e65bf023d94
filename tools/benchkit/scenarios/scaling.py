"""scaling — message rate of small writes and sends on one event loop against two, and the ceiling the device
allows (perftest with one client/server pair against two) (bench/scaling.cpp, bench_scaling).

Runs: tools/lib/bench-scaling [--rounds R] [bench_scaling ARGS...] in the guest: bench_scaling and perftest in
alternating order each round, merged by aggregate() below.
"""
import json
import os
import statistics
import sys

from ..common import BLUE, GNUPLOT_HEAD, ORANGE, Table, num, run_line, size_name, write_results

TITLE = "Scaling: one event loop against two"
OLD_TITLES = ()
PAGE_ORDER = 6  # its place on docs/benchmarks.md
RUNNER = "tools/lib/bench-scaling"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest


SCALING_TARGET = 1.6


def scaling_limit(ceiling):
    """The 2-loop/1-loop target: 1.6, or 0.9 × the ceiling where the device itself scales less than that."""
    return SCALING_TARGET if ceiling >= SCALING_TARGET else 0.9 * ceiling


def section(d):
    t = Table()
    size = size_name(d.get("size", 8))
    conns = d.get("connections", 8)
    for op, tool in (("write", "ib_write_bw"), ("send", "ib_send_bw")):
        what = "RDMA writes" if op == "write" else "sends"
        for loops, pairs in ((1, "1 pair"), (2, "2 pairs")):
            c, p = d[f"{op}_msg_per_s_{loops}_loops"], d[f"{op}_msg_per_s_{loops}_pairs_perftest"]
            t.row(f"{size} {what}, {conns} connections, {loops} loop{'s' if loops > 1 else ''} (messages/s)",
                  num(c, 0), f"{num(p, 0)} ({tool}, {pairs})" if p else f"not measured ({tool}, {pairs})",
                  f"{num(c / p, 3)}" if p else "—")
        s, ceiling = d[f"scaling_2_over_1_{op}"], d[f"scaling_ceiling_{op}"]
        if op == "write":
            limit = scaling_limit(ceiling) if ceiling else SCALING_TARGET
            target = (f"≥ {SCALING_TARGET:.1f}" if limit == SCALING_TARGET
                      else f"≥ 0.9 × ceiling = {num(limit, 2)}")
            ok = s >= limit
        else:
            target, ok = "—", None
        t.row(f"{what}: 2 loops / 1 loop", num(s, 3),
              f"{num(ceiling, 3)} (ceiling: perftest 2 pairs / 1 pair)" if ceiling else "ceiling not measured",
              f"{num(s / ceiling, 2)} of the ceiling" if ceiling else "—", target, ok)
    extra = (f"{d.get('rounds', '?')} rounds, median of the rounds; {d.get('duration_ms', '?')} ms per figure, "
             f"{d.get('depth', '?')} in flight per connection, {d.get('mode', '?')} completion queues")
    out = [run_line(d, extra), ""] + t.markdown()
    cpu = []
    for op in ("write", "send"):
        for loops in (1, 2):
            v = d.get(f"{op}_cpu_fraction_{loops}_loops")
            if v:
                cpu.append(f"{op}, {loops} loop{'s' if loops > 1 else ''}: " + " + ".join(f"{x:.2f}" for x in v))
    if cpu:
        out += ["", "CPU time of each loop thread as a share of the wall time: " + "; ".join(cpu) + "."]
    out += ["", "![Scaling: message rate on one event loop and on two](benchmarks/scaling.png)"]
    return out


def plot_script(d, tmp):
    for op in ("write", "send"):
        with open(os.path.join(tmp, f"{op}.dat"), "w") as f:
            f.write(f'"coverbs" {d[f"{op}_msg_per_s_1_loops"]} {d[f"{op}_msg_per_s_2_loops"]}\n')
            one, two = d[f"{op}_msg_per_s_1_pairs_perftest"], d[f"{op}_msg_per_s_2_pairs_perftest"]
            f.write(f'"perftest (ceiling)" {one if one else 0} {two if two else 0}\n')
    size = size_name(d.get("size", 8))
    title = (f"Message rate, {size} operations over {d.get('connections', '?')} connections on "
             f"{d.get('device', '?')} (median of {d.get('rounds', '?')} rounds; higher is better)\\n"
             f"coverbs on one event loop against two; perftest with one client/server pair against two")
    panels = []
    for i, (op, label) in enumerate((("write", "RDMA write"), ("send", "send"))):
        c = d[f"scaling_ceiling_{op}"]
        ceiling = f"{c:.2f} (ceiling)" if c else "ceiling not measured"
        panels.append(f"""set title "{label}: 2/1 = {d[f'scaling_2_over_1_{op}']:.2f} (coverbs), {ceiling}\\n(messages per second)"
set origin {0.5 * i},0
set size 0.5,0.88
plot "{tmp}/{op}.dat" using 2:xtic(1) title "1 loop / 1 pair" lc rgb "{BLUE}", \\
     "" using 3 title "2 loops / 2 pairs" lc rgb "{ORANGE}", \\
     "" using ($0-1./6):2:(sprintf("%.0f",$2)) with labels offset 0,0.7 notitle, \\
     "" using ($0+1./6):3:(sprintf("%.0f",$3)) with labels offset 0,0.7 notitle
""")
    return GNUPLOT_HEAD + f"""set terminal pngcairo size 1100,560 font "DejaVu Sans,11" noenhanced
set output "{os.path.join(tmp, 'scaling.png')}"
set multiplot title "{title}" font ",12"
set style data histogram
set style histogram clustered gap 1
set yrange [0:*]
set offsets 0,0,graph 0.12,0
set key top left
""" + "".join(panels) + "unset multiplot\n"


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return [("scaling.png", plot_script(d, tmp))]


def aggregate(argv):
    """Run by tools/lib/bench-scaling as `benchkit aggregate scaling ARGS...`; argv = [program, OUT, ROUNDS, WORK] with
    WORK/roundN.json (bench_scaling) and WORK/perftest.txt ("ROUND KEY [VALUE]" lines); writes OUT with the medians
    over the rounds and the ratios (median of each round's ratio), and prints it without its samples."""
    out, rounds, work = argv[1], int(argv[2]), argv[3]
    runs = [json.load(open(os.path.join(work, f"round{i}.json"))) for i in range(1, rounds + 1)]
    r = {"rounds": rounds,
         "method": "median over rounds (ratios: median of each round's ratio); messages/s of the sender side; the ceiling from perftest (busy "
                   "polling) with the same size, depth and connections; bench_scaling and perftest alternate order each round"}
    samples = {}
    for k, v in runs[0].items():
        if isinstance(v, list):  # CPU fraction of each loop thread: the median of each
            vals = [run[k] for run in runs]
            samples[k] = vals
            r[k] = [round(statistics.median(x), 3) for x in zip(*vals)]
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = [run[k] for run in runs]
            samples[k] = vals
            m = statistics.median(vals)
            r[k] = round(m, 3) if isinstance(m, float) else m
        else:
            r[k] = v
    pt, by_round = {}, {}
    for line in open(os.path.join(work, "perftest.txt")):
        n, k, *v = line.split()
        if v:
            pt.setdefault(k, []).append(float(v[0]))
            by_round[(int(n), k)] = float(v[0])
    # The ratios are the median of each round's ratio: one round's 1- and 2-loop runs follow each other, so
    # the machine's drift between rounds (other work on the host) cancels out.
    for op in ("write", "send"):
        r[f"scaling_2_over_1_{op}"] = round(statistics.median(samples[f"scaling_2_over_1_{op}"]), 3)
        # A perftest figure that no round produced is null, and so is the ceiling it would give (the page
        # says "not measured"): coverbs' own figures are kept.
        ceiling = True
        for pairs in (1, 2):
            k = f"{op}_msg_per_s_{pairs}_pairs_perftest"
            v = pt.get(k)
            if v:
                samples[k] = v
                r[k] = round(statistics.median(v), 1)
            else:
                r[k] = None
                ceiling = False
                print(f"bench-scaling: no round gave a figure for ib_{op}_bw with {pairs} pair(s)", file=sys.stderr)
        ratios = [by_round[(n, f"{op}_msg_per_s_2_pairs_perftest")] / by_round[(n, f"{op}_msg_per_s_1_pairs_perftest")]
                  for n in range(1, rounds + 1)
                  if (n, f"{op}_msg_per_s_1_pairs_perftest") in by_round and (n, f"{op}_msg_per_s_2_pairs_perftest") in by_round]
        if ratios:
            samples[f"scaling_ceiling_{op}"] = [round(x, 3) for x in ratios]
        r[f"scaling_ceiling_{op}"] = round(statistics.median(ratios), 3) if ratios else None
    r["scaling_2_over_1"] = r["scaling_2_over_1_write"]
    r["scaling_ceiling"] = r["scaling_ceiling_write"]
    r["samples"] = samples
    write_results(out, r)
