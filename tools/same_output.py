"""Does a change keep liveunwind's output byte for byte?  Two checkouts, one set of targets.

    .venv/bin/python tools/same_output.py BASE_CHECKOUT [--keep DIR]

A refactoring that must not change behaviour (issue 24: "the same frames,
byte for byte, on every test program and kernel core before and after") is
checked here against real targets, not fixtures: every test program in
testprogs/ that parks itself ("ready") is backtraced live by both checkouts
while it holds still, as text, as JSON and with ``--verbose`` (each frame's
method and why the sources before it failed); then it is killed with SIGSEGV
and the kernel's core is read by both.  The crash programs give kernel cores
(x86_64) and QEMU user-mode cores (aarch64) of each way they die.  Both
checkouts run this machine's venv with their own package first on
PYTHONPATH.

Prints one line per comparison and a count; exits 1 when any output differs
(the two outputs are kept in --keep for ``diff``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.cores import unlimited_core  # noqa: E402
from tests.support.programs import ProgramNotReadyError, RunningProgram  # noqa: E402

TESTPROGS = ROOT / "testprogs"
#: Programs whose threads come and go or whose stacks move while parked.
UNSTEADY = {"churn", "profiled", "vforker"}
CRASH_MODES = ("leaf", "abort", "handler", "thread")
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")
READY_TIMEOUT = 10.0


def liveunwind(checkout: Path, arguments: list[str]) -> str:
    """The command's stdout, stderr and exit code, as one comparable text."""
    environment = dict(os.environ, PYTHONPATH=str(checkout))
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        cwd=checkout,
        check=False,
    )
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"


class Comparison:
    """Runs both checkouts on the same target and keeps a tally."""

    def __init__(self, base: Path, keep: Path) -> None:
        self.base = base
        self.keep = keep
        self.same = 0
        self.different: list[str] = []

    def compare(self, label: str, arguments: list[str]) -> None:
        before = liveunwind(self.base, arguments)
        after = liveunwind(ROOT, arguments)
        if before == after:
            self.same += 1
            print(f"same       {label}")
            return
        self.different.append(label)
        stem = self.keep / label.replace(" ", "_").replace("/", "_")
        stem.with_suffix(".base").write_text(before)
        stem.with_suffix(".new").write_text(after)
        print(f"DIFFERENT  {label}  ({stem}.base / .new)")


def parked_programs() -> list[Path]:
    found = []
    for folder in ("build", "fallback/build", "jit/build", "lines/build"):
        for path in sorted((TESTPROGS / folder).glob("*")):
            runnable = path.suffix not in {".so", ".debug"} and os.access(path, os.X_OK)
            if path.is_file() and runnable and path.name not in UNSTEADY:
                found.append(path)
    return found


def live_and_core(comparison: Comparison, program: Path, work: Path) -> None:
    """Live text/JSON/verbose of the parked program, then its kernel core both ways."""
    folder = work / program.name
    folder.mkdir()
    running = RunningProgram(
        program, [], cwd=folder, stderr=subprocess.DEVNULL, preexec_fn=unlimited_core
    )
    name = program.relative_to(TESTPROGS).as_posix()
    with running:
        try:
            running.wait_for_line(b"ready\n", time.monotonic() + READY_TIMEOUT)
        except ProgramNotReadyError:
            print(f"skipped    {program.name}: no 'ready'")
            return
        pid = str(running.pid)
        for flags in ([], ["--json"], ["--verbose"]):
            comparison.compare(f"live {name} {' '.join(flags)}".strip(), ["pid", pid, *flags])
        running.popen.send_signal(signal.SIGSEGV)
        running.popen.wait(timeout=30)
    core = folder / "core"
    if core.is_file():
        for flags in ([], ["--json"]):
            comparison.compare(
                f"core {name} {' '.join(flags)}".strip(), ["core", str(core), str(program), *flags]
            )


def crash_cores(comparison: Comparison, work: Path) -> None:
    """Kernel cores of the x86_64 crash programs and QEMU cores of the aarch64 ones."""
    builds = [("build", None)]
    if shutil.which("qemu-aarch64"):
        builds.append(("build-aarch64", ["qemu-aarch64", "-L", str(AARCH64_SYSROOT)]))
    for build, runner in builds:
        for program in sorted((TESTPROGS / "crash" / build).glob("crash-*")):
            for mode in CRASH_MODES:
                folder = work / f"{build}-{program.name}-{mode}"
                folder.mkdir()
                if runner:
                    (folder / "core").mkdir()  # QEMU writes qemu_*.core; no host core of QEMU
                subprocess.run(
                    [*(runner or []), str(program), mode],
                    cwd=folder,
                    preexec_fn=unlimited_core,
                    capture_output=True,
                    timeout=60,
                    check=False,
                )
                cores = [p for p in folder.glob("*core*") if p.is_file()]
                if len(cores) != 1:
                    print(f"skipped    {build}/{program.name} {mode}: {len(cores)} cores")
                    continue
                arguments = ["core", str(cores[0]), str(program)]
                if runner:
                    arguments += ["--sysroot", str(AARCH64_SYSROOT)]
                label = f"core {build}/{program.name} {mode}"
                comparison.compare(label, arguments)
                comparison.compare(f"{label} --json", [*arguments, "--json"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base", type=Path, help="the checkout to compare with (e.g. a worktree)")
    parser.add_argument("--keep", type=Path, default=None, help="where differing outputs go")
    options = parser.parse_args()
    keep = options.keep or Path(tempfile.mkdtemp(prefix="same-output-"))
    keep.mkdir(parents=True, exist_ok=True)
    comparison = Comparison(options.base.resolve(), keep)
    with tempfile.TemporaryDirectory(prefix="same-output-work-") as work:
        for program in parked_programs():
            live_and_core(comparison, program, Path(work))
        crash_cores(comparison, Path(work))
    print(f"{comparison.same} same, {len(comparison.different)} different")
    return 1 if comparison.different else 0


if __name__ == "__main__":
    sys.exit(main())
