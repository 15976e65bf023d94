"""windows — memory-window bind, rebind and invalidation against re-registration, coverbs against raw verbs
(bench/windows.cpp, bench_windows).

Runs: tools/lib/bench-windows [--launches N] [bench_windows ARGS...] in the guest: N launches of bench_windows,
merged by aggregate() below.
"""
import json
import os
import statistics

from ..common import (BLUE, GNUPLOT_HEAD, GREY, ORANGE, RED, Table, num, ratio_cell, rounds_range, run_line,
                      times_faster)

TITLE = "Memory windows"
OLD_TITLES = ()
PAGE_ORDER = 4  # its place on docs/benchmarks.md
RUNNER = "tools/lib/bench-windows"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest


CEILING_SHARE_TARGET = 0.85  # mw_speedup_of_ceiling: coverbs' share of what raw verbs gain on the device


def soft_roce(d):
    """True when the figures come from rxe (Soft-RoCE), where hardware targets do not apply."""
    return str(d.get("device", "")).startswith("rxe")


def section(d):
    t = Table()
    rebind, rereg, speed = d["mw2_rebind_us"], d["rereg_or_reg_us"], d["mw_vs_rereg_speedup"]
    method = d.get("rereg_method", "re-registration")
    # The 5× target is a hardware one (ConnectX): on rxe the device's own ceiling (below) is the measure.
    hw_ok = None if soft_roce(d) else speed >= 5
    t.row("rights change of a peer's key, 1 MiB (µs)", f"{num(rebind, 2)} (rebind_mw, type 2)",
          f"{num(rereg, 2)} ({method})", times_faster(speed) + rounds_range(d, "mw_vs_rereg_speedup", 2, "×"),
          "≥ 5× faster on hardware (ConnectX; seed claims 7.5×)" + ("; not applicable on rxe" if soft_roce(d) else ""),
          hw_ok)
    if "mw_ceiling" in d:
        ceiling, share = d["mw_ceiling"], d["mw_speedup_of_ceiling"]
        t.row("the same rights change in raw verbs: the device's ceiling (µs)",
              f"{num(d['raw_mw2_rebind_us'], 2)} (raw LOCAL_INV + BIND_MW)", f"{num(rereg, 2)} ({method})",
              times_faster(ceiling) + rounds_range(d, "mw_ceiling", 2, "×"))
        t.row("share of the ceiling rebind_mw keeps: its speed-up / the ceiling (= raw rebind / rebind_mw)",
              f"{num(rebind, 2)} µs (rebind_mw)", f"{num(d['raw_mw2_rebind_us'], 2)} µs (raw verbs)",
              ratio_cell(d, "mw_speedup_of_ceiling", share), f"≥ {CEILING_SHARE_TARGET:.2f}",
              share >= CEILING_SHARE_TARGET)
    bind, raw, over = d["mw2_bind_us"], d["raw_mw2_bind_us"], d["bind_overhead_ratio"]
    t.row("type-2 bind, busy-polled CQ, `co_await` with the default token (µs)", num(bind, 2),
          f"{num(raw, 2)} (raw verbs loop)", ratio_cell(d, "bind_overhead_ratio", over), "ratio ≤ 1.15", over <= 1.15)
    if "mw2_bind_use_awaitable_us" in d:
        t.row("type-2 bind, `co_await` with `use_awaitable` (µs)", num(d["mw2_bind_use_awaitable_us"], 2),
              f"{num(raw, 2)} (raw verbs loop)",
              ratio_cell(d, "bind_overhead_ratio_use_awaitable", d["bind_overhead_ratio_use_awaitable"]))
    if "mw2_bind_handler_us" in d:
        h = d["bind_overhead_ratio_handler"]
        t.row("type-2 bind with a completion handler (µs)", num(d["mw2_bind_handler_us"], 2),
              f"{num(raw, 2)} (raw verbs loop)", ratio_cell(d, "bind_overhead_ratio_handler", h), "ratio ≤ 1.15",
              h <= 1.15)
    t.row("type-1 bind (µs)", num(d["mw1_bind_us"], 2))
    if "mw2_bind_event_us" in d:
        t.row("type-2 bind, event-driven CQ (µs)", num(d["mw2_bind_event_us"], 2))
    if "loop_turn_us" in d:
        t.row("one event-loop turn, `co_await post` (µs)", num(d["loop_turn_us"], 2))
    if "handler_turn_us" in d:
        t.row("one event-loop turn, `post(handler)` (µs)", num(d["handler_turn_us"], 2))
    launches = d.get("launch_count", 1)
    rounds = f"{d['rounds']} rounds, " if "rounds" in d else ""
    if launches > 1:
        rounds = f"{launches} launches of {rounds}"
    extra = f"{rounds}{d.get('iters', '?')} binds per figure, {d.get('rereg_iters', '?')} re-registrations, medians"
    out = [run_line(d, extra), ""] + t.markdown()
    if d.get("ratio_spread") and launches > 1:
        out += ["", f"Each figure is the median over {launches} launches of bench_windows (a launch's own figure is "
                    "the median of its rounds; a ratio, the median of its rounds' ratios, each from that round's own "
                    "medians); in brackets the lowest and the highest round of all launches."]
    elif d.get("ratio_spread"):
        out += ["", "A ratio is the median of the rounds' ratios, each from that round's own medians; in brackets "
                    "the lowest and the highest of them."]
    out += ["", "![Memory windows: bind and rebind against re-registration](benchmarks/windows.png)"]
    return out


