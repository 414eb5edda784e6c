"""One instant of a running program, seen by liveunwind, gdb and eu-stack.

The processes are stopped with SIGSTOP and stay stopped while the three
tools look at them one after the other (a thread has one tracer at a time):
liveunwind leaves a process stopped by SIGSTOP stopped (docs/cli.md: the
target is left as it was found), and gdb and eu-stack detach from a
group-stopped process leaving it so. After each tool every thread must still
be back in the group stop with the sp and pc it had (``fingerprint``), and no
thread may have come or gone; otherwise the instant is thrown away
(``Look.moved``), since the three would not have seen the same stacks.
SIGCONT lets the processes run again, whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

from liveunwind.targets.live.procfs import read_maps
from tests.support.cli import run_cli
from tests.support.oracles import (
    Backtraces,
    OracleError,
    eu_stack_backtraces,
    gdb_backtraces,
)
from tests.support.waits import state, wait_until
from tools.accuracy.calls import follow_calls

STOP_TIMEOUT = 10.0
"""Seconds every thread has to reach the group stop (one in a disk wait may take a while)."""
LIVEUNWIND_TIMEOUT = 300.0
"""Seconds one liveunwind run may take (the oracles are bounded by tests.support.oracles)."""
GDB_FRAME_FACTOR = 2
"""gdb walks this many times the frame limit: its limit counts inline frames, which are dropped."""

T = TypeVar("T")


@dataclass(frozen=True)
class OurFrame:
    """One of liveunwind's frames: what the comparison and the report need of it."""

    pc: int
    function: str | None
    method: str
    signal_frame: bool


@dataclass(frozen=True)
class OurThread:
    """One of liveunwind's threads: its frames and why its walk ended."""

    name: str
    frames: list[OurFrame]
    complete: bool
    stop_reason: str
    stop_detail: str


@dataclass
class Look:
    """What the three tools saw of one stopped process (a tool that failed: its error)."""

    pid: int
    command: str
    ours: dict[int, OurThread] | None = None
    gdb: Backtraces | None = None
    eu_stack: Backtraces | None = None
    errors: dict[str, str] = field(default_factory=dict)
    moved: str | None = None
    """Why the instant was thrown away (a thread ran, came or went), or None."""
    code: list[tuple[int, int]] = field(default_factory=list)
    """The executable mappings (start, end) at the instant: an oracle's frames must lie there."""
    follows_call: dict[int, bool] = field(default_factory=dict)
    """pc → whether a call instruction ends before it, for every pc but frame 0s (calls.py)."""


