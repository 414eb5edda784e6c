"""The accuracy run: each program started busy, stopped at random instants, three views compared.

    python -m tools.accuracy [--instants N] [--programs a,b] [--out build/accuracy] ...

Run as root from the checkout, as the current directory (``make accuracy``):
ptrace of the programs and PostgreSQL's user need root. Prints a line per instant and the table;
writes report.md and report.json into --out. Exits 1 when no program could
be measured, 0 otherwise: differences are findings, not failures.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from tests.support.paths import ROOT
from tools.accuracy.compare import records
from tools.accuracy.instant import look, stopped
from tools.accuracy.programs import PACKAGES, PROGRAMS, Program, ProgramUnavailableError, started
from tools.accuracy.report import Looked, ProgramResult, table, write

PAUSE = (0.5, 3.0)
"""Seconds of running between two instants, drawn at random: the instants fall anywhere."""


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.accuracy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--instants", type=int, default=3, help="instants per program (3)")
    names = ",".join(program.name for program in PROGRAMS)
    parser.add_argument("--programs", default=names, help=f"comma-separated, of: {names}")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "build" / "accuracy", help="report folder"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the pauses (random)")
    parser.add_argument("--max-frames", type=int, default=256, help="frames per thread (256)")
    parser.add_argument("--examples", type=int, default=4, help="examples per verdict (4)")
    parser.add_argument(
        "--program-seconds", type=float, default=900.0, help="time for one program's instants"
    )
    return parser.parse_args()


def _version(package: str) -> str:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return result.stdout.strip() or "not installed"


def _commit() -> str:
    result = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return result.stdout.strip() or "unknown"


def measure(program: Program, arguments: argparse.Namespace, rng: random.Random) -> ProgramResult:
    """Start one program, look at it ``--instants`` times, put it away; never raises."""
    result = ProgramResult(program.name, program.what)
    folder = Path(tempfile.mkdtemp(prefix=f"liveunwind-accuracy-{program.name}-"))
    try:
        with started(program, folder) as running:
            deadline = time.monotonic() + arguments.program_seconds
            for instant in range(arguments.instants):
                if time.monotonic() > deadline:
                    result.note = f"stopped after {instant} instants: --program-seconds ran out"
                    break
                time.sleep(rng.uniform(*PAUSE))
                with stopped(running.subjects()) as held:
                    for pid in held:
                        seen = look(pid, arguments.max_frames)
                        result.looks.append(
                            Looked(instant, pid, seen.command, seen.errors, seen.moved)
                        )
                        if seen.moved is None:
                            result.threads += records(
                                seen, program.name, instant, arguments.max_frames
                            )
                        print(
                            f"  {program.name} instant {instant} pid {pid}: "
                            + (f"dropped ({seen.moved})" if seen.moved else "compared")
                            + "".join(f"; {tool} failed" for tool in seen.errors),
                            flush=True,
                        )
                result.instants = instant + 1
    except ProgramUnavailableError as exc:
        result.status, result.note = "skipped", str(exc)
    except Exception as exc:  # the program would not start or get busy: say so, go on
        result.status, result.note = "failed", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM/SIGHUP end the run through the same clean-up as an exception."""
    raise SystemExit(128 + signum)


def main() -> int:
    arguments = _arguments()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate)
    seed = arguments.seed if arguments.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    wanted = [name.strip() for name in arguments.programs.split(",") if name.strip()]
    known = {program.name: program for program in PROGRAMS}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        print(f"accuracy: unknown program(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return 64
    started_at = datetime.now(UTC)
    results = []
    for name in wanted:
        program = known[name]
        print(f"{program.name}: {program.what}", flush=True)
        begun = time.monotonic()
        result = measure(program, arguments, rng)
        if result.status != "measured":
            print(f"  {result.status}: {result.note}", flush=True)
        print(f"  {time.monotonic() - begun:.0f} s", flush=True)
        results.append(result)
    header: dict[str, object] = {
        "date": started_at.strftime("%Y-%m-%d %H:%M UTC"),
        "liveunwind": _commit(),
        "instants per program": arguments.instants,
        "seed": seed,
        "max frames": arguments.max_frames,
        "packages": ", ".join(
            f"{package} {_version(package)}" for package in [*PACKAGES, "gdb", "elfutils"]
        ),
    }
    path = write(results, header, arguments.out, arguments.examples)
    print(table(results))
    print(f"report: {path} and {path.with_suffix('.json')}")
    return 0 if any(result.status == "measured" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
