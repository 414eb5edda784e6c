"""Start-up stays lean: a plain ``liveunwind pid`` imports nothing it does not need.

Start-up is most of a cold backtrace's time (see the README's Speed section),
so a stray import of a heavy module on the hot path is a regression.  This
checks which modules a real backtrace of a running program loaded; it does
not time anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Modules that cost milliseconds to import and that a plain text backtrace of
#: a live C program never needs (each is imported lazily where it is needed).
HEAVY = {
    "argparse",  # our own parser, cliparse.py
    "ast",
    "dataclasses",
    "elftools",
    "gettext",
    "inspect",
    "json",  # only --json
    "lief",  # only Mach-O
    "locale",
    "pathlib",
    "psutil",
    "ptrace",  # python-ptrace: only the PEEKDATA fallback
    "re",  # only for demangling and --help
    "shutil",
    "tokenize",
    "typing",
}

_PROBE = """
import sys
from liveunwind.cli import main
status = main(sys.argv[1:])
print(" ".join(sorted(sys.modules)), file=sys.stderr)
raise SystemExit(status)
"""


def modules_a_backtrace_loaded(pid: int) -> set[str]:
    """The modules ``liveunwind pid PID`` loaded, run with nothing but this checkout."""
    result = subprocess.run(
        [sys.executable, "-S", "-c", _PROBE, "pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert result.returncode == 0, result.stderr
    assert "main" in result.stdout  # a real backtrace was printed
    loaded = set(result.stderr.splitlines()[-1].split())
    assert "liveunwind.unwinder.stepper" in loaded
    return loaded


def test_a_live_backtrace_imports_no_heavy_module(run_program) -> None:
    loaded = modules_a_backtrace_loaded(run_program("threads-O2").pid)
    assert not HEAVY & loaded, f"imported on the hot path: {sorted(HEAVY & loaded)}"
