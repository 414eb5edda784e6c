"""`make bench`: `liveunwind perf` against `perf script` on one perf.data of ~10,000 samples.

The C benchmark target (bench/target.c: 9 threads 30 frames deep, one of
them busy, a heartbeat thread waking every 100 µs) is recorded by ``perf
record --call-graph dwarf -F 4000 --max-size 86M -p PID``: about 10,000
samples, however busy the machine.  On that file, in
turn, REPETITIONS times each: ``liveunwind perf FILE --collapsed-out``
(every sample unwound, counted, written; by default in one worker per idle
CPU), the same with ``--workers 1`` (one process) and ``--workers 2``,
``perf script -i FILE`` (every
sample unwound with its callchain, printed to /dev/null; perf's default
also looks up inlined calls in the DWARF) and ``perf script --no-inline``
(a line per real frame, as liveunwind without ``--lines``).  Wall
time and CPU time (user + system, of the command and its children) are
medians; the ratio is liveunwind's over perf script's.  Then every sample
is compared with perf script's walk of it (tests/support/perfscript.py):
equal, perf's shorter (ours went on to the end of the stack), or perf's
left the program.

Prints a table and writes bench/perfdata-results.json.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.perfscript import Compared  # noqa: E402

RATE = 4000
#: perf record stops when its file reaches this: about 10,000 samples of an 8 KiB stack copy.
MAX_SIZE = "86M"
#: ...or after this long, whichever comes first (on a busy machine the busy thread runs less).
SECONDS = 30
REPETITIONS = 5
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its children) of one run."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV, cwd=ROOT
    )
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise RuntimeError(f"{command[:3]} failed: {process.stderr.read()[:300]!r}")  # type: ignore[union-attr]
    return wall, usage.ru_utime + usage.ru_stime


def record(work: Path) -> tuple[Path, int]:
    """The perf.data of the C target, and how many samples it holds."""
    program = work / "target"
    subprocess.run(
        ["gcc", "-O2", "-g", "-pthread", "-o", str(program), str(ROOT / "bench" / "target.c")],
        check=True,
    )
    target = subprocess.Popen(
        [str(program), "9", "30", str(work / "heartbeat"), "busy"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        data = work / "perf.data"
        result = subprocess.run(
            ["perf", "record", "--call-graph", "dwarf", "-F", str(RATE), "--max-size", MAX_SIZE,
             "-p", str(target.pid), "-o", str(data), "--", "sleep", str(SECONDS)],
            capture_output=True, text=True,
        )  # fmt: skip  # at the size limit perf ends its command: not a failure
    finally:
        target.kill()
        target.wait()
    found = re.search(r"\((\d+) samples\)", result.stderr)
    if found is None:
        raise RuntimeError(f"perf record failed: {result.stderr[-300:]}")
    return data, int(found.group(1))


def main() -> int:
    if shutil.which("perf") is None:
        print("perf is not installed (Debian: apt-get install linux-perf): skipped")
        return 0
    load_at_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="liveunwind-bench-perfdata-"))
    try:
        data, samples = record(work)
        ours = [sys.executable, "-m", "liveunwind", "perf", str(data)]
        ours += ["--collapsed-out", str(work / "folded.txt")]
        commands = {
            "liveunwind perf": ours,
            "liveunwind perf --workers 1": [*ours, "--workers", "1"],
            "liveunwind perf --workers 2": [*ours, "--workers", "2"],
            "perf script": ["perf", "script", "-i", str(data)],
            "perf script --no-inline": ["perf", "script", "--no-inline", "-i", str(data)],
        }
        runs: dict[str, list[tuple[float, float]]] = {tool: [] for tool in commands}
        for _ in range(REPETITIONS):  # in turn: the machine's load falls on each alike
            for tool, command in commands.items():
                runs[tool].append(timed(command))
        compared = Compared(data, {"target"})
        kinds = dict(compared.kinds + compared.startup)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {
        tool: {
            "wall": statistics.median(wall for wall, _ in values),
            "cpu": statistics.median(cpu for _, cpu in values),
        }
        for tool, values in runs.items()
    }
    ours_m, theirs_m = medians["liveunwind perf"], medians["perf script"]
    plain = medians["perf script --no-inline"]
    results = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"Linux {platform.release()}, Python {platform.python_version()}",
        "samples": samples,
        "repetitions": REPETITIONS,
        "medians": medians,
        "wall_ratio": ours_m["wall"] / theirs_m["wall"],
        "cpu_ratio": ours_m["cpu"] / theirs_m["cpu"],
        "wall_ratio_no_inline": ours_m["wall"] / plain["wall"],
        "cpu_ratio_no_inline": ours_m["cpu"] / plain["cpu"],
        "against_perf_script": kinds,
        "unexplained": compared.unexplained[:10],
        "load_average": {"start": load_at_start, "end": os.getloadavg()[0]},
    }
    (ROOT / "bench" / "perfdata-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"perf.data of {samples} samples (perf record --call-graph dwarf -F {RATE}), median of "
        f"{REPETITIONS}; load average {load_at_start:.1f} at the start, "
        f"{results['load_average']['end']:.1f} at the end"
    )
    for tool, median in medians.items():
        print(f"  {tool:28} wall {median['wall']:6.2f} s   CPU {median['cpu']:6.2f} s")
    print(
        f"  liveunwind / perf script: wall {results['wall_ratio']:.2f}x, CPU "
        f"{results['cpu_ratio']:.2f}x; / perf script --no-inline: wall "
        f"{results['wall_ratio_no_inline']:.2f}x, CPU {results['cpu_ratio_no_inline']:.2f}x"
    )
    print(f"  each sample against perf script's walk: {kinds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
