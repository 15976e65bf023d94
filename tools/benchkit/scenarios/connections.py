"""connections — rdma_cm connections per second, receive memory per connection with and without a shared
receive queue, and the message rate through one SRQ (bench/connections.cpp, bench_connections).

Runs: tools/lib/bench-connections [bench_connections ARGS...] in the guest: one run of bench_connections, its
JSON completed by aggregate() below.
"""
import json
import os

from ..common import BLUE, GNUPLOT_HEAD, ORANGE, Table, num, run_line

TITLE = "Many connections: set-up rate, receive memory, message rate"
OLD_TITLES = ()
PAGE_ORDER = 7  # its place on docs/benchmarks.md
RUNNER = "tools/lib/bench-connections"
NATIVE = False  # True: tools/bench runs it on the host, never in the guest


def connection_counts(d):
    """The numbers of connections the run measured (keys connect_per_s_<N>), ascending."""
    return sorted(int(k.rsplit("_", 1)[1]) for k in d if k.startswith("connect_per_s_") and k[14:].isdigit())


def section(d):
    t = Table()
    counts = connection_counts(d)
    t.row("connections established in one process (most tried)", f"{d.figure('max_connections'):,}",
          target="1,024 or the limit named below", ok=d["max_connections"] >= 1024 or None)
    for n in counts:
        no = d.get(f"connect_per_s_no_srq_{n}")
        t.row(f"rdma_cm connections per second, {n:,} client{'s' if n > 1 else ''}", num(d[f"connect_per_s_{n}"]),
              f"{num(no)} (without SRQ)" if no else "—")
    for n in counts:
        srq, no = d[f"msg_rate_srq_{n}"], d.get(f"msg_rate_no_srq_{n}")
        t.row(f"{d.get('size', 64)} B sends, {n:,} connection{'s' if n > 1 else ''}, one SRQ (messages/s)", num(srq),
              f"{num(no)} (receive queue per connection)" if no else "—", f"{num(srq / no, 2)}" if no else "—",
              "every message verified", d.flag(f"verified_srq_{n}", False) and d.flag(f"verified_no_srq_{n}", True))
    for n in counts:
        srq, no = d[f"reg_bytes_per_conn_srq_measured_{n}"], d.get(f"reg_bytes_per_conn_no_srq_measured_{n}")
        t.row(f"receive memory registered per connection, {n:,} connection{'s' if n > 1 else ''} (bytes)", num(srq, 0),
              f"{num(no, 0)} (receive queue per connection)" if no else "—", f"{num(srq / no, 3)}" if no else "—")
    extra = (f"{d.get('messages', '?')} messages per client, SRQ of {d.get('srq_receives', '?')} receives, "
             f"{d.get('receives_per_conn_no_srq', '?')} receives per connection without it, at most "
             f"{d.get('parallel', '?')} connects in flight, RLIMIT_NOFILE {d.get('nofile_limit', '?')}")
    out = [run_line(d, extra), ""] + t.markdown()
    out += ["", f"Limit: {d['limit_reason']}."]
    out += ["", "![Connections: set-up rate and message rate by the number of connections](benchmarks/connections.png)"]
    return out


def plot_script(d, tmp):
    counts = connection_counts(d)
    with open(os.path.join(tmp, "conn.dat"), "w") as f:
        for n in counts:
            f.write(f'"{n}" {d[f"connect_per_s_{n}"]} {d.get(f"connect_per_s_no_srq_{n}", 0)} '
                    f'{d[f"msg_rate_srq_{n}"]} {d.get(f"msg_rate_no_srq_{n}", 0)}\n')
    title = (f"{d.get('max_connections', '?')} connections at most in one process on {d.get('device', '?')} "
             f"(higher is better)")
    panels = []
    for i, (cols, label) in enumerate((((2, 3), "rdma_cm connections per second"),
                                       ((4, 5), f"{d.get('size', 64)} B messages per second"))):
        a, b = cols
        panels.append(f"""set title "{label}, by the number of connections"
set origin {0.5 * i},0
set size 0.5,0.9
plot "{tmp}/conn.dat" using {a}:xtic(1) title "one SRQ" lc rgb "{BLUE}", \\
     "" using {b} title "receive queue per connection" lc rgb "{ORANGE}", \\
     "" using ($0-1./6):{a}:(sprintf("%.0f",${a})) with labels offset 0,0.7 notitle, \\
     "" using ($0+1./6):{b}:(sprintf("%.0f",${b})) with labels offset 0,0.7 notitle
""")
    return GNUPLOT_HEAD + f"""set terminal pngcairo size 1100,560 font "DejaVu Sans,11" noenhanced
set output "{os.path.join(tmp, 'connections.png')}"
set multiplot title "{title}" font ",12"
set style data histogram
set style histogram clustered gap 1
set yrange [0:*]
set offsets 0,0,graph 0.12,0
set key top right
""" + "".join(panels) + "unset multiplot\n"


def plots(d, tmp):
    """The plots of this section: [(png name, gnuplot script)], their data files written into `tmp`."""
    return [("connections.png", plot_script(d, tmp))]


def aggregate(argv):
    """Run by tools/lib/bench-connections as `benchkit aggregate connections ARGS...`; argv = [program, FILE] with
    bench_connections --json in FILE; adds the method to FILE in place and prints it."""
    r = json.load(open(argv[1]))  # one JSON document, or the run failed
    r["method"] = ("one run; connect_per_s_<N>: N clients connecting (at most 'parallel' at once) / the time until both "
                   "sides of all N are established; msg_rate_*_<N>: N x messages / the time until the last was received "
                   "and verified")
    json.dump(r, open(argv[1], "w"), indent=2)
    print(json.dumps(r, indent=2))
