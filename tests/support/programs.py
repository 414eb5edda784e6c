"""Test programs started and parked: every thread at its blocking point before anyone looks.

End-to-end tests unwind real processes, so liveunwind and the oracles must
look at the same stacks. The programs print "ready" when all threads are
about to block; ``wait_ready`` then also waits for the kernel to report each
thread as sleeping, which closes the gap between "about to" and "blocked".
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.support.waits import wait_for_state

READY_TIMEOUT = 10.0
"""Seconds a program may take to print "ready" and settle."""


class ProgramNotReadyError(RuntimeError):
    """A test program died, or did not print "ready" and settle in time."""


def _read_stat(tid_dir: Path) -> tuple[str, str] | None:
    """Return (thread name, state letter) of one task, or None if it has exited."""
    try:
        stat = (tid_dir / "stat").read_text()
        name = (tid_dir / "comm").read_text().rstrip("\n")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The name in stat is in parentheses and may contain anything: split after the last ')'.
    return name, stat[stat.rindex(")") + 2]


class RunningProgram:
    """A started test program: its pid, its threads by name, and how to stop it."""

    def __init__(self, path: Path, args: Iterable[str], **popen: Any) -> None:
        """Start ``path args``; ``popen`` adds ``subprocess.Popen`` arguments (cwd, user…)."""
        self.path = path
        self.args = [str(a) for a in args]
        self.output = b""
        """What the program printed so far, as far as ``wait_for_line`` read it."""
        self.popen = subprocess.Popen(
            [str(path), *self.args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, **popen
        )

    @property
    def pid(self) -> int:
        """The process id (also the main thread's tid)."""
        return self.popen.pid

    def thread_states(self) -> dict[int, tuple[str, str]]:
        """Map tid -> (thread name, kernel state letter) for every current thread."""
        states = {}
        for tid_dir in Path(f"/proc/{self.pid}/task").iterdir():
            entry = _read_stat(tid_dir)
            if entry is not None:
                states[int(tid_dir.name)] = entry
        return states

    def threads(self) -> dict[int, str]:
        """Map tid -> thread name (as set with pthread_setname_np, or the program name)."""
        return {tid: name for tid, (name, _) in self.thread_states().items()}

    def tid(self, name: str) -> int:
        """Return the tid of the one thread called ``name``; tests find threads by role."""
        tids = [tid for tid, n in self.threads().items() if n == name]
        if len(tids) != 1:
            raise LookupError(f"{len(tids)} threads named {name!r} in {self.threads()}")
        return tids[0]

    def wait_ready(self, busy: Iterable[str], timeout: float) -> None:
        """Wait for "ready", then until all threads sleep (``busy`` ones may also run).

        Settled means two samples 20 ms apart show the same threads in the
        same acceptable states, so a thread passing through a short sleep (a
        lock on its way to the real blocking call) is not taken for parked.
        """
        deadline = time.monotonic() + timeout
        self.wait_for_line(b"ready\n", deadline)
        self.wait_settled(busy, deadline)

    def wait_settled(self, busy: Iterable[str], deadline: float) -> None:
        """Wait until every thread sleeps (``busy`` ones may also run), as ``wait_ready`` says."""
        busy = set(busy)
        previous: dict[int, tuple[str, str]] | None = None
        while True:
            states = self.thread_states()
            settled = all(
                state == "S" or (state == "R" and name in busy) for name, state in states.values()
            )
            if settled and states == previous:
                return
            previous = states if settled else None
            if self.popen.poll() is not None:
                raise ProgramNotReadyError(f"{self} exited with {self.popen.returncode}")
            if time.monotonic() > deadline:
                raise ProgramNotReadyError(f"{self} did not settle: (name, state) by tid: {states}")
            time.sleep(0.02)

    def wait_for_line(self, line: bytes, deadline: float) -> None:
        """Read stdout until ``line`` arrives; fail on EOF or at the deadline.

        Only what arrives from now on counts; all of it is kept in ``output``.
        """
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        seen = b""
        while line not in seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise ProgramNotReadyError(f"{self} printed no {line!r} in time; output: {seen!r}")
            chunk = os.read(fd, 4096)
            if not chunk:
                self.popen.wait()
                raise ProgramNotReadyError(f"{self} exited with {self.popen.returncode}: {seen!r}")
            seen += chunk
            self.output += chunk

    def stop(self) -> None:
        """Kill and reap the program; safe to call twice."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        # A JIT program's perf map outlives it; left, it would be another's once the pid is reused.
        Path(f"/tmp/perf-{self.pid}.map").unlink(missing_ok=True)

    def __enter__(self) -> RunningProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __str__(self) -> str:
        return " ".join([self.path.name, *self.args]) + f" (pid {self.pid})"


def start_program(
    build_dir: Path,
    name: str,
    *args: str | int,
    busy: Iterable[str] = (),
    timeout: float = READY_TIMEOUT,
) -> RunningProgram:
    """Start ``build_dir/name args`` and return once its stacks are settled.

    ``busy`` names the threads that may be running (state R) rather than
    sleeping; without it a spinning thread never counts as settled. The program is
    killed if it does not get ready; otherwise the caller stops it (a
    RunningProgram is a context manager), which lets module-scoped fixtures
    share one running program.
    """
    path = build_dir / name
    if not path.is_file():
        raise FileNotFoundError(f"no test program {path}")
    program = RunningProgram(path, [str(a) for a in args])
    try:
        program.wait_ready(busy, timeout)
    except BaseException:
        program.stop()
        raise
    return program


RunProgram = Callable[..., RunningProgram]
"""The type of the ``run_program`` fixture: (name, *args, busy=(), timeout=10.0)."""


def start_sleeper() -> subprocess.Popen[bytes]:
    """``sleep 600``, once it sleeps: a target nobody here wrote."""
    process = subprocess.Popen(["sleep", "600"])
    wait_for_state(process.pid, "S")
    return process


def start_command(
    command: list[str], *, ready: bytes = b"ready\n", timeout: float = READY_TIMEOUT
) -> RunningProgram:
    """Start ``command`` and return once it printed ``ready`` (its threads may not sleep yet).

    For targets that never settle (threads coming and going) and for waits
    of the test's own; ``start_program`` waits for parked threads too.
    """
    program = RunningProgram(Path(command[0]), command[1:])
    try:
        program.wait_for_line(ready, time.monotonic() + timeout)
    except BaseException:
        program.stop()
        raise
    return program
