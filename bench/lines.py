"""`python bench/lines.py`: `liveunwind pid --lines` against `eu-stack -i -s -p PID`.

The speed target of source lines (issue 18): with ``--lines`` liveunwind may
take at most 1.5 times the wall time of ``eu-stack -i -s`` on the same
stopped process with debug information.  The target is testprogs/lines
(six threads, frames in the program and in glibc, whose debug file
libc6-dbg provides), each tool run 15 times after a warm-up, the three taking turns; medians.
A plain ``liveunwind pid`` is measured too, which ``--lines`` must not slow down.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPETITIONS = 15
#: This checkout run as an installed command runs: its packages importable, but without
#: the import hooks a development venv's .pth files add to every start (-S).
ENV = dict(os.environ, PYTHONPATH=f"{ROOT}:{sysconfig.get_paths()['purelib']}")
PYTHON = [sys.executable, "-S"]


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, env=ENV, cwd=ROOT, timeout=300)
    seconds = time.perf_counter() - started
    if result.returncode not in (0, 1):
        raise RuntimeError(f"{command[:3]} failed: {result.stderr.decode()[-400:]}")
    return seconds


def interleaved_ms(commands: dict[str, list[str]]) -> dict[str, list[float]]:
    """Each command's wall times in ms, the commands taking turns so that a change
    in the machine's load hits them alike (it has 2 cores, often shared)."""
    for command in commands.values():
        wall(command)  # warm-up: page cache, bytecode
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(REPETITIONS):
        for name, command in commands.items():
            times[name].append(1000 * wall(command))
    return times


def main() -> int:
    subprocess.run(["make", "-s", "-C", str(ROOT / "testprogs" / "lines")], check=True)
    # Compiled bytecode, as an installed package has (PYTHONDONTWRITEBYTECODE may be set).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "liveunwind")], check=True)
    program = ROOT / "testprogs" / "lines" / "build" / "lines-dwarf5"
    target = subprocess.Popen([str(program)], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        pid = target.pid
        times = interleaved_ms(
            {
                "eu-stack -i -s": ["eu-stack", "-i", "-s", "-p", str(pid)],
                "liveunwind --lines": [*PYTHON, "-m", "liveunwind", "pid", str(pid), "--lines"],
                "liveunwind": [*PYTHON, "-m", "liveunwind", "pid", str(pid)],
            }
        )
    finally:
        target.kill()
        target.wait()
    results = {name: statistics.median(values) for name, values in times.items()}
    ratio = results["liveunwind --lines"] / results["eu-stack -i -s"]
    for tool, values in times.items():
        print(
            f"{tool:20} median {results[tool]:6.1f} ms"
            f"  (min {min(values):.1f}, max {max(values):.1f})"
        )
    print(f"--lines / eu-stack -i -s = {ratio:.2f} (target ≤ 1.5)")
    summary = {"median_ms": results, "times_ms": times, "ratio": ratio}
    (ROOT / "bench" / "lines-results.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