def plot_script(d, tmp):
    rows = [("type-1 bind", d["mw1_bind_us"], BLUE), ("type-2 bind", d["mw2_bind_us"], BLUE)]
    if "mw2_bind_handler_us" in d:
        rows.append(("type-2 bind, handler", d["mw2_bind_handler_us"], BLUE))
    if "mw2_bind_event_us" in d:
        rows.append(("type-2 bind, event CQ", d["mw2_bind_event_us"], BLUE))
    rows += [("type-2 bind, raw verbs", d["raw_mw2_bind_us"], GREY),
             ("rebind_mw (rights change)", d["mw2_rebind_us"], BLUE)]
    if "raw_mw2_rebind_us" in d:
        rows.append(("rebind, raw verbs", d["raw_mw2_rebind_us"], GREY))
    rows.append(("re-register 1 MiB", d["rereg_or_reg_us"], ORANGE))
    with open(os.path.join(tmp, "win.dat"), "w") as f:
        for i, (label, v, colour) in enumerate(rows):
            f.write(f'{i} {v} "{label}" 0x{colour[1:]}\n')
    n = len(rows)
    bind_at = 1
    rebind_at = [label for label, _, _ in rows].index("rebind_mw (rights change)")
    # rebind_mw's target: 85% of the raw-verbs speed-up on this device where the run measured it, else the
    # hardware figure (re-registration / 5).
    ceiling = "raw_mw2_rebind_us" in d
    rebind_target = d["raw_mw2_rebind_us"] / CEILING_SHARE_TARGET if ceiling else d["rereg_or_reg_us"] / 5
    rebind_rule = (f"raw rebind / {CEILING_SHARE_TARGET:.2f}, {CEILING_SHARE_TARGET:.0%} of the device's ceiling"
                   if ceiling else "re-registration / 5")
    bind_target = d["raw_mw2_bind_us"] * 1.15
    handler_arrow = ""
    if "mw2_bind_handler_us" in d:  # the bar right after the type-2 bind
        handler_arrow = (f'set arrow from {bind_at + 0.55},{bind_target} to {bind_at + 1.45},{bind_target} '
                         f'nohead front dt 2 lw 3 lc rgb "{RED}"\n')
    method = d.get("rereg_method", "re-registration")
    title = (f"Memory windows on {d.get('device', '?')}: bind and rebind against re-registration "
             f"(median microseconds, lower is better)\\nblue: coverbs, grey: raw verbs, orange: {method}\\n"
             f"red dashes: the target of the bar they cross (raw verbs x 1.15; {rebind_rule})")
    return GNUPLOT_HEAD + f"""set terminal pngcairo size 1000,580 font "DejaVu Sans,11" noenhanced
set output "{os.path.join(tmp, 'windows.png')}"
set title "{title}"
set yrange [0:*]
set offsets 0,0,graph 0.1,0
set xrange [-0.6:{n - 0.4}]
set boxwidth 0.65
set xtics rotate by -20
set rmargin 8
set arrow from {bind_at - 0.45},{bind_target} to {bind_at + 0.45},{bind_target} nohead front dt 2 lw 3 lc rgb "{RED}"
{handler_arrow}set arrow from {rebind_at - 0.45},{rebind_target} to {rebind_at + 0.45},{rebind_target} nohead front dt 2 lw 3 lc rgb "{RED}"
plot "{tmp}/win.dat" using 1:2:4:xtic(3) with boxes lc rgb variable notitle, \\
     "" using 1:2:(sprintf("%.1f", $2)) with labels offset 0,0.7 notitle
"""


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return [("windows.png", plot_script(d, tmp))]


def aggregate(argv):
    """Run by tools/lib/bench-windows as `benchkit aggregate windows ARGS...`; argv = [program, OUT, LAUNCH_JSON...];
    writes OUT with each figure the median over the launches."""
    out, files = argv[1], argv[2:]
    runs = [json.load(open(f)) for f in files]
    merged = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and all(
                isinstance(r.get(key), (int, float)) for r in runs):
            m = statistics.median(r[key] for r in runs)
            merged[key] = round(m, 3) if isinstance(m, float) else m
    spread = {}
    for name in runs[0].get("ratio_spread", {}):
        rounds = [x for r in runs for x in r.get("ratio_spread", {}).get(name, {}).get("rounds", [])]
        if not rounds:
            continue
        spread[name] = {"median": merged.get(name), "min": min(rounds), "max": max(rounds), "rounds": rounds,
                        "launches": [r.get(name) for r in runs]}
    merged["ratio_spread"] = spread
    merged["launch_count"] = len(runs)
    merged["launches"] = runs
    merged["ratio_method"] = ("median over launches of each launch's ratio (itself the median of its rounds' ratios)"
                              if len(runs) > 1 else runs[0].get("ratio_method"))
    with open(out, "w") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
