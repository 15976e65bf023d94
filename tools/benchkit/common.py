"""benchkit.common — what the scenario modules share: messages, figures as text, the page's tables, the run
line, the checks of the results' fields (Tracked: a field of the wrong kind is named in the error), the gnuplot
preamble and the gnuplot runner.

A scenario module (benchkit/scenarios/NAME.py) imports from here; nothing here knows a scenario by name.
"""
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys


def die(msg, status=1):
    print(f"bench-report: error: {msg}", file=sys.stderr)
    sys.exit(status)


def bad_usage(msg):
    die(f"{msg} (see tools/bench-report --help)", 2)


def say(msg):
    print(f"bench-report: {msg}", file=sys.stderr)


# --- formatting -------------------------------------------------------------------------------------------

def num(v, digits=1):
    """A figure as text: thousands separated, `digits` decimals."""
    return f"{v:,.{digits}f}"


def times_faster(speedup):
    """A speed-up as words: "2.50× faster", or "1.11× slower" when below 1."""
    if speedup >= 1:
        return f"{num(speedup, 2)}× faster"
    return f"{num(1 / speedup, 2)}× slower"


def size_name(n):
    n = int(n)
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def met(ok):
    return "—" if ok is None else ("yes" if ok else "**no**")


class Table:
    """One scenario's table; each row: figure, coverbs, baseline, ratio, target, met."""

    def __init__(self):
        self.rows = []

    def row(self, figure, coverbs, baseline="—", ratio="—", target="—", ok=None):
        self.rows.append((figure, coverbs, baseline, ratio, target, met(ok)))

    def markdown(self):
        out = ["| figure | coverbs | baseline | ratio | target | met? |", "|---|---:|---:|---:|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return out


class WideTable:
    """A table with its own columns (`columns`: (heading, alignment) pairs, alignment "---" or "---:")."""

    def __init__(self, columns):
        self.columns, self.rows = columns, []

    def row(self, *cells):
        assert len(cells) == len(self.columns)
        self.rows.append(cells)

    def markdown(self):
        out = ["| " + " | ".join(h for h, _ in self.columns) + " |", "|" + "|".join(a for _, a in self.columns) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return out


BUILDTYPES = ("plain", "debug", "debugoptimized", "release", "minsize", "custom")


def run_line(d, extra=""):
    """'Run: date · device · kernel' from what the JSON records."""
    parts = [f"date {d['date']}" if d.get("date") else "date not recorded in the JSON"]
    parts.append(f"device `{d['device']}`" if d.get("device") else "device not recorded")
    if d.get("kernel"):
        parts.append(f"kernel {d['kernel']}")
    if d.get("where"):
        parts.append({"guest": "Soft-RoCE guest (QEMU, TCG emulation)", "host": "on the host"}.get(d["where"], d["where"]))
    if "buildtype" in d:  # meson's, recorded by tools/bench since 2026-12-03 (older results have none)
        bt = d.get("buildtype")
        if not (isinstance(bt, str) and bt in BUILDTYPES):
            kind = ("null" if bt is None else f"the text {str.__repr__(bt)[:40]}" if isinstance(bt, str)
                    else f"{type(bt).__name__} {str(bt)[:40]}")
            raise WrongKind("buildtype", f"{kind}: meson's buildtype is one of {', '.join(BUILDTYPES)}")
        parts.append(f"{bt} build")
    load = d.get("host_load_avg")
    if load:
        quiet = d.get("quiet_max_load")
        check = (f", checked quiet: at most {num(quiet, 2)}" if quiet is not None
                 else ", not checked (`tools/bench --quiet-check`)")
        parts.append(f"host load average {num(load['1min'], 2)} (1 min) on {d.get('host_cores', '?')} cores at the "
                     f"start{check}")
    if extra:
        parts.append(extra)
    return "Run: " + " · ".join(parts) + "."


def rounds_range(d, key, digits=3, unit=""):
    """' (rounds LOW–HIGH)': the lowest and highest per-round value of a ratio (ratio_spread), or ''."""
    sp = d.get("ratio_spread", {}).get(key)
    if sp and len(sp.get("rounds", [])) > 1:
        return f" (rounds {num(sp['min'], digits)}–{num(sp['max'], digits)}{unit})"
    return ""


def ratio_cell(d, key, value, digits=3):
    """A ratio and, where the JSON has it, the lowest and highest of its per-round values."""
    return "—" if value is None else num(value, digits) + rounds_range(d, key, digits)


def spread(d, key):
    """(min, max) of a figure's per-round samples (`samples.KEY`), or None."""
    d = d if isinstance(d, Tracked) else Tracked(d)
    s = d.get("samples", Tracked({}, "samples.", d.last)).numbers(key)
    return (min(s), max(s)) if s else None


def spread_of(values):
    """A ratio's per-round values as the results keep them (`ratio_spread.NAME`): their median, lowest, highest
    and the values themselves, to 3 decimals."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "rounds": [round(x, 3) for x in values]}


def write_results(out, r):
    """Writes the results object `r` to the file `out` (through out.tmp, so a reader never sees half of it) and
    prints it without its per-round samples: what an aggregate() of a scenario module ends with."""
    with open(out + ".tmp", "w") as f:
        json.dump(r, f, indent=2)
        f.write("\n")
    os.replace(out + ".tmp", out)
    print(json.dumps({k: v for k, v in r.items() if k != "samples"}, indent=2))


# --- checking the results' fields ---------------------------------------------------------------------------

class Tracked(dict):
    """A results object that remembers the last field read from it (`path`, "a.b" for nested objects), so a
    field of the wrong kind can be named in the error instead of Python's words alone."""

    def __init__(self, d, path="", last=None):
        super().__init__(d)
        self.path, self.last = path, last if last is not None else [None, None]

    def _wrap(self, key, v):
        field = self.last[0] = f"{self.path}{key}"
        if v is None:  # remembered: Python's words for a null printed as a figure name no field
            self.last[1] = field
        if isinstance(v, dict):
            return Tracked(v, f"{self.path}{key}.", self.last)
        if isinstance(v, bool):  # Python's True is 1: it would pass as a figure
            raise WrongKind(field, "true" if v else "false")
        if isinstance(v, float) and not math.isfinite(v):  # json reads NaN and Infinity
            raise WrongKind(field, str(v))
        if isinstance(v, int) and abs(v) > 1e300:
            raise WrongKind(field, f"{len(str(abs(v)))} digits: too large for a figure")
        if isinstance(v, (int, float)) and v <= 0 and re.search(r"ratio|speedup|ceiling|_over_1", key):
            raise WrongKind(field, f"{v}: a ratio is always above 0")
        if isinstance(v, (int, float)) and v < 0 and re.search(r"_(us|ns|ms)(_|$)|bytes_per_s", key) \
                and "_over_raw" not in key:  # the overhead over the raw loop may be below 0; a time may not
            raise WrongKind(field, f"{v}: a time or a rate is never negative")
        return TrackedStr(v, self.last[0]) if isinstance(v, str) else v

    def figure(self, key):
        """A figure the section cannot do without: a number, or an error naming `key` (null, text, a list or
        an object are refused here, where they are read, rather than where the first sum with them fails)."""
        v = self[key]
        if isinstance(v, (int, float)):
            return v
        kind = ("null" if v is None else "a list" if isinstance(v, list) else "an object" if isinstance(v, dict)
                else f"the text {str.__repr__(v)}" if isinstance(v, str) else type(v).__name__)
        raise WrongKind(f"{self.path}{key}", kind)

    def flag(self, key, default):
        """A true/false field (`default` where the results lack it): bench_connections writes verified_* as
        JSON booleans, which a figure's read refuses (Python's True is 1)."""
        if key not in self:
            return default
        v = super().__getitem__(key)
        if not isinstance(v, bool):
            raise WrongKind(f"{self.path}{key}", "null" if v is None else f"{v!r}: true or false belongs here")
        return v

    def present(self, key):
        """Whether the results have `key` (older results lack some figures); null where a figure belongs is
        refused, since tools/bench leaves a figure out rather than writing null for it."""
        if key not in self:
            return False
        if super().__getitem__(key) is None:
            raise WrongKind(f"{self.path}{key}", "null")
        return True

    def __getitem__(self, key):
        if key not in self:  # named with its place: "ratio_spread.write_lat_ratio.min", not "min"
            raise KeyError(f"{self.path}{key}")
        return self._wrap(key, super().__getitem__(key))

    def numbers(self, key):
        """A list of figures (per-round samples), or None where the results have none; an element that is not a
        finite number is refused naming the list and its place ("samples.write_lat[2]")."""
        v = self.get(key)
        if v is None:
            return None
        if not isinstance(v, list):
            raise WrongKind(f"{self.path}{key}", "an object" if isinstance(v, dict) else "not a list of figures")
        for i, x in enumerate(v):
            bad = (x is None or isinstance(x, (bool, str, list, dict))
                   or (isinstance(x, float) and not math.isfinite(x)))
            if bad:
                kind = ("null" if x is None else "true or false" if isinstance(x, bool)
                        else f"the text {x!r}" if isinstance(x, str) else str(x) if isinstance(x, float)
                        else "a list or an object")
                raise WrongKind(f"{self.path}{key}[{i}]", kind)
        return v

    def sizes(self, key):
        """An object keyed by sizes in bytes ({"4096": 5.1}) as sorted (bytes, figure) pairs; a key that is not
        a number of bytes is refused naming it (Python said "invalid literal for int()")."""
        out = []
        for k in self.get(key, {}):
            if not (k.isdigit() and k.isascii()):
                raise WrongKind(f"{self.path}{key}.{k}", f"the key {k!r}: a size is written in bytes, as digits")
            out.append((int(k), self.get(key)[k]))
        return sorted(out)

    def get(self, key, default=None):
        return self._wrap(key, super().get(key, default)) if key in self else default

    def __format__(self, spec):
        if spec:  # an object where a figure was to be printed
            raise WrongKind(self.path[:-1], "an object")
        return super().__format__(spec)


class WrongKind(TypeError):
    """A field formatted as a figure that is not one: names the field itself, not the last one read."""

    def __init__(self, field, kind):
        super().__init__(kind if ":" in kind else f"{kind}, not a number")
        self.field = field


class TrackedStr(str):
    """A text field that names itself when printed as a figure ("0.97" where 0.97 belongs)."""

    def __new__(cls, text, field):
        o = super().__new__(cls, text)
        o.field = field
        return o

    def __format__(self, spec):
        try:
            return super().__format__(spec)
        except ValueError:
            raise WrongKind(self.field, f"the text {str.__repr__(self)}") from None


def _text_with_a_number(name):
    """TrackedStr's operator `name`: with a figure, an error naming the field ("'TrackedStr' and 'int'" named
    nothing); with text, what str does."""
    base = getattr(str, name, None)

    def op(self, other):
        if isinstance(other, (int, float)):
            raise WrongKind(self.field, f"the text {str.__repr__(self)}")
        return base(self, other) if base else NotImplemented
    return op


for _name in ("__lt__", "__le__", "__gt__", "__ge__", "__truediv__", "__rtruediv__", "__sub__", "__rsub__"):
    setattr(TrackedStr, _name, _text_with_a_number(_name))


# --- plots ------------------------------------------------------------------------------------------------

GNUPLOT_HEAD = """set terminal pngcairo size 960,540 font "DejaVu Sans,11" noenhanced
set encoding utf8
set border 3
set tics nomirror
set grid ytics lc rgb "#dddddd"
set key top left
set style fill solid 0.85 border -1
"""
BLUE, ORANGE, GREY, RED = "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728"


def find_gnuplot():
    """gnuplot's path, or an error saying what to install."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        die("gnuplot is missing, so the plots cannot be drawn: install Debian's gnuplot-nox "
            "(`sudo apt-get install gnuplot-nox`, or run tools/bootstrap), or pass --no-plots to update the tables only")
    return gnuplot


def run_gnuplot(gnuplot, scripts, tmp):
    """Runs each (png name, gnuplot script) of `scripts`, which draw into the folder `tmp`; on the first failure
    dies naming the plot (nothing is placed under docs/benchmarks/ here)."""
    for name, script in scripts:
        r = subprocess.run([gnuplot], input=script, text=True, capture_output=True)
        if r.returncode != 0 or not os.path.isfile(os.path.join(tmp, name)):
            why = r.stderr.strip() or f"exit status {r.returncode}, no {name} written"
            die(f"gnuplot failed drawing docs/benchmarks/{name}, so no plot and not the page were changed:\n{why}")
