"""`make bench`: `liveunwind profile` against `py-spy record` and `perf record -g`, at 100 Hz.

Targets: bench/target.c with 9 threads 30 frames deep (and with 200: the
freeze of one sample of many threads), and python3 running
bench/target.py with 8 threads 20 Python frames deep, each with one thread
working instead of sleeping ("busy") and counting its chunks of work in a
shared file.  For every tool that applies, several times, the tool
samples the process at 100 Hz for DURATION seconds, between two unprofiled
runs as long; over the whole run of the tool (start-up included):

- rate: the samples per second the tool achieved, from its own output;
- kept: the busy thread's work per second against the unprofiled runs';
- free CPU: what it keeps when only the tool takes from it — the time it
  was stopped beyond the unprofiled runs' ("stopped", read from its
  scheduler clock: neither running nor waiting for a CPU) and the work it
  does per CPU second (caches the tool disturbs).  On a machine busy with
  other work "kept" measures that work as much as the tool; "free CPU" does
  not change with it;
- tool CPU: the CPU time the tool used, per second.

- liveunwind: ``profile --rate 100 --json --stats`` (its samples and the
  mean freeze per sample); with ``BENCH_PEER=DIR`` the checkout in DIR too,
  in turn with this one;
- py-spy (Python only): ``record --native``, which stops the process per
  sample as liveunwind does, and ``record --nonblocking``, which never stops
  it and reads Python frames only (py-spy refuses the two together); both
  with ``--idle --threads`` so every thread counts in every sample;
- perf: ``record -g -F 100``, which samples on-CPU threads in the kernel
  (frame pointers; the busy thread is most of its samples), where
  perf_event_open is allowed;
- the on-CPU mode, which never stops the process: ``liveunwind profile
  --on-cpu`` (recording and unwinding, as one command) against ``perf record
  --call-graph dwarf`` followed by ``perf script`` on what it recorded (the
  same kind of samples, unwound by perf's libdw): "tool CPU s" is the whole
  CPU time of each, recording, unwinding and writing.

``--only WORD[,WORD...]`` runs only the tools whose name contains one of
them, ``--targets WORD[,WORD...]`` only the targets whose name does (``"9
threads"``: the C target of 9 threads); either writes no results file.

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


def _words(flag: str) -> list[str]:
    """The words given after ``flag`` (``FLAG WORD[,WORD...]``); [""], which every name
    holds, when the flag is not given."""
    return sys.argv[sys.argv.index(flag) + 1].split(",") if flag in sys.argv[:-1] else [""]


#: ``--only WORD[,WORD...]``: the tools whose name holds one of them (by default every tool).
ONLY = _words("--only")
#: ``--targets WORD[,WORD...]``: the targets whose name holds one of them (by default all).
TARGETS = _words("--targets")
PYTHON_TARGET = "/usr/bin/python3"
#: Another checkout of liveunwind (``BENCH_PEER=DIR``, e.g. ``git worktree add DIR main``)
#: profiled in turn with this one, in the same runs: a change measured against what it
#: changed, under the same load.
PEER = Path(os.environ["BENCH_PEER"]).resolve() if os.environ.get("BENCH_PEER") else None
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
        self.busy_tid = self._busiest_thread()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _busiest_thread(self) -> int:
        tids = [int(entry) for entry in os.listdir(f"/proc/{self.pid}/task")]
        first = {tid: self._schedstat(tid)[0] for tid in tids}
        time.sleep(0.5)
        return max(tids, key=lambda tid: self._schedstat(tid)[0] - first[tid])

    def _schedstat(self, tid: int) -> tuple[int, int]:
        """Nanoseconds the thread ran, and waited for a CPU."""
        fields = Path(f"/proc/{self.pid}/task/{tid}/schedstat").read_text().split()
        return int(fields[0]), int(fields[1])

    def reading(self) -> tuple[float, int, int, int]:
        """Now: wall clock, work done, and the busy thread's run and CPU-wait nanoseconds."""
        ran, waited = self._schedstat(self.busy_tid)
        return (
            time.perf_counter(),
            struct.unpack_from("<Q", self.counter.read_bytes(), 8)[0],
            ran,
            waited,
        )

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Window:
    """The busy thread over one run: work per second, work per CPU second, and time stopped.

    ``stopped`` is the share of the wall time the thread neither ran nor
    waited for a CPU: a thread that never sleeps is then stopped by the tool
    (or, in python3, waiting for the GIL — which the unprofiled runs show).
    Unlike the work rate, neither it nor the work per CPU second changes
    with the machine's other work.
    """

    def __init__(self, before: tuple[float, int, int, int], after: tuple[float, int, int, int]):
        wall = after[0] - before[0]
        ran, waited = (after[2] - before[2]) / 1e9, (after[3] - before[3]) / 1e9
        self.rate = (after[1] - before[1]) / wall
        self.per_cpu_second = (after[1] - before[1]) / ran if ran > 0 else 0.0
        self.stopped = max(0.0, 1.0 - (ran + waited) / wall)
        self.wall = wall


