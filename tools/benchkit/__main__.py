"""`python3 tools/benchkit COMMAND ...`: benchkit's command line (see benchkit/cli.py)."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree (the guest writes it too)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchkit.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
