"""Where a cold ``liveunwind pid`` spends its time, measured layer by layer.

Each layer is a fresh process, run several times, median reported (from
``/``, so that ``python -c`` finds the installed copy, not a checkout):

1. the interpreter doing nothing (``python -c pass``);
2. plus the standard-library modules the hot path needs;
3. plus liveunwind's hot-path modules (everything a plain backtrace imports),
   from the code bundle as the command takes them (liveunwind/codebundle.py;
   written by the command's first run, which breakdown() makes first);
4. the whole command, whose ``--stats`` phases give the work itself;

and, apart, the floor of any Python backtracer: bench/stop_floor.py, which
only stops every thread and lets it go.

The differences between layers are the cost of each.  bench/run.py runs it
on the 9-thread C target, against the same installed copy it times.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

REPETITIONS = 21
#: What a plain live backtrace imports from the standard library (see tests/system/test_startup.py).
STDLIB = "import _operator, _signal, bisect, ctypes, errno, itertools, mmap, os, struct"
#: The command's start: liveunwind's modules from the code bundle where there is one.
BUNDLE = "from liveunwind.codebundle import install; install()"
#: liveunwind's modules on that path, in the order the command loads them.
HOT_MODULES = (
    "liveunwind.cli",
    "liveunwind.unwinder.stepper",
    "liveunwind.cli.report",
    "liveunwind.backtrace.session",
    "liveunwind.targets.live.procfs",
    "liveunwind.targets.live.ptrace",
    "liveunwind.targets.live.snapshot",
    "liveunwind.modules.debuginfo",
    "liveunwind.modules.modulemap",
    "liveunwind.formats.unwind.dwarf_cfi",
    "liveunwind.backtrace.symbolizer",
    "liveunwind.modules.symbols",
)


def median_wall(command: list[str]) -> float:
    """Median seconds of ``command`` over REPETITIONS fresh runs (after one warm-up)."""
    subprocess.run(command, capture_output=True, check=False, cwd="/")
    walls = []
    for _ in range(REPETITIONS):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False, cwd="/")
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def median_phases(command: list[str]) -> dict[str, float]:
    """Median milliseconds of each ``--stats`` phase."""
    phases: dict[str, list[float]] = {}
    for _ in range(REPETITIONS):
        result = subprocess.run([*command, "--stats"], capture_output=True, text=True, cwd="/")
        line = result.stderr.strip().splitlines()[-1]
        for part in line.split(": stats: ", 1)[1].split(";")[0].split(", "):
            name, value, _unit = part.split(" ")
            phases.setdefault(name, []).append(float(value))
    return {name: statistics.median(values) for name, values in phases.items()}


def breakdown(liveunwind: list[str], pid: int) -> dict:
    python = str(Path(liveunwind[0]).with_name("python"))
    subprocess.run([*liveunwind, "pid", str(pid)], capture_output=True, cwd="/")  # the bundle
    start = median_wall([python, "-c", "pass"])
    stdlib = median_wall([python, "-c", STDLIB])
    ours = median_wall([python, "-c", f"{STDLIB}; {BUNDLE}; import {', '.join(HOT_MODULES)}"])
    whole = median_wall([*liveunwind, "pid", str(pid)])
    floor = median_wall([python, str(Path(__file__).with_name("stop_floor.py")), str(pid)])
    return {
        "interpreter_ms": start * 1e3,
        "stdlib_imports_ms": (stdlib - start) * 1e3,
        "liveunwind_imports_ms": (ours - stdlib) * 1e3,
        "whole_command_ms": whole * 1e3,
        "stop_floor_ms": floor * 1e3,
        "phases_ms": median_phases([*liveunwind, "pid", str(pid)]),
    }


def format_breakdown(result: dict) -> str:
    """The layers as lines of a table, and the phases of the work on one line."""
    phases = result["phases_ms"]
    layers = [
        ("interpreter start (python -c pass)", result["interpreter_ms"]),
        ("standard-library imports", result["stdlib_imports_ms"]),
        ("liveunwind imports", result["liveunwind_imports_ms"]),
        ("the work (--stats total)", phases["total"]),
    ]
    rest = result["whole_command_ms"] - sum(value for _, value in layers)
    layers += [("output, exit and the rest", rest), ("whole command", result["whole_command_ms"])]
    lines = [f"{label:40} {value:6.1f} ms" for label, value in layers]
    work = ", ".join(f"{name} {value:.1f}" for name, value in phases.items() if name != "total")
    lines.append(f"work by phase (ms): {work}")
    if "stop_floor_ms" in result:
        floor = result["stop_floor_ms"]
        lines.append(f"{'stop and let go alone (stop_floor.py)':40} {floor:6.1f} ms")
    return "\n".join(lines)
