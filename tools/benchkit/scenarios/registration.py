"""registration — memory registration off the event loop: the loop's stall while registrations run, the
registration cache and buffer pool, asynchronous against synchronous registration, huge pages
(bench/registration.cpp, bench_registration). No aggregation: the JSON is bench_registration --json.

Runs: tools/lib/bench-registration [bench_registration ARGS...] in the guest.
"""
import os

from ..common import BLUE, GNUPLOT_HEAD, GREY, ORANGE, RED, Table, Tracked, num, run_line, size_name, times_faster

TITLE = "Registration"
OLD_TITLES = ()
PAGE_ORDER = 3  # its place on docs/benchmarks.md
RUNNER = "tools/lib/bench-registration"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest


def section(d):
    t = Table()
    sync, asyn = d["loop_stall_p99_ms_sync"], d["loop_stall_p99_ms_async"]
    stall = size_name(d.get("stall_size_bytes", 256 << 20))
    t.row(f"1 ms timer lateness p99 while {stall} registrations run (ms)", f"{num(asyn, 3)} (reg_mr on workers)",
          f"{num(sync, 3)} (ibv_reg_mr on the loop)", f"{num(sync / asyn, 1)}× lower" if asyn > 0 else "—",
          "≥ 10× lower", asyn * 10 <= sync)
    t.row("registration_cache hit (ns)", num(d["cache_hit_ns"], 1), "—", "—", "≤ 1,000 ns", d["cache_hit_ns"] <= 1000)
    t.row("buffer_pool allocate + free, 4 KiB (ns)", num(d["pool_alloc_ns"], 1), "—", "—", "≤ 1,000 ns",
          d["pool_alloc_ns"] <= 1000)
    size = d.get("async_size_bytes", 512 << 20)
    sync_big = d.get("reg_us_by_size", {}).get(str(size))
    unblock = d["async_unblock_us_512mib"]
    t.row(f"loop busy starting an async registration of {size_name(size)} (µs)", num(unblock, 1),
          f"{num(sync_big, 1)} (ibv_reg_mr, synchronous)" if sync_big else "—",
          f"{num(sync_big / unblock, 0)}× shorter" if sync_big and unblock > 0 else "—")
    t.row(f"async registration of {size_name(size)}, until its result (µs)", num(d["async_total_us_512mib"], 1),
          f"{num(sync_big, 1)} (synchronous)" if sync_big else "—",
          f"{num(d['async_total_us_512mib'] / sync_big, 2)}× the synchronous time" if sync_big else "—")
    t.row("cache miss, 1 MiB, until the result (µs)", num(d["cache_miss_us_1mib"], 1))
    align = size_name(d.get("align_size_bytes", 64 << 20))
    t.row(f"register {align}: 2 MiB-aligned with THP vs 4 KiB-aligned without (µs)",
          num(d["reg_us_2mib_aligned_thp"], 1), num(d["reg_us_4kib_aligned_no_thp"], 1),
          times_faster(d['reg_2mib_aligned_vs_4kib_speedup']), "seed claims 1.4×", None)
    if d.get("reg_us_2mib_aligned_no_thp"):
        plain = d["reg_us_2mib_aligned_no_thp"]
        t.row(f"register {align}: 2 MiB-aligned vs 4 KiB-aligned, both without THP (µs)", num(plain, 1),
              num(d["reg_us_4kib_aligned_no_thp"], 1), times_faster(d["reg_us_4kib_aligned_no_thp"] / plain))
    out = [run_line(d, f"workers `{d.get('workers', '?')}`, transparent huge pages `{d.get('thp', '?')}`"), ""]
    out += t.markdown()
    by_size = d.sizes("reg_us_by_size")
    if by_size:
        out += ["", "Synchronous `ibv_reg_mr` of touched memory, median µs by size: " +
                " · ".join(f"{size_name(k)} {num(v, 1)}" for k, v in by_size) + "."]
    out += ["", "![Registration latency by size](benchmarks/registration-by-size.png)",
            "![Event-loop stall while registering](benchmarks/registration-stall.png)"]
    return out


