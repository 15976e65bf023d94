"""benchkit.cli — `python3 tools/benchkit COMMAND ...`: what the bash side of the benchmarks asks of benchkit.

  list                      the scenarios (one a line, by name): a module in benchkit/scenarios/ each
  runner NAME               the script tools/bench runs for scenario NAME (absolute path); exit 1 if none
  native NAME               exit 0 when NAME runs on the host without the guest (overhead), else 1
  bench NAME                the benchmark program scenario NAME runs (its module's BENCH, else bench_NAME)
  timeout NAME              the guest's time limit for scenario NAME in seconds (its module's GUEST_TIMEOUT,
                            else 1800)
  aggregate NAME ARGS...    scenario NAME's aggregation of its rounds into its results file (see its module)
  field KEY                 the field KEY of the JSON object on stdin, printed as Python prints it
  buildtype INTRO_JSON      meson's buildtype from a build folder's meson-info/intro-buildoptions.json
  option INTRO_JSON NAME    the value of the build option NAME there (empty when the folder has none)
  stamp FILE DATE KERNEL WHERE LOAD CORES MAX_LOAD CHECKED_LOAD BUILDTYPE
                            adds the run's date, kernel, place and buildtype (unless FILE has them) and the
                            host's load (LOAD: the first three fields of /proc/loadavg), core count and quiet
                            check to the results FILE
Exit status: 0 done; 1 a failure (on stderr); 2 a bad command.
"""
import json
import os
import sys

from . import all_scenarios, find_scenario, short_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stamp(argv):
    """tools/bench's stamp of a results file: argv = [FILE, DATE, KERNEL, WHERE, LOAD, CORES, MAX_LOAD,
    CHECKED_LOAD, BUILDTYPE]; writes FILE.tmp (tools/bench moves it over FILE)."""
    path, date, kernel, where, load, cores, max_load, checked_load, buildtype = argv
    with open(path) as f:
        r = json.load(f)
    for k, v in (("date", date), ("kernel", kernel), ("where", where), ("buildtype", buildtype)):
        r.setdefault(k, v)
    r["host_load_avg"] = dict(zip(("1min", "5min", "15min"), (float(x) for x in load.split()[:3])))
    r["host_cores"] = int(cores)
    r["quiet_max_load"] = float(max_load) if max_load else None
    r["quiet_check_load"] = float(checked_load) if checked_load else None
    with open(path + ".tmp", "w") as f:
        json.dump(r, f, indent=2)
        f.write("\n")


def main(argv):
    """The command line above; returns the exit status."""
    command, args = (argv[0], argv[1:]) if argv else (None, [])
    if command in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if command == "list" and not args:
        for name in sorted(short_name(m) for m in all_scenarios()):
            print(name)
        return 0
    if command in ("runner", "native", "bench", "timeout") and len(args) == 1:
        module = find_scenario(args[0])
        if module is None:
            return 1
        if command == "native":
            return 0 if module.NATIVE else 1
        if command == "bench":
            print(getattr(module, "BENCH", f"bench_{args[0]}"))
            return 0
        if command == "timeout":
            print(getattr(module, "GUEST_TIMEOUT", 1800))
            return 0
        print(os.path.join(ROOT, module.RUNNER))
        return 0
    if command == "aggregate" and args:
        module = find_scenario(args[0])
        if module is None or not hasattr(module, "aggregate"):
            print(f"benchkit: no aggregation for the scenario '{args[0]}'", file=sys.stderr)
            return 2
        module.aggregate([f"bench-{args[0]}"] + args[1:])
        return 0
    if command == "field" and len(args) == 1:
        print(json.loads(sys.stdin.read())[args[0]])
        return 0
    if command == "buildtype" and len(args) == 1:
        print(next(o["value"] for o in json.load(open(args[0])) if o["name"] == "buildtype"))
        return 0
    if command == "option" and len(args) == 2:
        print(next((o["value"] for o in json.load(open(args[0])) if o["name"] == args[1]), ""))
        return 0
    if command == "stamp" and len(args) == 9:
        stamp(args)
        return 0
    print(__doc__.strip(), file=sys.stderr)
    return 2
