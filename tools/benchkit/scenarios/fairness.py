"""fairness — the lateness of a 1 ms timer on the loop of a busy completion queue (bench/fairness.cpp,
bench_fairness).

Runs: tools/lib/bench-fairness [--rounds R] [bench_fairness ARGS...] in the guest: R launches of bench_fairness,
merged by aggregate() below.
"""
import json
import os
import statistics

from ..common import BLUE, GNUPLOT_HEAD, GREY, ORANGE, RED, Table, num, run_line, size_name, write_results

TITLE = "Fairness: a timer beside a busy completion queue"
OLD_TITLES = ()
PAGE_ORDER = 5  # its place on docs/benchmarks.md
RUNNER = "tools/lib/bench-fairness"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest


FAIRNESS_P99_LIMIT_MS = 5.0


def section(d):
    t = Table()
    busy, idle = d["timer_lateness_p99_ms_busy"], d["timer_lateness_p99_ms_idle"]
    t.row("1 ms timer lateness p99 while a stream keeps the completion queue busy (ms; the worse of read and write)",
          num(busy, 3), f"{num(idle, 3)} (idle loop)", f"{num(busy / idle, 1)}× the idle p99" if idle > 0 else "—",
          f"≤ {num(FAIRNESS_P99_LIMIT_MS, 0)} ms", busy <= FAIRNESS_P99_LIMIT_MS)
    labels = {"idle": "idle loop", "read": "`co_await async_read` stream",
              "write": "write-from-handler stream"}
    for mode in ("idle", "read", "write"):
        t.row(f"timer lateness, {labels[mode]}: p50 / p99 / max (ms)",
              " / ".join(num(d[f"timer_lateness_{k}_ms_{mode}"], 3) for k in ("p50", "p99", "max")))
    size = size_name(d.get("size", 8))
    extra = (f"{d.get('rounds', '?')} rounds, median of the rounds; {d.get('duration_ms', '?')} ms per mode, "
             f"{size} operations, {d.get('streams', '?')} stream(s)")
    out = [run_line(d, extra), ""] + t.markdown()
    ms = d.get("duration_ms")
    wake = [f"{m} {d[f'timer_wakeups_in_period_{m}']:,}" for m in ("idle", "read", "write")
            if f"timer_wakeups_in_period_{m}" in d]
    out += ["", f"Operations completed in the period (that the stream ran): read {d['operations_read']:,}, write "
                f"{d['operations_write']:,}." +
            (f" Timer wake-ups in the period (each wait is 1 ms from the previous wake-up, so at most {ms:,}): " + ", ".join(wake) + "." if wake and ms else "")]
    out += ["", "![Fairness: lateness of a 1 ms timer beside a busy completion queue](benchmarks/fairness.png)"]
    return out


def plot_script(d, tmp):
    modes = [("idle", "idle loop"), ("read", "read stream (co_await)"), ("write", "write-from-handler stream")]
    floor = 0.001  # a log scale: lateness under a microsecond is drawn at 1 us
    with open(os.path.join(tmp, "fair.dat"), "w") as f:
        for key, label in modes:
            vals = [max(floor, d[f"timer_lateness_{k}_ms_{key}"]) for k in ("p50", "p99", "max")]
            f.write(f'"{label}" ' + " ".join(f"{v:.4f}" for v in vals) + "\n")
    top = max(max(d[f"timer_lateness_max_ms_{m}"] for m, _ in modes), FAIRNESS_P99_LIMIT_MS) * 8
    title = (f"Lateness of a 1 ms periodic timer on the loop of a busy completion queue, {d.get('device', '?')} "
             f"(ms, log scale; median of {d.get('rounds', '?')} rounds)\\nred dashes: the p99 target while busy, "
             f"{FAIRNESS_P99_LIMIT_MS:g} ms")
    return GNUPLOT_HEAD + f"""set terminal pngcairo size 1000,560 font "DejaVu Sans,11" noenhanced
set output "{os.path.join(tmp, 'fairness.png')}"
set title "{title}"
set style data histogram
set style histogram clustered gap 1
set logscale y
set format y "%g"
set yrange [{floor / 2}:{top}]
set arrow from graph 0, first {FAIRNESS_P99_LIMIT_MS} to graph 1, first {FAIRNESS_P99_LIMIT_MS} nohead front dt 2 lw 2 lc rgb "{RED}"
plot "{tmp}/fair.dat" using 2:xtic(1) title "p50" lc rgb "{BLUE}", \\
     "" using 3 title "p99" lc rgb "{ORANGE}", \\
     "" using 4 title "max" lc rgb "{GREY}", \\
     "" using ($0-0.27):2:($2 >= 100 ? sprintf("%.0f",$2) : sprintf("%.3g",$2)) with labels offset 0,0.7 notitle, \\
     "" using ($0):3:($3 >= 100 ? sprintf("%.0f",$3) : sprintf("%.3g",$3)) with labels offset 0,0.7 notitle, \\
     "" using ($0+0.27):4:($4 >= 100 ? sprintf("%.0f",$4) : sprintf("%.3g",$4)) with labels offset 0,0.7 notitle
"""


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return [("fairness.png", plot_script(d, tmp))]


def aggregate(argv):
    """Run by tools/lib/bench-fairness as `benchkit aggregate fairness ARGS...`; argv = [program, OUT, ROUNDS, WORK] with
    WORK/roundN.json; writes OUT with the median of each figure over the rounds and prints it without its samples."""
    out, rounds, work = argv[1], int(argv[2]), argv[3]
    runs = [json.load(open(os.path.join(work, f"round{i}.json"))) for i in range(1, rounds + 1)]
    r = {"rounds": rounds, "method": "median over rounds; the timer's lateness in ms, one sample per wake-up (each wait armed 1 ms after the previous wake-up)"}
    samples = {}
    for k, v in runs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = [run[k] for run in runs]
            samples[k] = vals
            m = statistics.median(vals)
            r[k] = round(m, 3) if isinstance(m, float) else m
        else:
            r[k] = v
    r["timer_lateness_p99_ms_busy"] = max(r["timer_lateness_p99_ms_read"], r["timer_lateness_p99_ms_write"])
    r["samples"] = samples
    write_results(out, r)
