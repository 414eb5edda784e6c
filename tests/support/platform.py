"""What the integration tests share: the platform they run on, the installed command, ptrace.

docker/run-integration runs tests/integration/ in the x86_64 and arm64
containers and in the arm64 VM (the riscv64 VM runs test_riscv64_vm.py), and
sets ``LIVEUNWIND_PLATFORM`` to ``x86_64``, ``arm64``, ``arm64-vm`` or
``riscv64-vm``. The tests drive liveunwind as a user does: the ``liveunwind``
command installed by ``pip install``, and the public Python API.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.programs import RunningProgram
from tests.support.waits import wait_for_state

PLATFORM = os.environ.get("LIVEUNWIND_PLATFORM", "")
"""``x86_64``, ``arm64`` (container, QEMU user mode), ``arm64-vm``, ``riscv64-vm`` or empty
(not run by docker/)."""
MACHINES = {"x86_64": "x86_64", "arm64": "aarch64", "arm64-vm": "aarch64", "riscv64-vm": "riscv64"}
"""What ``uname -m`` says on each platform."""
UNDER_QEMU_USER = PLATFORM == "arm64"
COMMAND_TIMEOUT = 600.0
"""Seconds one liveunwind or gdb run may take: arm64 under QEMU emulation is slow."""

_PTRACE_SEIZE = 0x4206
_PTRACE_DETACH = 17


def liveunwind_command() -> str:
    """The installed ``liveunwind`` console script; skips the test where there is none."""
    path = shutil.which("liveunwind")
    if path is None:
        pytest.skip("the liveunwind command is not installed (pip install .)")
    return path


def run_liveunwind(
    *args: str, timeout: float = COMMAND_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Runs the installed command; returns its exit code and output."""
    return subprocess.run(
        [liveunwind_command(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def backtrace_json(*args: str) -> dict[str, Any]:
    """``liveunwind ARGS --json``: the one document it prints (exit 0 or 1 only)."""
    result = run_liveunwind(*args, "--json")
    assert result.returncode in (0, 1), f"liveunwind {' '.join(args)}: {result.stderr}"
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def functions(thread: dict[str, Any]) -> list[str]:
    """A JSON thread's function names, innermost first (``??`` where none was found)."""
    return [frame["function"] or "??" for frame in thread["frames"]]


def thread_named(document: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [thread for thread in document["threads"] if thread["name"] == name]
    assert len(matches) == 1, f"{len(matches)} threads named {name!r}"
    return matches[0]


def contains_chain(names: list[str], chain: list[str]) -> bool:
    """``chain`` appears in ``names`` whole and in order."""
    return any(names[index : index + len(chain)] == chain for index in range(len(names)))


def ptrace_unavailable() -> str | None:
    """Why this process cannot ptrace a child of its own, or None where it can.

    Tried for real: PTRACE_SEIZE of a sleeping child. QEMU user mode has no
    ptrace at all (it answers ENOSYS), so arm64 programs in the arm64
    container cannot be traced; the arm64 VM runs the live tests instead.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        if libc.ptrace(_PTRACE_SEIZE, child.pid, None, None) == 0:
            libc.ptrace(_PTRACE_DETACH, child.pid, None, None)
            return None
        code = ctypes.get_errno()
    finally:
        child.kill()
        child.wait()
    if UNDER_QEMU_USER:
        return (
            f"ptrace is not available ({errno.errorcode.get(code, code)}): arm64 programs here "
            "run under QEMU user mode, which emulates no ptrace; the arm64 VM runs the live tests"
        )
    return f"ptrace of a child fails here: {os.strerror(code)}"


def require_ptrace() -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def wait_state(pid: int, state: str, timeout: float = 30.0) -> None:
    """Waits until process ``pid`` is in kernel state ``state`` (``T``: stopped)."""
    wait_for_state(pid, state, timeout)


def start_parked(path: Path, *args: str, timeout: float = 60.0, **popen: Any) -> RunningProgram:
    """Starts a test program (``popen``: cwd, user, preexec_fn…) and returns once it is parked.

    Parked: every thread sleeps (tests/support/programs.py).
    """
    program = RunningProgram(path, args, **popen)
    try:
        program.wait_ready((), timeout)
    except BaseException:
        program.stop()
        raise
    return program
