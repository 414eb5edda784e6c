"""`make bench`: one ``liveunwind core DIR --group`` against a shell loop of ``liveunwind core``.

The folder holds 200 kernel cores of testprogs/crash crashing in five
places (SIGSEGV from two call chains, SIGFPE, abort() at two depths, SIGSEGV
in a second thread), laid out as systemd-coredump's store: plain or packed
by the real zstd, xz and lz4, named ``core.COMM.UID.BOOTID.PID.TIMESTAMP``,
with ``user.coredump.exe`` set.  Making them takes a few seconds; they are
kept in the user's cache folder (``$XDG_CACHE_HOME/liveunwind-bench``, keyed
by the program's build) for the next run.  The program and the cores'
paths stay where they were made, so the cores find their executable.

Both commands run alternately, :data:`ROUNDS` times each; the ratio is of
CPU time (user + system of the command and its children), with wall time
beside it, and the number of groups is checked.  Writes
bench/cores-results.json and prints a line per command.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.run import install_liveunwind  # noqa: E402

CORES = 200
#: Each crash: crash.c's arguments and the tool that packs its core (None: plain).
CRASHES = [
    (["leaf"], "zstd"),
    (["other"], "xz"),
    (["fpe"], "lz4"),
    (["abort", "5"], None),
    (["abort", "50"], "zstd"),
    (["thread"], "zstd"),
]
#: leaf, other, fpe, abort (both depths), thread.
GROUPS = 5
SUFFIX = {"zstd": ".zst", "xz": ".xz", "lz4": ".lz4", None: ""}
ROUNDS = 3
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "liveunwind-bench"


def build_program(cache: Path) -> Path:
    """testprogs/crash/crash.c at -O2, in a folder named by the source and compiler."""
    source = ROOT / "testprogs" / "crash" / "crash.c"
    compiler = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(source.read_bytes() + compiler.encode()).hexdigest()[:16]
    folder = cache / f"crash-{key}"
    program = folder / "crash-O2"
    if not program.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["gcc", "-O2", "-g", "-pthread", "-o", str(program), str(source)], check=True
        )
    return program


def unlimited_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def make_store(program: Path) -> Path:
    """The folder of :data:`CORES` cores beside ``program``; made once, then reused."""
    store = program.parent / "coredump"
    done = program.parent / "coredump.done"
    if done.exists():
        return store
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern != "core":
        raise SystemExit(f"kernel.core_pattern is {pattern!r}: the kernel must write ./core")
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir()
    scratch = program.parent / "scratch"
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    for number in range(CORES):
        arguments, tool = CRASHES[number % len(CRASHES)]
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        child = subprocess.Popen(
            [str(program), *arguments], cwd=scratch, preexec_fn=unlimited_core,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        child.wait(timeout=60)
        core = scratch / "core"
        stamp = int(time.time() * 1_000_000)
        stored = store / f"core.crash-O2.0.{boot_id}.{child.pid}.{stamp}{SUFFIX[tool]}"
        if tool is None:
            core.rename(stored)
        else:
            with stored.open("wb") as packed:
                subprocess.run([tool, "-q", "-c", str(core)], stdout=packed, check=True)
        os.setxattr(stored, "user.coredump.exe", str(program).encode())
    shutil.rmtree(scratch, ignore_errors=True)
    done.touch()
    return store


def timed(command: list[str] | str, shell: bool = False) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system, children included) of one command; its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    result = subprocess.run(
        command, shell=shell, capture_output=True, text=True, env=ENV, check=False
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result.stdout


def main() -> int:
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"liveunwind-bench-cores-{os.getpid()}"
    work.mkdir()
    liveunwind = install_liveunwind(work)
    # The packed cores need their decoders, which install_liveunwind leaves out.
    python = str(Path(liveunwind[0]).with_name("python"))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
         "backports.zstd>=1.0; python_version < '3.14'", "lz4>=4.0"],
        check=True,
    )  # fmt: skip
    program = build_program(cache_folder())
    store = make_store(program)
    cores = sorted(store.iterdir())
    group_command = [*liveunwind, "core", str(store), "--group"]
    loop_command = f'for core in {store}/*; do {liveunwind[0]} core "$core" >/dev/null; done'
    runs: dict[str, list[tuple[float, float]]] = {"group": [], "loop": []}
    groups_found = None
    for _round in range(ROUNDS):
        wall, cpu, _ = timed(loop_command, shell=True)
        runs["loop"].append((wall, cpu))
        wall, cpu, text = timed(group_command)
        runs["group"].append((wall, cpu))
        groups_found = int(text.split(" ", 1)[0])
    load = Path("/proc/loadavg").read_text().split()[:3]
    best = {name: min(cpu for _wall, cpu in values) for name, values in runs.items()}
    walls = {name: min(wall for wall, _cpu in values) for name, values in runs.items()}
    results = {
        "cores": len(cores),
        "groups": groups_found,
        "groups_expected": GROUPS,
        "load_average": load,
        "runs": runs,
        "cpu_ratio": best["group"] / best["loop"],
        "wall_ratio": walls["group"] / walls["loop"],
    }
    Path(__file__).with_name("cores-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"== {len(cores)} kernel cores, {groups_found} groups (expected {GROUPS}); load {load}")
    for name in ("loop", "group"):
        print(f"{name:6} CPU {best[name]:7.2f} s  wall {walls[name]:7.2f} s  (best of {ROUNDS})")
    print(
        f"core DIR --group / loop: CPU {results['cpu_ratio']:.3f}x, "
        f"wall {results['wall_ratio']:.3f}x"
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0 if groups_found == GROUPS else 1


if __name__ == "__main__":
    sys.exit(main())
