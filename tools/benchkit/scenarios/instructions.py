"""instructions — coverbs' own cost per operation in instructions, counted by callgrind (valgrind), which the
host's load does not move: bench_overhead (bench/overhead.cpp, the software verbs device) run once per op and way
at two operation counts; the difference of the two instruction totals over the operations the larger run added
is the instructions per operation (start-up and set-up cancel). This is the gate on the runtime's own cost on
any host. No plot.

Runs: tools/lib/bench-instructions [--ops N] [--batches N], on the host (no guest).
"""
import json
import sys

from ..common import WideTable, met, num, run_line

TITLE = "The runtime's own instructions per operation (native, callgrind)"
OLD_TITLES = ()
PAGE_ORDER = 1.5  # its place on docs/benchmarks.md: after the overhead scenario's ns/op
RUNNER = "tools/lib/bench-instructions"
NATIVE = True  # True: tools/bench runs it on the host, never in the guest
BENCH = "bench_overhead"  # the program it runs (tools/bench builds it)

OPS = (("write", "RDMA write, 8 B"),
       ("sendrecv", "receive + send, 8 B"),
       ("datagram", "datagram receive + send_to (UD), 8 B"),
       ("call", "message_endpoint call + reply, 8 B each (raw: two receive + send pairs)"),
       ("bind", "bind_mw of an unbound type-2 window, then invalidate"))
WAYS = (("raw", "raw verbs (post, poll)"),
        ("callback", "plain completion handler, one in flight"),
        ("use_awaitable", "`co_await` with `asio::use_awaitable`"),
        ("deferred", "`co_await` with `asio::deferred`"),
        ("raw_batch16", "raw verbs, 16 per `ibv_post_send`, the last signaled"),
        ("batch16", "16 requests per turn, completion handlers"))
FLOORS = ("raw", "raw_batch16")
# Targets: instructions over the raw floor per operation (issue 34: today about +600 and +890).
TARGETS = {("write", "callback"): 450, ("write", "deferred"): 700}


# Metrics (coverbs/metrics.hpp): ways measured again as WAY@out (a build with the counting points compiled out,
# -Dmetrics=false) and WAY@on (counting switched on); WAY alone is compiled in and switched off, the default.
# Issue 38's gate: off costs at most this much over compiled out, in percent of the instructions per operation.
METRICS_OFF_LIMIT_PERCENT = 2.0


def floor_of(way):
    """The raw way a way is measured against: raw_batch16 for batch16, else raw (WAY@variant as WAY)."""
    return "raw_batch16" if way.split("@")[0] == "batch16" else "raw"


def metrics_rows(per_op):
    """{"OP_WAY": {compiled_out, off, on, off_over_out_percent, on_minus_off}} for each way measured @out."""
    rows = {}
    for (op, way), out in sorted(per_op.items()):
        if not way.endswith("@out"):
            continue
        base = way[:-len("@out")]
        off, on = per_op.get((op, base)), per_op.get((op, base + "@on"))
        if off is None or on is None:
            continue
        row = {"compiled_out": round(out, 1), "off": round(off, 1), "on": round(on, 1),
               "off_over_out_percent": round(100 * (off - out) / out, 2), "on_minus_off": round(on - off, 1)}
        floor = per_op.get((op, floor_of(base)))
        if floor is not None and out > floor:  # the same against coverbs' own instructions (over the raw floor)
            row["off_over_out_own_percent"] = round(100 * (off - out) / (out - floor), 2)
        rows[f"{op}_{base}"] = row
    return rows


def aggregate(argv):
    """Run by tools/lib/bench-instructions as `benchkit aggregate instructions ARGS...`; argv = [program, OUT,
    TOTALS_TXT, OPS, BATCHES, VALGRIND_VERSION, SECONDS] with TOTALS_TXT lines "OP WAY OPS_PER_BATCH IR" (callgrind's
    total instructions of one bench_overhead run); writes OUT (instructions.json) and prints it."""
    out, totals_txt, ops, batches, valgrind, seconds = argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5], int(argv[6])
    totals = {}  # (op, way) -> {ops per batch: Ir}
    for line in open(totals_txt):
        op, way, n, ir = line.split()
        totals.setdefault((op, way), {})[int(n)] = int(ir)
    extra = ops * (batches + 1)  # the larger run's added operations: 2N - N per batch, the warm-up batch too
    r = {"where": "host", "device": "software", "mode": "events", "size": 8, "counter": f"callgrind Ir ({valgrind})",
         "ops_per_batch_small": ops, "ops_per_batch_large": 2 * ops, "batches": batches, "operations_apart": extra,
         "run_seconds": seconds, "turn_quota_us": 1000000,
         "method": "instructions per operation = (Ir of the run at 2N operations per batch - Ir at N) / (N * (batches "
                   "+ 1)): bench_overhead --op OP --way WAY --turn-quota-us 1000000 under valgrind --tool=callgrind, "
                   "its warm-up batch counted (turns run to max_completions_per_turn, as natively: callgrind's "
                   "slowdown would trip the default 50 us quota; its clock readings are counted)"}
    per_op = {}
    for (op, way), by_n in totals.items():
        if set(by_n) != {ops, 2 * ops}:
            sys.exit(f"bench-instructions: {op} {way} lacks a run at {ops} or {2 * ops} operations per batch")
        per_op[(op, way)] = (by_n[2 * ops] - by_n[ops]) / extra
        r[f"{op}_{way}_instructions_per_op"] = round(per_op[(op, way)], 1)
    for (op, way), v in per_op.items():
        floor = per_op.get((op, floor_of(way)))
        if way not in FLOORS and "@" not in way and floor is not None:
            r[f"{op}_{way}_over_raw_instructions"] = round(v - floor, 1)
    for (op, way), target in TARGETS.items():
        r[f"target_{op}_{way}_over_raw_instructions"] = target
    r["metrics"] = metrics_rows(per_op)
    r["metrics_off_limit_percent"] = METRICS_OFF_LIMIT_PERCENT
    if r["metrics"]:
        r["metrics_off_over_out_percent_max"] = max(v["off_over_out_percent"] for v in r["metrics"].values())
        own = [v["off_over_out_own_percent"] for v in r["metrics"].values() if "off_over_out_own_percent" in v]
        if own:
            r["metrics_off_over_out_own_percent_max"] = max(own)
    r["callgrind_totals"] = {f"{op}_{way}": [by_n[ops], by_n[2 * ops]] for (op, way), by_n in totals.items()}
    with open(out, "w") as f:
        json.dump(r, f, indent=2)
        f.write("\n")
    print(json.dumps({k: v for k, v in r.items() if k != "callgrind_totals"}, indent=2))