def measure(
    target: Target, command: list[str] | None
) -> tuple[Window, float, subprocess.CompletedProcess]:
    """The busy thread while ``command`` runs (or DURATION idle seconds); the tool's CPU share."""
    before = target.reading()
    children = os.times()
    if command is None:
        time.sleep(DURATION)
        result = subprocess.CompletedProcess([], 0, "", "")
    else:
        result = subprocess.run(command, capture_output=True, text=True, timeout=DURATION + 120)
    after = target.reading()
    if result.returncode != 0:
        raise RuntimeError(f"{command} failed: {result.stderr[-500:]}")
    used = os.times()
    cpu = (used.children_user - children.children_user) + (
        used.children_system - children.children_system
    )
    return Window(before, after), cpu / (after[0] - before[0]), result


def liveunwind(pid: int, checkout: Path = ROOT) -> Tool:
    """``liveunwind profile`` of ``checkout`` (this one, or the peer it is compared with)."""
    command = [
        "env", f"PYTHONPATH={checkout}", sys.executable, "-P", "-m", "liveunwind", "profile",
        str(pid), "--duration", str(DURATION), "--rate", str(RATE), "--json", "--stats",
    ]  # fmt: skip

    def read(result: subprocess.CompletedProcess) -> dict:
        document = json.loads(result.stdout)
        freeze = re.search(r"freeze ([\d.]+) ms", result.stderr)
        return {
            "rate": document["rate"],
            "freeze_ms": float(freeze.group(1)) if freeze else None,
        }

    return command, read


def liveunwind_on_cpu(pid: int) -> Tool:
    command = [
        sys.executable, "-m", "liveunwind", "profile", str(pid), "--on-cpu",
        "--duration", str(DURATION), "--rate", str(RATE), "--json",
    ]  # fmt: skip

    def read(result: subprocess.CompletedProcess) -> dict:
        return {"rate": json.loads(result.stdout)["rate"]}

    return command, read


def perf_dwarf_script(pid: int, work: Path) -> Tool:
    """``perf record --call-graph dwarf`` for DURATION seconds, then ``perf script`` on it."""
    data, script = work / "perf-dwarf.data", work / "perf-dwarf.txt"
    command = [
        "sh", "-c",
        f"perf record -q --call-graph dwarf -F {RATE} -p {pid} -o {data} -- sleep {DURATION}"
        f" && perf script -i {data} > {script}",
    ]  # fmt: skip

    def read(result: subprocess.CompletedProcess) -> dict:
        samples = sum(1 for block in script.read_text().split("\n\n") if block.strip())
        return {"rate": samples / DURATION}

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
    if PEER is not None:
        found["liveunwind profile (peer)"] = liveunwind(target.pid, PEER)
    if target.python:
        if shutil.which("py-spy"):
            found["py-spy record --native"] = py_spy(target.pid, work, "native")
            found["py-spy record --nonblocking"] = py_spy(target.pid, work, "nonblocking")
        else:
            skipped["py-spy"] = "py-spy is not installed (pip install py-spy)"
    found["liveunwind profile --on-cpu"] = liveunwind_on_cpu(target.pid)
    if "perf" not in skipped:
        found["perf record -g"] = perf(target.pid, work)
        found["perf record dwarf + script"] = perf_dwarf_script(target.pid, work)
    return {name: tool for name, tool in found.items() if any(word in name for word in ONLY)}


