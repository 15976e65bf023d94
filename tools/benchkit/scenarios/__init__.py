"""The benchmark scenarios: one module per scenario, found by benchkit.all_scenarios() (no list to keep).

A scenario is bench/NAME.cpp (bench_NAME, listed in bench/meson.build) and the module NAME.py here, which holds
  TITLE, OLD_TITLES  its section's heading on docs/benchmarks.md (and earlier headings it replaces)
  PAGE_ORDER         the section's place on the page
  RUNNER, NATIVE     what tools/bench runs (tools/lib/bench-NAME: bash, no Python) and whether on the host
  BENCH              optional: the program it runs when that is not bench_NAME (tools/bench builds it)
  GUEST_TIMEOUT      optional: the guest's time limit for the whole scenario in seconds (default 1800)
  section(d)         the section's markdown lines from the results (a benchkit.common.Tracked)
  plots(d, tmp)      its plots: [(png name, gnuplot script)]
  aggregate(argv)    where the runner runs the bench more than once: its rounds into the results file
                     (`python3 tools/benchkit aggregate NAME ARGS...`)
and its targets as constants beside the section that checks them.
"""
