"""The cold command beside eu-stack, and many processes in one run (issue 28).

Three measurements, each taking turns with its peer in the same loop, so a
busy machine slows both alike; each reports the median wall time and the
median CPU time (user + system of the command and every process it waited
for), which another job's time slices do not inflate:

- **cold**: ``liveunwind pid PID`` against ``eu-stack -p PID`` on one target;
- **many**: COUNT copies of the C target (9 threads each, the heartbeat
  quiet): one ``liveunwind pid --name`` run against a shell loop of
  ``eu-stack -p`` over the same pids, and against a shell loop of
  ``liveunwind pid``;
- **all**: ``liveunwind pid --all`` against a shell loop of ``eu-stack -p``
  over the processes it backtraced (counted, with their threads).

Run alone: ``python bench/coldstart.py LIVEUNWIND_COMMAND [PID]`` (the many
part when ``LIVEUNWIND_BENCH_TARGET`` names the built C target), or only the
many part: ``python bench/coldstart.py --many LIVEUNWIND_COMMAND [COUNT]``,
which builds bench/target.c itself; bench/run.py calls it on its targets with
the copy it installed.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Rounds of the cold command (each runs both tools once, after one warm-up each).
COLD_ROUNDS = 21
#: Rounds of the many-process and --all measurements.
MANY_ROUNDS = 3
#: Copies of the C target started for the many-process measurement.
MANY_COUNT = 100


def timed(command: list[str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run of ``command``, its output thrown away.

    No timeout: ``subprocess`` waits for a child with a timeout by polling,
    sleeping 0.5, 1, 2 … up to 50 ms between polls, which added up to 64 ms
    to a command of 40.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall * 1e3, cpu * 1e3


def alternate(commands: dict[str, list[str]], rounds: int, *, warm_up: bool = True) -> dict:
    """Each command once per round, in turn; medians and minimums of wall and CPU ms."""
    if warm_up:
        for command in commands.values():
            timed(command)
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            wall, cpu = timed(command)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {
        name: {
            "wall_ms": statistics.median(walls[name]),
            "wall_min_ms": min(walls[name]),
            "cpu_ms": statistics.median(cpus[name]),
        }
        for name in commands
    }


def load() -> str:
    """The load averages of /proc/loadavg, to be said beside the figures."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cold(liveunwind: list[str], pid: int, rounds: int = COLD_ROUNDS) -> dict:
    """A cold ``liveunwind pid`` against ``eu-stack -p`` on one process, taking turns."""
    rows = alternate(
        {"liveunwind": [*liveunwind, "pid", str(pid)], "eu-stack": ["eu-stack", "-p", str(pid)]},
        rounds,
    )
    return {"rows": rows, "load": load(), "rounds": rounds}


def _shell_loop(command: list[str], pids: list[int]) -> list[str]:
    """A shell loop running ``command PID`` for each pid, one after the other."""
    each = " ".join(str(pid) for pid in pids)
    return ["sh", "-c", f"for p in {each}; do {shlex.join(command)} $p >/dev/null 2>&1; done"]


def many(liveunwind: list[str], target: str, count: int = MANY_COUNT) -> dict:
    """COUNT quiet copies of the C target: one run by name against shell loops over them."""
    work = Path(tempfile.mkdtemp(prefix="liveunwind-many-"))
    program = work / "manytarget"  # a name no other process has: --name finds exactly these
    program.write_bytes(Path(target).read_bytes())
    program.chmod(0o755)
    processes = []
    try:
        for index in range(count):
            process = subprocess.Popen(
                [str(program), "9", "30", str(work / f"heartbeat-{index}"), "quiet"],
                stdout=subprocess.PIPE,
                text=True,
            )
            processes.append(process)
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a copy of the C target did not start")
        time.sleep(0.5)
        pids = [process.pid for process in processes]
        rows = alternate(
            {
                "liveunwind --name": [*liveunwind, "pid", "--name", "^manytarget$"],
                "eu-stack loop": _shell_loop(["eu-stack", "-p"], pids),
                "liveunwind loop": _shell_loop([*liveunwind, "pid"], pids),
            },
            MANY_ROUNDS,
            warm_up=False,
        )
        return {"processes": count, "threads_each": 9, "rows": rows, "load": load()}
    finally:
        for process in processes:
            process.kill()
            process.wait()
        for path in work.iterdir():
            path.unlink()
        work.rmdir()


def every_process(liveunwind: list[str]) -> dict:
    """``liveunwind pid --all`` against a shell loop of eu-stack over the processes it listed."""
    result = subprocess.run(
        [*liveunwind, "pid", "--all", "--json"], capture_output=True, text=True, timeout=900
    )
    document = json.loads(result.stdout)
    backtraced = [entry for entry in document["processes"] if entry.get("backtrace")]
    pids = [entry["pid"] for entry in backtraced]
    threads = sum(len(entry["backtrace"]["threads"]) for entry in backtraced)
    rows = alternate(
        {
            "liveunwind --all": [*liveunwind, "pid", "--all"],
            "eu-stack loop": _shell_loop(["eu-stack", "-p"], pids),
        },
        MANY_ROUNDS,
        warm_up=False,
    )
    return {"processes": len(pids), "threads": threads, "rows": rows, "load": load()}


def format_rows(title: str, result: dict) -> str:
    """One measurement as lines: each command's medians and its ratios to the first row's."""
    rows = result["rows"]
    first = next(iter(rows.values()))
    extra = ", ".join(
        f"{key} {value}" for key, value in result.items() if key not in ("rows", "load")
    )
    lines = [f"{title} ({extra}; load {result['load']})"]
    for name, row in rows.items():
        lines.append(
            f"  {name:20} wall {row['wall_ms']:8.1f} ms (min {row['wall_min_ms']:7.1f})"
            f"  cpu {row['cpu_ms']:8.1f} ms"
            f"  first/this: wall {first['wall_ms'] / row['wall_ms']:.2f}"
            f" cpu {first['cpu_ms'] / row['cpu_ms']:.2f}"
        )
    return "\n".join(lines)


def many_only(liveunwind: list[str], count: int) -> int:
    """``--many``: the many-process measurement alone, on bench/target.c built here."""
    with tempfile.TemporaryDirectory(prefix="liveunwind-many-build-") as work:
        target = str(Path(work) / "target")
        source = str(Path(__file__).with_name("target.c"))
        subprocess.run(["gcc", "-O2", "-g", "-pthread", "-o", target, source], check=True)
        print(format_rows("many processes", many(liveunwind, target, count)))
    return 0


def main() -> int:
    if sys.argv[1] == "--many":
        count = int(sys.argv[3]) if len(sys.argv) > 3 else MANY_COUNT
        return many_only(shlex.split(sys.argv[2]), count)
    liveunwind = shlex.split(sys.argv[1])
    if len(sys.argv) > 2:
        print(format_rows("cold liveunwind pid", cold(liveunwind, int(sys.argv[2]))))
    target = os.environ.get("LIVEUNWIND_BENCH_TARGET")
    if target:
        print(format_rows("many processes", many(liveunwind, target)))
    print(format_rows("every process (--all)", every_process(liveunwind)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
