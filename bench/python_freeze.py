"""The freeze of ``liveunwind pid --python``, A/B across checkouts, interleaved.

Usage: python3 bench/python_freeze.py [--rounds N] [--no-rt] NAME=CHECKOUT[=FLAG...] ...

Starts bench/target.py's python target (8 threads x 20 Python frames and
the heartbeat thread whose longest gap is the freeze), then runs
``python -m liveunwind pid PID --stats`` from each CHECKOUT (its tree on
PYTHONPATH, with FLAGs such as ``--python``) in turn, round after round,
the order reversed every other round, so that a machine whose load changes
weighs on all of them alike; a first round, not counted, compiles each
checkout's bytecode (into a cache outside the trees).  Target and tool run under ``chrt -f 50``
(unless ``--no-rt``): on a machine shared with other work the scheduler
would otherwise put its own delays into the gap.  Prints, per variant, the
median heartbeat freeze (min-max), its ratio to the first variant, the
median wall time and the medians of the ``--stats`` phases of the stop.

Example: python3 bench/python_freeze.py main=/work/main=--python \
    mine=.=--python plain=.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = Path(__file__).with_name("target.py")
PYTHON_TARGET = "/usr/bin/python3"
#: The phases of the stop that --stats prints.
PHASES = ("attach", "copy", "python_copy", "detach", "freeze")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+", help="NAME=CHECKOUT[=FLAG...]")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-rt", action="store_true", help="run without chrt -f 50")
    arguments = parser.parse_args()
    variants = [variant.split("=") for variant in arguments.variants]
    if any(len(variant) < 2 for variant in variants):
        parser.error("each variant is NAME=CHECKOUT[=FLAG...]")
    rt = [] if arguments.no_rt else ["chrt", "-f", "50"]
    with tempfile.TemporaryDirectory(prefix="liveunwind-freeze-") as work:
        heartbeat = Path(work) / "heartbeat"
        heartbeat.write_bytes(bytes(16))
        target = subprocess.Popen(
            [*rt, PYTHON_TARGET, str(TARGET), "8", "20", str(heartbeat)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert target.stdout is not None
            if target.stdout.readline().strip() != "ready":
                print("the target did not start", file=sys.stderr)
                return 1
            time.sleep(0.5)  # let every thread park
            freezes, walls, phases = run_rounds(
                target.pid, heartbeat, variants, arguments.rounds, rt
            )
        finally:
            target.kill()
            target.wait()
    report(variants, freezes, walls, phases)
    return 0


def run_rounds(
    pid: int, heartbeat: Path, variants: list[list[str]], rounds: int, rt: list[str]
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, dict[str, list[float]]]]:
    """Each variant once per round: the heartbeat's longest gap, wall ms, --stats phases."""
    freezes: dict[str, list[float]] = {name: [] for name, *_ in variants}
    walls: dict[str, list[float]] = {name: [] for name, *_ in variants}
    phases: dict[str, dict[str, list[float]]] = {name: {} for name, *_ in variants}
    # Each checkout's bytecode goes to one cache outside the trees (none is written
    # into them), made by a first round that is not counted.
    environment = {
        key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"
    }
    environment["PYTHONPYCACHEPREFIX"] = str(heartbeat.parent / "pycache")
    for number in range(-1, rounds):
        order = variants if number % 2 == 0 else variants[::-1]
        for name, checkout, *flags in order:
            with open(heartbeat, "r+b") as stream:
                stream.write(struct.pack("d", 0.0))
            time.sleep(0.02)
            started = time.perf_counter()
            result = subprocess.run(
                [*rt, sys.executable, "-m", "liveunwind", "pid", str(pid), *flags, "--stats"],
                capture_output=True,
                text=True,
                env={**environment, "PYTHONPATH": str(Path(checkout).resolve())},
                cwd="/",  # python -m puts the working directory first on sys.path
                timeout=120,
            )
            wall = (time.perf_counter() - started) * 1000
            if result.returncode not in (0, 1):
                raise RuntimeError(f"{name} failed: {result.stderr[-300:]}")
            time.sleep(0.02)  # the heartbeat's next wake-up records the gap
            if number < 0:
                continue  # the warm-up round
            walls[name].append(wall)
            freezes[name].append(struct.unpack("d", heartbeat.read_bytes()[:8])[0])
            for phase, value in re.findall(r"(\w+) ([0-9.]+) ms", result.stderr):
                if phase in PHASES:
                    phases[name].setdefault(phase, []).append(float(value))
    return freezes, walls, phases


def report(
    variants: list[list[str]],
    freezes: dict[str, list[float]],
    walls: dict[str, list[float]],
    phases: dict[str, dict[str, list[float]]],
) -> None:
    first = statistics.median(freezes[variants[0][0]])
    print(
        f"{'variant':12} {'freeze ms (min-max)':>22} {'ratio':>6} {'wall ms':>8}"
        "  stop phases (medians, ms)"
    )
    for name, *_ in variants:
        values = freezes[name]
        median = statistics.median(values)
        stats = " ".join(
            f"{phase} {statistics.median(phases[name][phase]):.2f}"
            for phase in PHASES
            if phase in phases[name]
        )
        print(
            f"{name:12} {median:8.2f} ({min(values):.2f}-{max(values):.2f}) "
            f"{median / first:6.2f} {statistics.median(walls[name]):8.1f}  {stats}"
        )


if __name__ == "__main__":
    sys.exit(main())
