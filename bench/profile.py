"""`make bench`: `liveunwind profile` against `py-spy record` and `perf record -g`, at 100 Hz.

Targets: bench/target.c with 9 threads 30 frames deep, and python3 running
bench/target.py with 8 threads 20 Python frames deep, each with one thread
working instead of sleeping ("busy") and counting its chunks of work in a
shared file.  For every tool that applies, several times: the busy thread's
work rate while the tool samples the process at 100 Hz for DURATION
seconds (work per second over the whole run of the tool, start-up
included) against its rate unprofiled for DURATION seconds just before and
just after — the share it kept — and the rate the tool achieved, from the
tool's own output.

- liveunwind: ``profile --rate 100 --json --stats`` (its samples and the
  mean freeze per sample);
- py-spy (Python only): ``record --native``, which stops the process per
  sample as liveunwind does, and ``record --nonblocking``, which never stops
  it and reads Python frames only (py-spy refuses the two together); both
  with ``--idle --threads`` so every thread counts in every sample;
- perf: ``record -g -F 100``, which samples on-CPU threads in the kernel
  (frame pointers; the busy thread is most of its samples), where
  perf_event_open is allowed.

Prints a table and writes bench/profile-results.json.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATION = 5
RATE = 100
REPETITIONS = 3
PYTHON_TARGET = "/usr/bin/python3"
#: A tool's command, and what it reads from the finished run (rate, freeze).
Tool = tuple[list[str], Callable[[subprocess.CompletedProcess], dict]]


class Target:
    """A started target whose busy thread counts its work at offset 8 of ``counter``."""

    def __init__(self, name: str, command: list[str], counter: Path, python: bool) -> None:
        self.name = name
        self.counter = counter
        self.python = python
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.5)

    @property
    def pid(self) -> int:
        return self.process.pid

    def work(self) -> int:
        return struct.unpack_from("<Q", self.counter.read_bytes(), 8)[0]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def work_rate(
    target: Target, command: list[str] | None
) -> tuple[float, subprocess.CompletedProcess]:
    """The busy thread's work per second while ``command`` runs (or DURATION idle seconds)."""
    before, started = target.work(), time.perf_counter()
    if command is None:
        time.sleep(DURATION)
        result = subprocess.CompletedProcess([], 0, "", "")
    else:
        result = subprocess.run(command, capture_output=True, text=True, timeout=DURATION + 120)
    rate = (target.work() - before) / (time.perf_counter() - started)
    if result.returncode != 0:
        raise RuntimeError(f"{command} failed: {result.stderr[-500:]}")
    return rate, result


def liveunwind(pid: int) -> Tool:
    command = [
        sys.executable, "-m", "liveunwind", "profile", str(pid),
        "--duration", str(DURATION), "--rate", str(RATE), "--json", "--stats",
    ]  # fmt: skip

    def read(result: subprocess.CompletedProcess) -> dict:
        document = json.loads(result.stdout)
        freeze = re.search(r"freeze ([\d.]+) ms", result.stderr)
        return {
            "rate": document["rate"],
            "freeze_ms": float(freeze.group(1)) if freeze else None,
        }

    return command, read


def py_spy(pid: int, work: Path, mode: str) -> Tool:
    out = work / f"py-spy-{mode}.txt"
    command = [
        "py-spy", "record", f"--{mode}", "--idle", "--threads", "--rate", str(RATE),
        "--duration", str(DURATION), "--pid", str(pid), "--format", "raw", "-o", str(out),
    ]  # fmt: skip

    def read(result: subprocess.CompletedProcess) -> dict:
        per_thread: dict[str, int] = {}
        for line in out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            thread = stack.partition(";")[0]
            per_thread[thread] = per_thread.get(thread, 0) + int(count)
        return {"rate": max(per_thread.values(), default=0) / DURATION}

    return command, read


def perf(pid: int, work: Path) -> Tool:
    out = work / "perf.data"
    command = [
        "perf", "record", "-g", "-F", str(RATE), "-p", str(pid), "-o", str(out),
        "--", "sleep", str(DURATION),
    ]  # fmt: skip

    def read(result: subprocess.CompletedProcess) -> dict:
        found = re.search(r"\((\d+) samples\)", result.stderr)
        return {"rate": int(found.group(1)) / DURATION if found else None}

    return command, read