def threads_of(pid: int) -> dict[int, str | None]:
    """tid → kernel state letter of every thread of ``pid`` (empty once it is gone)."""
    try:
        tids = [int(entry) for entry in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return {}
    return {tid: state(pid, tid) for tid in tids}


def _all_stopped(pid: int) -> bool:
    """Every live thread of ``pid`` is in the group stop (T); zombie threads do not count."""
    states = threads_of(pid)
    return bool(states) and all(letter in ("T", "Z", "X", None) for letter in states.values())


def command_line(pid: int) -> str:
    """The process's command line, short, for the report."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return text if len(text) <= 120 else text[:117] + "..."


@contextmanager
def stopped(pids: list[int]) -> Iterator[list[int]]:
    """Stop ``pids`` with SIGSTOP; yields those that reached the group stop; SIGCONT after."""
    sent = []
    try:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
                sent.append(pid)
            except ProcessLookupError:
                continue
        held = []
        for pid in sent:
            try:
                wait_until(partial(_all_stopped, pid), STOP_TIMEOUT, f"{pid} to stop")
                held.append(pid)
            except AssertionError:
                continue
        yield held
    finally:
        for pid in sent:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _liveunwind(pid: int, max_frames: int) -> dict[int, OurThread]:
    """liveunwind's threads of ``pid``, as its JSON document gives them."""
    result = run_cli(
        "pid", str(pid), "--json", "--max-frames", str(max_frames), timeout=LIVEUNWIND_TIMEOUT
    )
    if result.returncode not in (0, 1):
        raise OracleError(f"liveunwind exited {result.returncode}: {result.stderr.strip()}")
    document = json.loads(result.stdout)
    return {
        thread["tid"]: OurThread(
            name=thread["name"],
            frames=[
                OurFrame(frame["pc"], frame["function"], frame["method"], frame["signal_frame"])
                for frame in thread["frames"]
            ],
            complete=thread["complete"],
            stop_reason=thread["stop_reason"],
            stop_detail=thread["stop_detail"],
        )
        for thread in document["threads"]
    }


def _attempt(seen: Look, name: str, run: Callable[[], T]) -> T | None:
    """``run()``, or None with its failure kept in ``seen.errors[name]``: a failure is a finding."""
    try:
        return run()
    except Exception as exc:  # a timeout, an unreadable answer, a missing tool: all recorded
        lines = str(exc).strip().splitlines()
        seen.errors[name] = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
        return None


def fingerprint(pid: int) -> dict[int, str]:
    """tid → the user sp and pc the kernel shows for each stopped thread (or "running").

    /proc/PID/task/TID/syscall ends in the thread's user sp and pc whenever it
    is blocked (a group stop included): if neither changed for any thread, no
    thread ran, and every tool saw the same stacks.
    """
    found = {}
    for tid in threads_of(pid):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        found[tid] = " ".join(fields[-2:])
    return found


def _still(seen: Look, before: dict[int, str], tool: str) -> bool:
    """Whether the process still holds the instant after ``tool`` looked; if not, says why.

    A tracer's detach can leave a thread a moment outside the stop before the
    SIGSTOP it re-sends takes it back (elfutils does this), running no user
    code: the stop has ``STOP_TIMEOUT`` to come back before the fingerprint
    (each thread's sp and pc) is compared.
    """
    with suppress(AssertionError):
        wait_until(partial(_all_stopped, seen.pid), STOP_TIMEOUT, "the stop to come back")
    after = fingerprint(seen.pid)
    if set(after) != set(before):
        seen.moved = f"threads came or went while {tool} looked"
    elif not _all_stopped(seen.pid):
        states = threads_of(seen.pid)
        running = sorted(tid for tid, letter in states.items() if letter not in ("T", "Z", "X"))
        seen.moved = f"threads {running[:5]} left the stop after {tool} looked"
    else:
        moved = sorted(tid for tid in after if after[tid] != before[tid])
        if moved:
            seen.moved = f"threads {moved[:5]} have another sp or pc after {tool} looked"
    return seen.moved is None


def look(pid: int, max_frames: int) -> Look:
    """Run the three tools on stopped process ``pid``, checking after each that nothing moved."""
    seen = Look(pid, command_line(pid))
    with suppress(OSError, ValueError):
        seen.code = [(m.start, m.end) for m in read_maps(str(pid)) if m.executable]
    before = fingerprint(pid)
    seen.ours = _attempt(seen, "liveunwind", lambda: _liveunwind(pid, max_frames))
    if not _still(seen, before, "liveunwind"):
        return seen
    gdb_limit = max_frames * GDB_FRAME_FACTOR
    seen.gdb = _attempt(seen, "gdb", lambda: gdb_backtraces(pid, max_frames=gdb_limit))
    if not _still(seen, before, "gdb"):
        return seen
    seen.eu_stack = _attempt(
        seen, "eu-stack", lambda: eu_stack_backtraces(pid, max_frames=max_frames)
    )
    if _still(seen, before, "eu-stack"):
        checked = _attempt(seen, "call check", lambda: follow_calls(pid, _callers(seen)))
        seen.follows_call = checked or {}
    return seen


def _callers(seen: Look) -> list[int]:
    """The pcs of every side's frames but frame 0: those that may be return addresses."""
    pcs = [frame.pc for thread in (seen.ours or {}).values() for frame in thread.frames[1:]]
    for oracle in (seen.gdb, seen.eu_stack):
        pcs += [frame.pc for frames in (oracle or {}).values() for frame in frames[1:]]
    return pcs
