"""Waiting for a condition, never for a time: what tests wait on, and the /proc readings they ask.

A test that sleeps "long enough" for something to happen fails on a busy
machine and wastes time on an idle one.  ``wait_until`` polls the condition
the test needs — a thread blocked in the system call it parks in, a process
in a kernel state, a signal pending — and fails naming what did not happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

#: ``read`` in /proc/PID/task/TID/syscall: 0 on x86_64, 63 on aarch64.  Under QEMU
#: user mode the file shows the host's call for the guest's, so both are taken;
#: neither number is a blocking call on the other machine (uname, io_setup).
READ_SYSCALLS = frozenset({0, 63})


def wait_until(
    condition: Callable[[], object], timeout: float = 10.0, what: str = "", interval: float = 0.01
) -> None:
    """Return as soon as ``condition()`` is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            what = what or repr(condition)
            raise AssertionError(f"waited {timeout:g} s for {what}: it did not happen")
        time.sleep(interval)


def _stat_field(text: str) -> str:
    # The name in stat is in parentheses and may contain anything: split after the last ')'.
    return text[text.rindex(")") + 2]


def state(pid: int | str, tid: int | None = None) -> str | None:
    """The kernel's state letter of a process (or of one of its threads), or None once gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        return _stat_field(Path(path).read_text())
    except (FileNotFoundError, ProcessLookupError):
        return None


def wait_for_state(pid: int, wanted: str, timeout: float = 10.0, tid: int | None = None) -> None:
    """Wait until the process (or its thread ``tid``) is in kernel state ``wanted`` (S, T, D…)."""
    who = f"process {pid}" if tid is None else f"thread {tid} of process {pid}"
    wait_until(lambda: state(pid, tid) == wanted, timeout, f"{who} to reach state {wanted}")


def signal_pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` is pending for process ``pid`` (its shared or main-thread set)."""
    masks = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd"):
            masks[key] = int(value, 16)
    return any(mask >> (signum - 1) & 1 for mask in masks.values())


def blocked_in_read(tid: int, fd: int, pid: int | str = "self") -> bool:
    """Whether thread ``tid`` sleeps in ``read(fd, …)``: its parking place, reached for good.

    /proc/PID/task/TID/syscall holds the number and arguments of the call a
    blocked thread is in ("running" while it runs).  A Python thread waiting
    for the GIL sleeps in a futex; one in ``os.read`` of an empty pipe has
    released the GIL and blocks in ``read`` — nothing more of it will run.
    """
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    if len(fields) < 2 or not fields[0].isdigit():
        return False
    return int(fields[0]) in READ_SYSCALLS and int(fields[1], 16) == fd