def perf_unavailable(work: Path) -> str | None:
    """Why ``perf record`` cannot run here, or None if it can."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: apt-get install linux-perf)"
    probe = subprocess.run(
        ["perf", "record", "-g", "-o", str(work / "probe.data"), "--", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"perf record fails here: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def tools(target: Target, work: Path, skipped: dict[str, str]) -> dict[str, Tool]:
    found = {"liveunwind profile": liveunwind(target.pid)}
    if target.python:
        if shutil.which("py-spy"):
            found["py-spy record --native"] = py_spy(target.pid, work, "native")
            found["py-spy record --nonblocking"] = py_spy(target.pid, work, "nonblocking")
        else:
            skipped["py-spy"] = "py-spy is not installed (pip install py-spy)"
    if "perf" not in skipped:
        found["perf record -g"] = perf(target.pid, work)
    return found


def bench_target(target: Target, work: Path, skipped: dict[str, str]) -> dict:
    """Unprofiled and profiled runs in turn; each profiled one against the runs either side.

    The machine's other work changes over minutes; comparing each profiled
    run with the unprofiled runs just before and after it cancels most of that.
    """
    rows: dict[str, dict[str, list]] = {}
    before, _ = work_rate(target, None)
    for _ in range(REPETITIONS):
        for tool, (command, read) in tools(target, work, skipped).items():
            profiled, result = work_rate(target, command)
            after, _ = work_rate(target, None)
            alone = (before + after) / 2
            before = after
            row = rows.setdefault(tool, {"kept": [], "rate": [], "freeze_ms": []})
            row["kept"].append(profiled / alone)
            measured = read(result)
            for key, value in measured.items():
                if value is not None:
                    row[key].append(value)
            print(f"  {tool}: kept {profiled / alone:.0%}, {measured}", flush=True)
    return {
        tool: {key: statistics.median(values) for key, values in row.items() if values}
        for tool, row in rows.items()
    }


def format_table(results: dict) -> str:
    lines = [
        f"machine: {results['machine']}",
        f"{RATE} Hz asked, {DURATION} s per run, median of {REPETITIONS} runs",
        "",
        f"{'target':42} {'tool':30} {'rate Hz':>8} {'work kept':>10} {'freeze ms':>10}",
    ]
    for name, rows in results["targets"].items():
        for tool, row in rows.items():
            rate = f"{row['rate']:.1f}" if "rate" in row else "-"
            freeze = f"{row['freeze_ms']:.2f}" if "freeze_ms" in row else "-"
            lines.append(f"{name:42} {tool:30} {rate:>8} {row['kept']:>10.0%} {freeze:>10}")
            name = ""
    lines += [f"{tool}: {reason}" for tool, reason in results["skipped"].items()]
    return "\n".join(lines)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="liveunwind-bench-profile-"))
    c_target = work / "target"
    subprocess.run(
        ["gcc", "-O2", "-g", "-pthread", "-o", str(c_target), str(ROOT / "bench" / "target.c")],
        check=True,
    )
    skipped: dict[str, str] = {"py-spy (C target)": "not a Python process"}
    reason = perf_unavailable(work)
    if reason is not None:
        skipped["perf"] = reason
    results: dict = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"Linux {platform.release()}, Python {platform.python_version()}",
        "targets": {},
        "skipped": skipped,
    }
    scenarios = [
        ("C, 9 threads x 30 frames, 1 busy", [str(c_target), "9", "30"], False),
        (
            "python3, 8 threads x 20 Python frames, 1 busy",
            [PYTHON_TARGET, str(ROOT / "bench" / "target.py"), "8", "20"],
            True,
        ),
    ]
    try:
        for name, command, python in scenarios:
            counter = work / f"counter-{len(results['targets'])}"
            target = Target(name, [*command, str(counter), "busy"], counter, python)
            try:
                print(f"== {name} (pid {target.pid})", flush=True)
                results["targets"][name] = bench_target(target, work, skipped)
            finally:
                target.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (ROOT / "bench" / "profile-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