def bench_target(target: Target, work: Path, skipped: dict[str, str]) -> dict:
    """Unprofiled and profiled runs in turn; each profiled one against the runs either side.

    ``kept`` is the work rate against the unprofiled runs just before and
    after (the machine's other work changes it from run to run); ``kept on a
    free CPU`` is what the busy thread keeps when only the tool takes from
    it — the time it was stopped beyond the unprofiled runs', and the work
    it does per CPU second — which other work on the machine does not change.
    """
    rows: dict[str, dict[str, list]] = {}
    previous, _, _ = measure(target, None)
    for _ in range(REPETITIONS):
        for tool, (command, read) in tools(target, work, skipped).items():
            profiled, cpu, result = measure(target, command)
            following, _, _ = measure(target, None)
            alone = [previous, following]
            previous = following
            rate = sum(window.rate for window in alone) / 2
            per_cpu = sum(window.per_cpu_second for window in alone) / 2
            stopped = profiled.stopped - sum(window.stopped for window in alone) / 2
            measured = {
                "kept": profiled.rate / rate,
                "kept_free_cpu": (1 - max(stopped, 0.0)) * profiled.per_cpu_second / per_cpu,
                "stopped": max(stopped, 0.0),
                "tool_cpu": cpu,
                "tool_cpu_seconds": cpu * profiled.wall,
                **read(result),
            }
            row = rows.setdefault(tool, {})
            for key, value in measured.items():
                if value is not None:
                    row.setdefault(key, []).append(value)
            shown = {key: round(value, 3) for key, value in measured.items() if value is not None}
            print(f"  {tool}: {shown}", flush=True)
    return {
        tool: {key: statistics.median(values) for key, values in row.items()}
        for tool, row in rows.items()
    }


def format_table(results: dict) -> str:
    load = results["load_average"]
    lines = [
        f"machine: {results['machine']}",
        f"{RATE} Hz asked, {DURATION} s per run, median of {REPETITIONS} runs; load average "
        f"{load['start']:.1f} at the start, {load['end']:.1f} at the end",
        "",
        f"{'target':46} {'tool':28} {'rate Hz':>7} {'kept':>5} {'free CPU':>8} "
        f"{'stopped':>7} {'tool CPU':>8} {'tool CPU s':>10} {'freeze ms':>9}",
    ]
    for name, rows in results["targets"].items():
        for tool, row in rows.items():
            rate = f"{row['rate']:.1f}" if "rate" in row else "-"
            freeze = f"{row['freeze_ms']:.2f}" if "freeze_ms" in row else "-"
            lines.append(
                f"{name:46} {tool:28} {rate:>7} {row['kept']:>5.0%} {row['kept_free_cpu']:>8.0%} "
                f"{row['stopped']:>7.1%} {row['tool_cpu']:>8.0%} "
                f"{row['tool_cpu_seconds']:>10.2f} {freeze:>9}"
            )
            name = ""
    lines += [f"{tool}: {reason}" for tool, reason in results["skipped"].items()]
    return "\n".join(lines)


def main() -> int:
    load_at_start = os.getloadavg()[0]
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
        ("C, 200 threads x 30 frames, 1 busy", [str(c_target), "200", "30"], False),
        (
            "python3, 8 threads x 20 Python frames, 1 busy",
            [PYTHON_TARGET, str(ROOT / "bench" / "target.py"), "8", "20"],
            True,
        ),
    ]
    scenarios = [scenario for scenario in scenarios if any(w in scenario[0] for w in TARGETS)]
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
    results["load_average"] = {"start": load_at_start, "end": os.getloadavg()[0]}
    if ONLY == [""] and TARGETS == [""]:
        (ROOT / "bench" / "profile-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
