"""`make bench`: liveunwind against eu-stack, gdb, pystack and py-spy, measured in one run.

Targets (built or started here): a C program with 9 threads 30 frames deep,
the same with 64 and 200 threads, python3 with 8 threads 20 Python frames deep,
and a core of the python3 one.  Then the cold command beside eu-stack, taking turns
(bench/coldstart.py), on the C target and on CPython 3.11 built from Debian's
source with an unstripped libpython3.11.so (bench/shared-python.sh builds it
once), 100 copies of the C target by ``--name`` and ``--all`` beside shell
loops.  On the python3 targets ``liveunwind --python`` runs beside
``pystack --native``, the two that merge Python frames into the native
stack. For each tool that applies: the wall time of the
whole command and the freeze it caused (the longest gap a heartbeat thread
inside the target saw), several repetitions, median and spread. Then warm
frames per second of ``liveunwind pid --repeat``, and a check that
liveunwind's frames equal gdb's on the C target. Prints a table and writes
bench/results.json.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import coldstart  # noqa: E402
from bench.breakdown import breakdown, format_breakdown  # noqa: E402

#: The tools run as subprocesses, with liveunwind as a user has it (see install_liveunwind).
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
REPETITIONS = 7
PYTHON_TARGET = "/usr/bin/python3"
GDB_ALL_THREADS = ["gdb", "-batch", "-nx", "-ex", "thread apply all bt"]


class Target:
    """A started benchmark target with its heartbeat file."""

    def __init__(self, name: str, command: list[str], heartbeat: Path) -> None:
        self.name = name
        self.heartbeat = heartbeat
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.5)  # let every thread park

    @property
    def pid(self) -> int:
        return self.process.pid

    def reset_gap(self) -> None:
        with open(self.heartbeat, "r+b") as stream:
            stream.write(struct.pack("d", 0.0))
        time.sleep(0.02)

    def longest_gap_ms(self) -> float:
        time.sleep(0.02)
        return struct.unpack("d", self.heartbeat.read_bytes()[:8])[0]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def measure(target: Target | None, command: list[str]) -> tuple[float, float | None]:
    """(wall seconds, freeze ms or None) of one run of ``command``."""
    if target is not None:
        target.reset_gap()
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, timeout=600, env=ENV)
    wall = time.perf_counter() - started
    if result.returncode not in (0, 1):
        raise RuntimeError(f"{command[0]} failed: {result.stderr.decode()[:300]}")
    return wall, (target.longest_gap_ms() if target is not None else None)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def install_liveunwind(work: Path) -> list[str]:
    """Installs this checkout into a fresh venv, as ``pip install`` does for a user; its command.

    A user's install has compiled bytecode and a plain console script; the
    development venv has neither when PYTHONDONTWRITEBYTECODE is set, and its
    editable-install finder alone costs about 10 ms at every start.  Runtime
    dependencies are left out: none of them is imported on the paths timed here.
    """
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run([*pip, "install", "-q", "--no-deps", str(ROOT)], check=True)
    return [str(venv / "bin" / "liveunwind")]


#: The installed liveunwind command; set by main() before anything is measured.
LIVEUNWIND: list[str] = []


def tools_for(pid_or_core: str, kind: str, python: bool) -> dict[str, list[str]]:
    """The command of every available tool for a live pid or a core."""
    liveunwind = LIVEUNWIND
    commands: dict[str, list[str]] = {}
    if kind == "pid":
        commands["liveunwind"] = [*liveunwind, "pid", pid_or_core]
        if shutil.which("eu-stack"):
            commands["eu-stack"] = ["eu-stack", "-p", pid_or_core]
        if shutil.which("gdb"):
            commands["gdb"] = [*GDB_ALL_THREADS, "-p", pid_or_core]
        if python:
            commands["liveunwind --python"] = [*liveunwind, "pid", pid_or_core, "--python"]
            commands["liveunwind --locals"] = [*liveunwind, "pid", pid_or_core, "--locals"]
        if python and shutil.which("pystack"):
            commands["pystack"] = ["pystack", "remote", "--native-all", pid_or_core]
            commands["pystack --native"] = ["pystack", "remote", "--native", pid_or_core]
            commands["pystack --native --locals"] = [
                "pystack", "remote", "--native", "--locals", pid_or_core
            ]  # fmt: skip
        if python and shutil.which("py-spy"):
            commands["py-spy"] = ["py-spy", "dump", "--native", "--pid", pid_or_core]
    else:
        commands["liveunwind"] = [*liveunwind, "core", pid_or_core]
        commands["liveunwind --python"] = [*liveunwind, "core", pid_or_core, "--python"]
        if shutil.which("eu-stack"):
            commands["eu-stack"] = ["eu-stack", "--core", pid_or_core, "-e", PYTHON_TARGET]
        if shutil.which("gdb"):
            commands["gdb"] = [*GDB_ALL_THREADS, PYTHON_TARGET, pid_or_core]
        if shutil.which("pystack"):
            commands["pystack"] = ["pystack", "core", "--native-all", pid_or_core, PYTHON_TARGET]
            commands["pystack --native"] = [
                "pystack", "core", "--native", pid_or_core, PYTHON_TARGET
            ]  # fmt: skip
    return commands


def bench_scenario(name: str, target: Target | None, subject: str, kind: str, python: bool) -> dict:
    rows = {}
    for tool, command in tools_for(subject, kind, python).items():
        measure(target, command)  # warm the page cache once; not counted
        walls, freezes = [], []
        for _ in range(REPETITIONS):
            wall, freeze = measure(target, command)
            walls.append(wall)
            if freeze is not None:
                freezes.append(freeze)
        rows[tool] = {"wall_s": summary(walls)}
        if freezes:
            rows[tool]["freeze_ms"] = summary(freezes)
    return rows


def warm_frames_per_second(pid: int) -> float:
    """Median frames per second of the warm backtraces of ``liveunwind pid --repeat``."""
    command = [*LIVEUNWIND, "pid", str(pid), "--repeat", "30"]
    result = subprocess.run(
        [*command, "--collapsed", "--stats"], capture_output=True, text=True, timeout=600, env=ENV
    )
    rates = [
        float(line.rsplit(" frames/s", 1)[0].rsplit(", ", 1)[1].replace(",", ""))
        for line in result.stderr.splitlines()
        if "frames/s" in line
    ]
    if len(rates) < 2:
        raise RuntimeError(f"liveunwind --repeat failed: {result.stderr[-500:]}")
    return statistics.median(rates[1:])


def frames_equal_gdb(pid: int) -> bool:
    import liveunwind
    from tests.support.oracles import gdb_backtraces, pcs

    ours = {t.tid: [f.pc for f in t.frames] for t in liveunwind.attach(pid).threads}
    theirs = {tid: pcs(frames) for tid, frames in gdb_backtraces(pid).items()}
    return ours == theirs


def python_start_seconds() -> float:
    """Median start-up of the interpreter liveunwind runs on, doing nothing."""
    python = str(Path(LIVEUNWIND[0]).with_name("python"))
    walls = []
    for _ in range(REPETITIONS):
        started = time.perf_counter()
        subprocess.run([python, "-c", "pass"], check=True)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="liveunwind-bench-"))
    LIVEUNWIND[:] = install_liveunwind(work)
    c_target = work / "target"
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-g",
            "-pthread",
            "-o",
            str(c_target),
            str(Path(__file__).with_name("target.c")),
        ],
        check=True,
    )
    results: dict = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"Linux {platform.release()}, Python {platform.python_version()}",
        "python_start_s": python_start_seconds(),
        "scenarios": {},
    }
    scenarios = [
        ("C, 9 threads x 30 frames", [str(c_target), "9", "30"], False),
        ("C, 64 threads x 30 frames", [str(c_target), "64", "30"], False),
        ("C, 200 threads x 30 frames", [str(c_target), "200", "30"], False),
        (
            "python3, 8 threads x 20 Python frames",
            [PYTHON_TARGET, str(Path(__file__).with_name("target.py")), "8", "20"],
            True,
        ),
    ]
    for name, command, python in scenarios:
        heartbeat = work / f"heartbeat-{len(results['scenarios'])}"
        heartbeat.write_bytes(bytes(8))
        target = Target(name, [*command, str(heartbeat)], heartbeat)
        try:
            print(f"== {name} (pid {target.pid})", flush=True)
            entry = {"tools": bench_scenario(name, target, str(target.pid), "pid", python)}
            entry["warm_frames_per_s"] = warm_frames_per_second(target.pid)
            if not python:
                entry["frames_equal_gdb"] = frames_equal_gdb(target.pid)
            if "cold_breakdown" not in results:
                results["cold_breakdown"] = breakdown(LIVEUNWIND, target.pid)
            results["scenarios"][name] = entry
            if python:
                core = work / "python.core"
                subprocess.run(
                    ["gdb", "-batch", "-nx", "-ex", f"gcore {core}", "-p", str(target.pid)],
                    capture_output=True,
                    check=True,
                )
                print("== core of the python3 target", flush=True)
                results["scenarios"]["core of the python3 target"] = {
                    "tools": bench_scenario("core", None, str(core), "core", True)
                }
        finally:
            target.stop()
    results["cold_start"] = cold_start(work, c_target)
    out = Path(__file__).with_name("results.json")
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(format_table(results))
    print(f"\ncold liveunwind pid, layer by layer ({scenarios[0][0]}):")
    print(format_breakdown(results["cold_breakdown"]))
    for title, entry in results["cold_start"].items():
        print(coldstart.format_rows(title, entry))
    shutil.rmtree(work, ignore_errors=True)
    return 0


def shared_python() -> str | None:
    """CPython 3.11 from Debian's source with an unstripped libpython3.11.so (built once)."""
    build = subprocess.run(
        [str(Path(__file__).with_name("shared-python.sh"))], capture_output=True, text=True
    )
    if build.returncode != 0:
        print(f"skipping the CPython-from-source target: {build.stderr.strip()}", flush=True)
        return None
    return str(Path(build.stdout.strip()) / "bin" / "python3.11")


