"""overhead — coverbs' own cost per operation, natively (bench/overhead.cpp, bench_overhead): each way of
awaiting an operation against the raw-verbs floor, on the software verbs device. No aggregation (the JSON is
bench_overhead --json as it is) and no plot.

Runs: tools/lib/bench-overhead [bench_overhead ARGS...], on the host (no guest).
"""
from ..common import WideTable, met, num, run_line, size_name

TITLE = "The runtime's own cost per operation (native, no device)"
OLD_TITLES = ()
PAGE_ORDER = 1  # its place on docs/benchmarks.md
RUNNER = "tools/lib/bench-overhead"
NATIVE = True  # True: tools/bench runs it on the host, never in the guest


OVERHEAD_WAYS = (("callback", "plain completion handler, one in flight"),
                 ("use_awaitable", "`co_await` with `asio::use_awaitable`"),
                 ("deferred", "`co_await` with `asio::deferred`"),
                 ("as_tuple", "`co_await` with `as_tuple(use_awaitable)`"),
                 ("batch16", "16 in flight, completion handlers"))


def section(d):
    """coverbs' own cost per operation, natively (bench_overhead): each way against the raw-verbs floor."""
    t = WideTable([("operation", "---"), ("median ns/op", "---:"), ("p99 ns/op", "---:"),
                   ("raw verbs floor (ns/op)", "---:"), ("over raw (ns/op)", "---:"), ("target", "---"),
                   ("met?", "---")])
    size = size_name(d.get("size", 8))
    measured = False
    for op, label in (("write", f"RDMA write, {size}"), ("sendrecv", f"receive + send, {size}"),
                      ("datagram", f"datagram receive + send_to (UD), {size}"),
                      ("call", f"message_endpoint call + reply, {size} each (raw: two receive + send pairs)"),
                      ("bind", "bind_mw of an unbound type-2 window, then invalidate (BIND_MW, LOCAL_INV)"),
                      ("rebind", "rebind_mw of a bound type-2 window (LOCAL_INV + BIND_MW)")):
        if f"{op}_raw_ns_median" not in d:
            continue
        measured = True
        t.row(f"{label}: raw verbs (post, poll)", num(d[f"{op}_raw_ns_median"]), num(d[f"{op}_raw_ns_p99"]),
              "—", "—", "—", met(None))
        for way, how in OVERHEAD_WAYS:
            if f"{op}_{way}_ns_median" not in d:
                continue
            floor = d[f"{op}_raw_batch16_ns_median"] if way == "batch16" else d[f"{op}_raw_ns_median"]
            over = d[f"{op}_{way}_over_raw_ns"]
            target = d.get(f"target_{op}_{way}_over_raw_ns")
            t.row(f"{label}: {how}", num(d[f"{op}_{way}_ns_median"]), num(d[f"{op}_{way}_ns_p99"]), num(floor),
                  num(over), f"≤ raw + {target} ns" if target is not None else "—",
                  met(None if target is None else over <= target))
    if not measured:  # an empty table read as "nothing to report"
        raise KeyError("write_raw_ns_median")
    extra = (f"{d.get('batches', '?')} batches of {d.get('ops_per_batch', '?')} operations per way, completion "
             f"queue {d.get('mode', '?')}; a software verbs device that completes each work request at once, no RDMA "
             "device and no emulator")
    out = [run_line(d, extra), ""] + t.markdown()
    out += ["", "ns/op of a batch is its wall time over its operations; median and 99th percentile over the batches. "
                "A p99 far above the median is the host preempting a batch (other work on its cores), not the runtime."]
    return out


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return []