def section(d):
    """The instructions per operation of each op and way, against its raw floor, with the targets."""
    t = WideTable([("operation", "---"), ("instructions/op", "---:"), ("raw verbs floor (instructions/op)", "---:"),
                   ("over raw (instructions/op)", "---:"), ("target", "---"), ("met?", "---")])
    for op, label in OPS:
        for way, how in WAYS:
            key = f"{op}_{way}_instructions_per_op"  # WAY@variant rows go to the metrics table
            if key not in d:
                continue
            if way in FLOORS:
                t.row(f"{label}: {how}", num(d.figure(key)), "—", "—", "—", met(None))
                continue
            floor = d.get(f"{op}_{floor_of(way)}_instructions_per_op")
            over = d.get(f"{op}_{way}_over_raw_instructions")
            target = d.get(f"target_{op}_{way}_over_raw_instructions")
            t.row(f"{label}: {how}", num(d.figure(key)), "—" if floor is None else num(floor),
                  "—" if over is None else num(over), f"≤ raw + {target}" if target is not None else "—",
                  met(None if target is None or over is None else over <= target))
    if not t.rows:  # an empty table read as "nothing to report"
        raise KeyError("write_raw_instructions_per_op")
    extra = (f"{d.get('counter', 'callgrind')}; {d.get('ops_per_batch_small', '?')} and "
             f"{d.get('ops_per_batch_large', '?')} operations per batch, {d.get('batches', '?')} batches and a warm-up "
             f"batch each; the software verbs device; the whole scenario ran {d.get('run_seconds', '?')} s")
    out = [run_line(d, extra), ""] + t.markdown()
    out += ["", "Instructions per operation: the difference of two callgrind runs of `bench_overhead --op OP --way WAY` "
                "(the larger with twice the operations per batch) over the operations it added, so start-up and set-up "
                "cancel out. They include the software device's own work (as the raw floor does); a receive + send "
                "and a bind + invalidate count as one operation. The host's load does not move them: this table is "
                "the gate on coverbs' own cost on any host."]
    rows = d.get("metrics") or {}
    if rows:
        limit = d.get("metrics_off_limit_percent", METRICS_OFF_LIMIT_PERCENT)
        labels = dict(OPS)
        hows = dict(WAYS)
        m = WideTable([("operation", "---"), ("compiled out", "---:"), ("compiled in, off (default)", "---:"),
                       ("off over out", "---:"), ("the same, of coverbs' own", "---:"), ("on", "---:"),
                       ("on over off", "---:"), (f"off ≤ +{limit:g} %?", "---")])
        order = [f"{op}_{way}" for op, _ in OPS for way, _ in WAYS]
        for key in sorted(rows, key=lambda k: order.index(k) if k in order else len(order)):
            v = rows[key]
            op, way = key.split("_", 1)
            own = v.get("off_over_out_own_percent")
            m.row(f"{labels.get(op, op)}: {hows.get(way, way)}", num(v["compiled_out"]), num(v["off"]),
                  f"{v['off_over_out_percent']:+.2f} %", "—" if own is None else f"{own:+.2f} %", num(v["on"]),
                  f"{v['on_minus_off']:+,.1f}", met(v["off_over_out_percent"] <= limit))
        out += ["", "**Metrics** (`coverbs/metrics.hpp`), instructions per operation: the library built with the "
                    "counting points compiled out (`-Dmetrics=false`), compiled in and switched off (the default: "
                    "the table above), and switched on (`COVERBS_METRICS=1`). \"Of coverbs' own\": the difference over "
                    "the compiled-out build's instructions above the raw verbs floor (the runtime's own cost) rather than "
                    "over all of them; the gate is read on all of them, as `instructions.json` counts them."]
        out += [""] + m.markdown()
    return out


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return []