def cold_start(work: Path, c_target: Path) -> dict:
    """bench/coldstart.py's measurements: cold command, many processes, every process."""
    found: dict = {}
    targets = [("cold pid, C, 9 threads x 30 frames", [str(c_target), "9", "30"])]
    python = shared_python()
    if python is not None:
        script = str(Path(__file__).with_name("target.py"))
        targets.append(("cold pid, CPython 3.11 from source (libpython3.11.so)",
                        [python, script, "8", "20"]))  # fmt: skip
    for title, command in targets:
        heartbeat = work / f"heartbeat-cold-{len(found)}"
        heartbeat.write_bytes(bytes(16))
        target = Target(title, [*command, str(heartbeat)], heartbeat)
        try:
            print(f"== {title} (pid {target.pid})", flush=True)
            found[title] = coldstart.cold(LIVEUNWIND, target.pid)
        finally:
            target.stop()
    print("== 100 processes of the C target", flush=True)
    found["100 processes of the C target (9 threads each)"] = coldstart.many(
        LIVEUNWIND, str(c_target)
    )
    print("== every process of this machine", flush=True)
    found["every process (--all)"] = coldstart.every_process(LIVEUNWIND)
    return found


def format_table(results: dict) -> str:
    """The results as a text table; wall-time ratios are against liveunwind in the same run."""
    lines = [
        f"machine: {results['machine']}",
        f"python -c pass: {results['python_start_s'] * 1000:.0f} ms",
        "",
        f"{'scenario':38} {'tool':19} {'wall ms (min-max)':>20} {'freeze ms (min-max)':>22}"
        f" {'wall/ours':>9}",
    ]
    for name, entry in results["scenarios"].items():
        ours = entry["tools"]["liveunwind"]["wall_s"]["median"]
        for tool, row in entry["tools"].items():
            wall, freeze = row["wall_s"], row.get("freeze_ms")
            wall_text = (
                f"{wall['median'] * 1e3:.0f} ({wall['min'] * 1e3:.0f}-{wall['max'] * 1e3:.0f})"
            )
            freeze_text = (
                f"{freeze['median']:.1f} ({freeze['min']:.1f}-{freeze['max']:.1f})"
                if freeze
                else "-"
            )
            ratio = wall["median"] / ours
            lines.append(f"{name:38} {tool:19} {wall_text:>20} {freeze_text:>22} {ratio:>8.2f}x")
        for ours_name, theirs_name in (
            ("liveunwind --python", "pystack --native"),
            ("liveunwind --locals", "pystack --native --locals"),
        ):
            ours_row, theirs_row = entry["tools"].get(ours_name), entry["tools"].get(theirs_name)
            if ours_row and theirs_row:
                share = ours_row["wall_s"]["median"] / theirs_row["wall_s"]["median"]
                lines.append(f"{'':38} {ours_name} / {theirs_name}: {share:.2f}x wall")
        if "warm_frames_per_s" in entry:
            lines.append(f"{'':38} warm repeat mode: {entry['warm_frames_per_s']:,.0f} frames/s")
        if "frames_equal_gdb" in entry:
            lines.append(f"{'':38} frames equal gdb's: {entry['frames_equal_gdb']}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