def plot_scripts(d, tmp):
    by_size = Tracked(d).sizes("reg_us_by_size")
    with open(os.path.join(tmp, "reg.dat"), "w") as f:
        for k, v in by_size:
            f.write(f'{k} {v} "{size_name(k).replace(" ", "")}"\n')
    size = d.get("async_size_bytes", 512 << 20)
    with open(os.path.join(tmp, "async.dat"), "w") as f:
        f.write(f"{size} {d['async_unblock_us_512mib']}\n")
    with open(os.path.join(tmp, "seed.dat"), "w") as f:
        f.write(f"{512 << 20} 18000\n")
    short = lambda k: size_name(k).replace(" ", "").replace("iB", "")  # 4K, 1M, 512M
    xtics = ", ".join(f'"{short(k)}" {k}' for k, _ in by_size)
    reg = GNUPLOT_HEAD + f"""set terminal pngcairo size 1100,560 font "DejaVu Sans,11" noenhanced
set output "{os.path.join(tmp, 'registration-by-size.png')}"
set key top left Left reverse
set title "Registration latency by size on {d.get('device', '?')} (median; log scales)"
set logscale xy
set xlabel "region size (bytes; K, M = KiB, MiB)"
set ylabel "microseconds"
set xtics ({xtics})
set format y "%g"
set grid xtics ytics lc rgb "#dddddd"
set offsets graph 0.05, graph 0.05, 0, 0
plot "{tmp}/reg.dat" using 1:2 with linespoints lw 2 pt 7 ps 1.2 lc rgb "{BLUE}" title "ibv_reg_mr, synchronous (the loop is blocked this long)", \\
     "" using 1:2:(sprintf("%.0f", $2)) with labels offset 0,1 notitle, \\
     "{tmp}/async.dat" using 1:2 with points pt 9 ps 2 lc rgb "{ORANGE}" title "coverbs reg_mr: time the loop is busy starting it", \\
     "{tmp}/seed.dat" using 1:2 with points pt 6 ps 2 lw 2 lc rgb "{GREY}" title "seed's claim: 512 MiB in ~18 ms on ConnectX-6 Dx"
"""
    sync, asyn = d["loop_stall_p99_ms_sync"], d["loop_stall_p99_ms_async"]
    with open(os.path.join(tmp, "stall.dat"), "w") as f:
        f.write(f'0 {sync} "ibv_reg_mr on the loop" 0x{ORANGE[1:]}\n')
        f.write(f'1 {asyn} "coverbs reg_mr (workers)" 0x{BLUE[1:]}\n')
    stall = size_name(d.get("stall_size_bytes", 256 << 20))
    stall_plot = GNUPLOT_HEAD + f"""set terminal pngcairo size 720,480 font "DejaVu Sans,11" noenhanced
set output "{os.path.join(tmp, 'registration-stall.png')}"
set title "Event-loop stall while {stall} registrations run: p99 lateness of a 1 ms timer (ms, log scale)"
set logscale y
set format y "%g"
set yrange [{min(sync, asyn) / 4}:{max(sync, asyn) * 4}]
set xrange [-0.6:1.6]
set boxwidth 0.6
set xtics ("ibv_reg_mr on the loop" 0, "coverbs reg_mr (workers)" 1)
set arrow from -0.5,{sync / 10} to 1.5,{sync / 10} nohead dt 2 lw 2 lc rgb "{RED}"
set label "target: 10x below the synchronous stall" at 1.5,{sync / 10 * 1.25} right tc rgb "{RED}"
plot "{tmp}/stall.dat" using 1:2:4 with boxes lc rgb variable notitle, \\
     "" using 1:2:(sprintf("%.2f ms", $2)) with labels offset 0,0.8 notitle
"""
    return reg, stall_plot


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    reg, stall = plot_scripts(d, tmp)
    return [("registration-by-size.png", reg), ("registration-stall.png", stall)]
