"""benchkit — the benchmark scenarios of tools/bench and tools/bench-report, one module each.

  benchkit.all_scenarios()     every scenario module of benchkit/scenarios/, in page order
  benchkit.find_scenario(NAME) one of them, or None
  benchkit/common.py           what the modules share (tables, field checking, the gnuplot preamble)
  benchkit/report.py           tools/bench-report: docs/benchmarks.md and its plots from the JSON results
  benchkit/cli.py              `python3 tools/benchkit COMMAND`, what the bash side of tools/bench calls

Standard library only.
"""
import importlib
import pkgutil

from . import scenarios as _package


def all_scenarios():
    """Every scenario module, in the order of its section on docs/benchmarks.md (PAGE_ORDER)."""
    found = [importlib.import_module(f"{_package.__name__}.{m.name}")
             for m in pkgutil.iter_modules(_package.__path__) if not m.name.startswith("_")]
    return sorted(found, key=lambda m: (m.PAGE_ORDER, m.__name__))


def find_scenario(name):
    """The module of scenario `name`, or None when there is none."""
    return next((m for m in all_scenarios() if short_name(m) == name), None)


def short_name(module):
    """A scenario module's name: "datapath" for benchkit.scenarios.datapath."""
    return module.__name__.rsplit(".", 1)[1]
