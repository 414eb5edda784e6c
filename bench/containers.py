"""`make bench`: a container's processes by ``liveunwind pid --container`` beside shell loops.

A docker container (tests/support/containers.py: the engine started if none
answers, a small image of testprogs' threads-O2, /bin/sh and libc) runs
PROCESSES copies of threads-O2 (9 threads, one 30 frames deep).  Timed, in
alternation, REPETITIONS times each: one ``liveunwind pid --container ID``;
a shell loop of ``eu-stack -p`` over the same pids; a shell loop of
``liveunwind pid``.  The program sits at its path on this machine inside
the container too, so that eu-stack, which does not look through
/proc/PID/root, unwinds it in full.  Reported: wall and CPU time (user+sys
of the command and its children), the processes and threads liveunwind
listed (which must be those ``docker top`` lists), and whether every
process's frames equal gdb's.  Writes bench/containers-results.json.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.run import ENV, install_liveunwind  # noqa: E402
from tests.support.builds import build  # noqa: E402
from tests.support.containers import Container, DockerUnavailable, Engine, small_image  # noqa: E402

PROCESSES = 20
THREADS = 9
REPETITIONS = 7


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user+sys of it and its children) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, timeout=600, env=ENV)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"{command[:3]} failed: {result.stderr.decode()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def frames_equal_gdb(entries: list[dict]) -> bool:
    from tests.support.oracles import gdb_backtraces, pcs

    for entry in entries:
        pid = entry["pid"]
        theirs = gdb_backtraces(pid, sysroot=f"/proc/{pid}/root", executable=f"/proc/{pid}/exe")
        ours = {t["tid"]: [f["pc"] for f in t["frames"]] for t in entry["backtrace"]["threads"]}
        if ours != {tid: pcs(frames) for tid, frames in theirs.items()}:
            return False
    return True


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="liveunwind-bench-containers-"))
    liveunwind = install_liveunwind(work)
    program = build("testprogs") / "threads-O2"
    try:
        engine = Engine(work / "dockerd.log")
    except DockerUnavailable as reason:
        print(f"bench/containers.py: skipped: {reason}")
        return 0
    container = None
    try:
        image = small_image([program], folder=str(program.parent))
        copies = " & ".join([str(program)] * (PROCESSES - 1))
        container = Container(image, ["/bin/sh", "-c", f"{copies} & exec {program}"])
        pids = container.wait_parked(PROCESSES, THREADS)
        listing = subprocess.run(
            [*liveunwind, "pid", "--container", container.id[:12], "--json"],
            capture_output=True,
            text=True,
            timeout=600,
            env=ENV,
        )
        entries = json.loads(listing.stdout)["processes"]
        loop = "for p in " + " ".join(map(str, pids)) + '; do "$@" "$p" >/dev/null; done'
        commands = {
            "liveunwind pid --container": [*liveunwind, "pid", "--container", container.id[:12]],
            "shell loop of eu-stack -p": ["sh", "-c", loop, "loop", "eu-stack", "-p"],
            "shell loop of liveunwind pid": ["sh", "-c", loop, "loop", *liveunwind, "pid"],
        }
        if shutil.which("eu-stack") is None:
            del commands["shell loop of eu-stack -p"]
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for command in commands.values():
            timed(command)  # warm the page cache once; not counted
        for _ in range(REPETITIONS):
            for name, command in commands.items():
                runs[name].append(timed(command))
        results = {
            "load_average": os.getloadavg(),
            "processes": len(entries),
            "threads": sum(len(entry["backtrace"]["threads"]) for entry in entries),
            "every_process_listed": sorted(entry["pid"] for entry in entries) == pids,
            "frames_equal_gdb": frames_equal_gdb(entries),
            "tools": {
                name: {
                    "wall_s": statistics.median(wall for wall, _ in values),
                    "cpu_s": statistics.median(cpu for _, cpu in values),
                }
                for name, values in runs.items()
            },
        }
    finally:
        if container is not None:
            container.stop()
        engine.stop()
        shutil.rmtree(work, ignore_errors=True)
    Path(__file__).with_name("containers-results.json").write_text(
        json.dumps(results, indent=2) + "\n"
    )
    print(format_table(results))
    return 0


def format_table(results: dict) -> str:
    ours = results["tools"]["liveunwind pid --container"]
    lines = [
        f"a container's {results['processes']} processes, {results['threads']} threads "
        f"(load {results['load_average'][0]:.2f}): every process listed "
        f"{results['every_process_listed']}, frames equal gdb's {results['frames_equal_gdb']}",
        f"{'command':32} {'wall ms':>8} {'cpu ms':>8} {'wall/ours':>9} {'cpu/ours':>9}",
    ]
    for name, row in results["tools"].items():
        lines.append(
            f"{name:32} {row['wall_s'] * 1e3:8.0f} {row['cpu_s'] * 1e3:8.0f}"
            f" {row['wall_s'] / ours['wall_s']:8.2f}x {row['cpu_s'] / ours['cpu_s']:8.2f}x"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
