"""Faults while a live target is held: it dies mid-freeze, or its stack is readable only in part.

- ``testprogs/vforker``'s main thread cannot be stopped (it waits inside
  vfork()), so liveunwind holds the other thread stopped for up to
  ``--stop-timeout`` while it waits: the window in which the test kills the
  target, deterministically mid-freeze.  liveunwind must end at once (not at
  the stop timeout) with one line and exit 2.
- ``testprogs/filestack`` runs a thread on a stack whose mapping the kernel
  can read only in part (its upper half lies past the end of a memfd):
  process_vm_readv stops half way through the copy of that stack, which is
  kept as far as it went, not dropped whole.

The attach torture (threads that fork and exec in a loop, threads that
come and go, liveunwind killed at random) is tests/system/test_attach_torture.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from liveunwind.errors import MemoryReadError
from tests.support.cli import run_cli, start_cli
from tests.support.hostile import assert_untraced, states
from tests.support.programs import RunningProgram, RunProgram, start_command
from tests.support.waits import wait_until

#: What liveunwind is given to wait for the vfork()ing thread (``--stop-timeout 20``).
STOP_TIMEOUT = 20


def test_a_target_killed_mid_freeze_ends_the_run_at_once(testprogs_build: Path) -> None:
    program = start_command([str(testprogs_build / "vforker"), "60"])
    children = ""
    try:
        wait_until(lambda: states(program.pid).get(program.pid, ("",))[0] == "D", what="vfork")
        children = Path(f"/proc/{program.pid}/task/{program.pid}/children").read_text()
        runner = start_cli("pid", str(program.pid), "--stop-timeout", "20")
        # The other thread stopped by liveunwind, which now waits for the main thread.
        wait_until(
            lambda: any(
                state == "t" and tracer
                for tid, (state, tracer) in states(program.pid).items()
                if tid != program.pid
            ),
            what="the sleeper held in a ptrace stop",
        )
        killed = time.monotonic()
        os.kill(program.pid, signal.SIGKILL)
        _, stderr = runner.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        program.stop()
        for child in children.split():  # the vfork child, asleep for a minute
            os.kill(int(child), signal.SIGKILL)
    assert runner.returncode == 2, stderr
    assert stderr.strip() == (
        f"liveunwind: process {program.pid} exited while it was being stopped"
    ), stderr
    assert took < STOP_TIMEOUT / 4, f"ended {took:.1f} s after the kill"


def test_a_stack_readable_only_in_part_is_copied_as_far_as_it_goes(
    run_program: RunProgram,
) -> None:
    """The copy of the stack is kept up to where the kernel stopped, not dropped whole.

    What was copied is what ``read_frozen`` answers once the process runs
    again (memory as it was while stopped); a copy dropped whole leaves it
    nothing, and the walk reads the moving stack instead.
    """
    from liveunwind.targets.live.ptrace import PtraceProcess
    from liveunwind.targets.live.snapshot import Snapshot

    program = run_program("filestack")
    (tid,) = (tid for tid in program.threads() if tid != program.pid)  # "filestack", as main
    maps = Path(f"/proc/{program.pid}/maps").read_text().splitlines()
    start = int(next(line for line in maps if "memfd:filestack" in line).split("-")[0], 16)
    end_of_file = start + (1 << 20)
    with PtraceProcess(program.pid, stop_timeout=5) as live:
        snapshot = Snapshot.capture(live)
        sp = next(t for t in snapshot.threads() if t.tid == tid).registers[live.arch.sp]
    assert start < sp < end_of_file
    assert len(snapshot.read_frozen(sp, end_of_file - sp)) == end_of_file - sp
    with pytest.raises(MemoryReadError):
        snapshot.read_frozen(end_of_file, 8)  # past the file: never copied
    assert snapshot.problems == []
    run = run_cli("pid", str(program.pid), "--stop-timeout", "5", timeout=60)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "note:" not in run.stdout, run.stdout
    walk = run.stdout.split(f"Thread {tid} ")[1].split("end of stack")[0]
    for function in ("__nanosleep", "filestack_inner", "filestack_outer", "start_thread"):
        assert function in walk, run.stdout
    assert {state for state, _ in states(program.pid).values()} == {"S"}
    assert_untraced(program.pid)
    # With a perf map the process may have JIT code, and its modules are searched for
    # registry heads: the memfd, only data, is none of them (no "not an ELF file" note).
    Path(f"/tmp/perf-{program.pid}.map").write_text("7f0000000000 40 jitted\n")
    run = run_cli("pid", str(program.pid), "--stop-timeout", "5", "--stats", timeout=60)
    assert run.returncode == 0 and "registry" in run.stderr, run.stderr
    assert "note:" not in run.stdout, run.stdout


@dataclass
class _HeldExecer:
    """``testprogs/execer`` with its "sleeper" held by a liveunwind run that waits for "vforker"."""

    program: RunningProgram
    names: dict[str, int]
    runner: subprocess.Popen[str]
    children: list[int]


@contextmanager
def _execer_held(testprogs_build: Path, stop_timeout: int) -> Iterator[_HeldExecer]:
    """Starts execer, runs ``liveunwind pid --threads sleeper,vforker`` and waits for the hold.

    liveunwind holds "sleeper" while it waits up to ``stop_timeout`` for
    "vforker" (inside vfork()); the test then signals the process, whose
    other threads exec or fork.  Every process made is killed on the way out.
    """
    program = start_command([str(testprogs_build / "execer")])
    children: list[int] = []
    try:
        names = {name: tid for tid, name in program.threads().items()}
        vforker = names["vforker"]
        wait_until(lambda: states(program.pid)[vforker][0] == "D", what="vfork")
        vforked = Path(f"/proc/{program.pid}/task/{vforker}/children").read_text()
        children.extend(int(child) for child in vforked.split())
        command = ["pid", str(program.pid), "--stop-timeout", str(stop_timeout)]
        runner = start_cli(*command, "--threads", f"{names['sleeper']},{vforker}")
        wait_until(
            lambda: states(program.pid).get(names["sleeper"], ("", 0))[0] == "t",
            what="the sleeper held in a ptrace stop",
        )
        yield _HeldExecer(program, names, runner, children)
    finally:
        program.stop()
        for child in children:  # the vfork child (and a forked one), asleep for an hour
            os.kill(child, signal.SIGKILL)


def test_a_target_that_execs_while_being_stopped_is_not_walked_with_its_new_maps(
    testprogs_build: Path,
) -> None:
    """An execve while threads are held is one line and exit 2, never a walk of the new program.

    liveunwind is told to stop "sleeper" and "vforker" alone, and holds the
    first while it waits for the second (inside vfork()); "execer", left
    running, then execs: the execve kills the held thread, and the process
    goes on under its pid as /bin/sleep, with other maps than the registers
    recorded before.
    """
    with _execer_held(testprogs_build, STOP_TIMEOUT) as held:
        pid = held.program.pid
        sent = time.monotonic()
        os.kill(pid, signal.SIGUSR1)
        _, stderr = held.runner.communicate(timeout=60)
        took = time.monotonic() - sent
        assert held.runner.returncode == 2, stderr
        assert stderr.strip() == (
            f"liveunwind: process {pid} replaced its program (execve) while it was "
            "being stopped; run liveunwind again"
        ), stderr
        assert took < STOP_TIMEOUT / 4, f"ended {took:.1f} s after the signal"
        # The process runs /bin/sleep now, traced by nobody, not stopped.
        wait_until(
            lambda: Path(f"/proc/{pid}/exe").resolve().name == "sleep",
            what="the execve done",
        )
        wait_until(lambda: set(states(pid).values()) == {("S", 0)}, what="sleep let go")


def test_a_target_killed_between_the_stop_and_the_copy_is_said_so(
    run_program: RunProgram,
) -> None:
    """Killed once every thread is held, before the copy: no maps, no memory, one clear error.

    The order of a backtrace (stop, then copy), with the kill put between
    the two by the test: a process killed while held leaves zombies whose
    registers can still be read, which would otherwise be walked through
    no maps at all.
    """
    from liveunwind.errors import NoSuchProcessError
    from liveunwind.targets.live.ptrace import PtraceProcess
    from liveunwind.targets.live.snapshot import Snapshot

    program = run_program("threads-O2")
    with PtraceProcess(program.pid) as live:
        os.kill(program.pid, signal.SIGKILL)
        wait_until(lambda: states(program.pid).get(program.pid, ("Z",))[0] == "Z", what="dead")
        with pytest.raises(NoSuchProcessError, match="exited while it was being stopped"):
            Snapshot.capture(live)
    assert NoSuchProcessError.exit_code == 2


def test_a_target_that_forks_while_being_stopped_is_let_go_and_its_child_untouched(
    testprogs_build: Path,
) -> None:
    """A fork by a thread left running while others are held: a normal run; the child untraced.

    As above, but "forker" forks instead: liveunwind waits out its stop
    timeout for "vforker", reports it not stopped (exit 1) with the held
    thread's backtrace, and neither the process nor the child the fork made
    while it held a thread is left traced or stopped.
    """
    with _execer_held(testprogs_build, 3) as held:
        pid, names = held.program.pid, held.names
        os.kill(pid, signal.SIGUSR2)
        forked = Path(f"/proc/{pid}/task/{names['forker']}/children")
        wait_until(lambda: forked.read_text().split(), what="the fork")
        child = int(forked.read_text().split()[0])
        held.children.append(child)
        assert states(pid)[names["sleeper"]][0] == "t"  # the fork came mid-freeze
        stdout, stderr = held.runner.communicate(timeout=60)
        assert held.runner.returncode == 1, stderr
        assert "Traceback" not in stderr and stderr == "", stderr
        assert f'Thread {names["vforker"]} "vforker" (not stopped after 3000 ms' in stdout
        assert "nanosleep" in stdout.split(f'Thread {names["sleeper"]} "sleeper"')[1]
        wait_until(lambda: states(child) == {child: ("S", 0)}, what="the child asleep, untraced")
        assert_untraced(pid)
        wait_until(
            lambda: {state for state, _ in states(pid).values()} <= {"S", "D"},
            what="no thread of the target stopped",
        )
