"""GDB remote targets: real stubs (QEMU user mode, gdbserver) unwound through the protocol.

The programs come from testprogs/remote: three threads, each parked at the
end of a known call chain.  Each test starts a real stub serving one of
them, unwinds it with ``gdb_remote()``, and checks every thread's chain,
gdb's frames where gdb can look at the same stacks, that the target runs on
afterwards (it answers SIGUSR2 with "alive", which a target still held by a
debugger cannot), and the protocol round trips.

QEMU 7.2 user mode serves a single debugger connection for the life of the
process (a second connection is never accepted: measured) and ignores ^C
while the guest runs: the tests stop a parked target by sending the QEMU
process SIGUSR1 (remote.c ignores it), liveunwind stops a running one by
sending QEMU SIGINT itself, and gdb-multiarch gets its own QEMU running the
same program — QEMU places everything at the same addresses every run, so
the pcs must be the same.  gdbserver serves
liveunwind first and plain gdb attaches to the very same process afterwards.

The command's error path uses a scripted stub that never answers; the
client's own error paths, against scripted stubs in this process, are
tests/unit/test_gdb_remote.py.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from liveunwind.backtrace.remote import gdb_remote
from liveunwind.cli.report import format_json
from liveunwind.errors import UsageError
from liveunwind.frames import Backtrace, StopReason
from liveunwind.targets.remote.connection import RemoteError
from tests.support.assertions import assert_matches_gdb
from tests.support.oracles import (
    GDB_MARKER,
    GDB_SCRIPT,
    Backtraces,
    OracleFrame,
    gdb_backtraces,
    pcs,
)
from tests.support.paths import AARCH64_SYSROOT
from tests.support.ports import free_port, wait_listening
from tests.support.programs import RunningProgram, start_program
from tests.support.schema import VALIDATOR
from tests.support.stubs import GdbServer, ScriptedStub, silent, tool
from tests.support.waits import wait_until

#: Each thread's chain in remote.c, innermost first.
CHAINS = {
    "main": ["wait_3", "wait_2", "wait_1", "main"],
    "sleeper": ["sleep_3", "sleep_2", "sleep_1", "start"],
    "reader": ["read_2", "read_1", "start"],
}
#: The chains of ``remote spin``: a spinner instead of the reader.
SPIN_CHAINS = {
    "main": CHAINS["main"],
    "sleeper": CHAINS["sleeper"],
    "spinner": ["spin_2", "spin_1", "start"],
}
#: Seconds a stub may take to serve a whole backtrace; the program gets ready well within.
SERVE_TIMEOUT = 30.0
#: Round trips a backtrace of the three-thread program may cost (measured: 26 to 32).
MAX_ROUND_TRIPS = 40


# -- the program's chains -----------------------------------------------------------


def functions(thread_frames: list[str | None]) -> list[str]:
    return [name or "??" for name in thread_frames]


def role_of(names: list[str], chains: dict[str, list[str]] = CHAINS) -> str:
    """Which of remote.c's threads ``names`` belong to: its chain appears in them, in order."""
    roles = [role for role, chain in chains.items() if _contains(names, chain)]
    assert len(roles) == 1, f"not exactly one known chain in {names}"
    return roles[0]


def _contains(names: list[str], chain: list[str]) -> bool:
    return any(names[index : index + len(chain)] == chain for index in range(len(names)))


def assert_known_chains(backtrace: Backtrace) -> dict[str, list[int]]:
    """Every thread walks to the end of its stack through its chain; returns pcs by role."""
    by_role, names_by_role = {}, {}
    for thread in backtrace.threads:
        names = functions([frame.function for frame in thread.frames])
        assert thread.complete, f"thread {thread.tid} stopped early: {thread.stop_text}\n{names}"
        by_role[role_of(names)] = [frame.pc for frame in thread.frames]
        names_by_role[role_of(names)] = names
    assert set(by_role) == set(CHAINS), by_role
    # The main thread by its chain: the thread QEMU reports first is the one
    # the stopping signal landed on, any of the three.
    assert names_by_role["main"][-1] == "_start", names_by_role["main"]
    return by_role


def assert_alive(program: RunningProgram, pid: int | None = None) -> None:
    """The target runs on, free of any debugger: it answers SIGUSR2 with "alive"."""
    os.kill(program.pid if pid is None else pid, signal.SIGUSR2)
    program.wait_for_line(b"alive\n", time.monotonic() + 10)


# -- QEMU user mode ------------------------------------------------------------------


class QemuStub:
    """``qemu-ARCH -g PORT`` running a test program; stopped with SIGUSR1 once it is ready."""

    def __init__(self, arch: str, exe: Path, *args: str, **popen: Any) -> None:
        """``popen`` adds ``subprocess.Popen`` arguments for QEMU."""
        self.port = free_port()
        sysroot = ["-L", str(AARCH64_SYSROOT)] if arch == "aarch64" else []
        self.program = RunningProgram(
            Path(tool(f"qemu-{arch}")), ["-g", str(self.port), *sysroot, str(exe), *args], **popen
        )
        wait_listening(self.port)

    def stop_when_ready(self, busy: tuple[str, ...] = ()) -> threading.Thread:
        """In the background: wait until the guest is parked, then stop it with SIGUSR1.

        Parked: it printed "ready" and every thread of QEMU sleeps (the guest's
        threads are QEMU's) but the ``busy`` ones, so each is in the blocking
        call its chain ends in.
        """

        def stop() -> None:
            self.program.wait_ready(busy, SERVE_TIMEOUT)
            os.kill(self.program.pid, signal.SIGUSR1)

        thread = threading.Thread(target=stop, daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> QemuStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.program.stop()


def qemu_backtrace(stub: QemuStub, stats: dict[str, int], **options: object) -> Backtrace:
    stopper = stub.stop_when_ready()
    address = f"127.0.0.1:{stub.port}"
    backtrace = gdb_remote(address, after=SERVE_TIMEOUT, stats=stats, **options)  # type: ignore[arg-type]
    stopper.join(timeout=5)
    return backtrace


@pytest.mark.parametrize("variant", ["remote-O0", "remote-O2", "remote-O2-pac"])
def test_qemu_aarch64_known_chains(remote_build: Path, variant: str) -> None:
    """arm64 under qemu-aarch64 -g: every thread's chain, pointer authentication stripped."""
    tool("aarch64-linux-gnu-gcc")
    stats: dict[str, int] = {}
    with QemuStub("aarch64", remote_build / "build-aarch64" / variant) as stub:
        backtrace = qemu_backtrace(stub, stats, sysroot=str(AARCH64_SYSROOT))
        assert backtrace.arch == "aarch64"
        assert_known_chains(backtrace)
        assert_alive(stub.program)
    assert 0 < stats["round_trips"] <= MAX_ROUND_TRIPS, stats
    assert backtrace.problems == []


def test_qemu_executable_given_and_checked(remote_build: Path) -> None:
    """EXE stands in for the stub's own idea of the program, if the auxiliary vector agrees."""
    tool("aarch64-linux-gnu-gcc")
    exe = remote_build / "build-aarch64" / "remote-O2"
    with QemuStub("aarch64", exe) as stub:
        backtrace = qemu_backtrace(stub, {}, executable=str(exe), sysroot=str(AARCH64_SYSROOT))
        assert_known_chains(backtrace)
    with QemuStub("aarch64", exe) as stub:
        wrong = remote_build / "build-aarch64" / "remote-O0"
        with pytest.raises(UsageError, match="is not the target's executable"):
            gdb_remote(f"127.0.0.1:{stub.port}", str(wrong), sysroot=str(AARCH64_SYSROOT))
        stub.program.wait_for_line(b"ready\n", time.monotonic() + 10)  # let go all the same
        assert_alive(stub.program)


def test_qemu_x86_64_known_chains(remote_build: Path) -> None:
    stats: dict[str, int] = {}
    with QemuStub("x86_64", remote_build / "build" / "remote-O2") as stub:
        backtrace = qemu_backtrace(stub, stats)
        assert backtrace.arch == "x86_64"
        assert_known_chains(backtrace)
        assert_alive(stub.program)
    assert 0 < stats["round_trips"] <= MAX_ROUND_TRIPS, stats


def gdb_multiarch_backtraces(stub: QemuStub, exe: Path, busy: tuple[str, ...] = ()) -> Backtraces:
    """gdb-multiarch on its own QEMU: connect, continue until SIGUSR1, print frames, detach."""
    stopper = stub.stop_when_ready(busy)
    argv = [
        tool("gdb-multiarch"), "-batch", "-nx",
        "-iex", "set debuginfod enabled off",
        "-iex", f"set sysroot {AARCH64_SYSROOT}",
        "-ex", f"target remote 127.0.0.1:{stub.port}",
        "-ex", "continue",
        "-ex", "set $lu_max_frames = 0",
        "-x", str(GDB_SCRIPT),
        "-ex", "detach",
        str(exe),
    ]  # fmt: skip
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False
    )
    stopper.join(timeout=5)
    for line in result.stdout.splitlines():
        if line.startswith(GDB_MARKER):
            threads = json.loads(line[len(GDB_MARKER) :])
            return {
                t["tid"]: [OracleFrame(f["pc"], f["name"], f["kind"]) for f in t["frames"]]
                for t in threads
            }
    raise AssertionError(f"gdb-multiarch printed no frames:\n{result.stdout}\n{result.stderr}")


@pytest.mark.parametrize("variant", ["remote-O0", "remote-O2"])
def test_qemu_aarch64_matches_gdb_multiarch(remote_build: Path, variant: str) -> None:
    """Thread by thread, the pcs gdb-multiarch finds through the same kind of stub."""
    tool("aarch64-linux-gnu-gcc")
    exe = remote_build / "build-aarch64" / variant
    with QemuStub("aarch64", exe) as stub:
        oracle = gdb_multiarch_backtraces(stub, exe)
    with QemuStub("aarch64", exe) as stub:
        ours = assert_known_chains(qemu_backtrace(stub, {}, sysroot=str(AARCH64_SYSROOT)))
    theirs = {}
    for frames in oracle.values():
        names = functions([frame.name for frame in frames])
        theirs[role_of(names)] = pcs(frames)
    assert ours == theirs


# -- gdbserver --------------------------------------------------------------------


def tracer_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0


@pytest.fixture
def remote_program(remote_build: Path) -> Iterator[Callable[..., RunningProgram]]:
    started: list[RunningProgram] = []

    def run(name: str = "remote-O2", *args: str) -> RunningProgram:
        program = start_program(remote_build / "build", name, *args)
        started.append(program)
        return program

    yield run
    for program in started:
        program.stop()


def test_gdbserver_attach_matches_gdb(remote_program, gdb: str) -> None:
    """x86_64 through gdbserver --attach: gdb's pcs for every thread, then the target runs on."""
    program = remote_program()
    stats: dict[str, int] = {}
    with GdbServer(program.pid) as server:
        backtrace = gdb_remote(f"127.0.0.1:{server.port}", stats=stats)
        server.process.wait(timeout=10)  # a detached gdbserver --attach exits
    assert tracer_of(program.pid) == 0
    assert backtrace.pid == program.pid
    assert {thread.name for thread in backtrace.threads} == {"remote-O2", "sleeper", "reader"}
    assert_known_chains(backtrace)
    # Two stops (gdbserver's, then gdb's own attach): a thread in read() may be seen before
    # and after its syscall (2 bytes) was restarted.
    assert_matches_gdb(backtrace, gdb_backtraces(program.pid, gdb=gdb), restarted_syscall=2)
    assert_alive(program)
    assert 0 < stats["round_trips"] <= MAX_ROUND_TRIPS, stats
    VALIDATOR.validate(json.loads(format_json(backtrace)))  # the --json contract holds


def test_gdbserver_multi_attaches_and_detaches(remote_program) -> None:
    """gdbserver --multi: liveunwind attaches to the pid, detaches, and the server stays up."""
    program = remote_program("remote-O0")
    with GdbServer(None) as server:
        with pytest.raises(RemoteError, match="has no process"):
            gdb_remote(f"127.0.0.1:{server.port}")
        wait_listening(server.port)  # gdbserver --multi listens again after a hang-up
        backtrace = gdb_remote(f"127.0.0.1:{server.port}", attach=program.pid)
        assert_known_chains(backtrace)
        assert tracer_of(program.pid) == 0
        assert server.process.poll() is None
        again = gdb_remote(f"127.0.0.1:{server.port}", attach=program.pid)
        assert [t.tid for t in again.threads] == [t.tid for t in backtrace.threads]
    assert_alive(program)


def group_leader(path: Path) -> RunningProgram:
    """A test program in a process group of its own, as gdbserver's ^C needs."""
    return RunningProgram(path, [], process_group=0)


def test_gdbserver_interrupt_after(remote_build: Path) -> None:
    """``after``: the target runs on a while, then ^C stops it (a signal to its process group)."""
    program = group_leader(remote_build / "build" / "remote-O2")
    try:
        program.wait_for_line(b"ready\n", time.monotonic() + 10)
        with GdbServer(program.pid) as server:
            started = time.monotonic()
            backtrace = gdb_remote(f"127.0.0.1:{server.port}", after=0.5)
            assert time.monotonic() - started >= 0.5
        assert "stopped by SIGINT" in {thread.state for thread in backtrace.threads}
        assert_known_chains(backtrace)
        assert_alive(program)  # SIGINT was ours: not passed on, so the program lives
    finally:
        program.stop()


def test_interrupted_while_waiting_still_detaches(remote_build: Path) -> None:
    """^C to liveunwind during ``after``: the target is stopped and detached on the way out."""
    program = group_leader(remote_build / "build" / "remote-O2")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        program.wait_for_line(b"ready\n", time.monotonic() + 10)
        with GdbServer(program.pid) as server:
            timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                gdb_remote(f"127.0.0.1:{server.port}", after=SERVE_TIMEOUT)
            server.process.wait(timeout=10)  # detached: a gdbserver --attach exits
        assert tracer_of(program.pid) == 0
        assert_alive(program)
    finally:
        signal.signal(signal.SIGINT, previous)
        program.stop()


# -- bounded failures -------------------------------------------------------------


class Forwarder:
    """A TCP relay in this process to a stub's port, as socat or ``ssh -L`` would be."""

    def __init__(self, port: int) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._target = port
        self._thread = threading.Thread(target=self._relay, daemon=True)
        self._thread.start()

    def _relay(self) -> None:
        with (
            self._listener.accept()[0] as near,
            socket.create_connection(("127.0.0.1", self._target)) as far,
        ):
            ends = {near: far, far: near}
            while True:
                readable, _, _ = select.select(list(ends), [], [], 60)
                if not readable:
                    return
                for end in readable:
                    data = end.recv(65536)
                    if not data:
                        return
                    ends[end].sendall(data)

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self._thread.join(timeout=5)


def test_qemu_behind_a_relay_is_not_signalled(remote_build: Path) -> None:
    """The port's owner is not QEMU (a relay): no signal is sent, a bounded error, it runs on.

    No ^C is sent either: QEMU 7.2 would leave it unread and die of SIGPIPE
    at the guest's next signal once liveunwind has hung up.  The relay is
    this test's own process, which a SIGINT would interrupt.
    """
    exe = remote_build / "build" / "remote-O2"
    with QemuStub("x86_64", exe) as stub, Forwarder(stub.port) as relay:
        started = time.monotonic()
        with pytest.raises(RemoteError, match="is not QEMU") as error:
            gdb_remote(f"127.0.0.1:{relay.port}", after=1.0, timeout=1.0)
        assert "QEMU user mode does not stop a running guest" in str(error.value)
        assert f"pid {os.getpid()}" in str(error.value)
        assert time.monotonic() - started < 5
        stub.program.wait_for_line(b"ready\n", time.monotonic() + 10)
        assert_alive(stub.program)
        assert_alive(stub.program)


def cpu_seconds(pid: int) -> float:
    """User and system time the process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_qemu_running_guest_stopped_by_sigint_to_qemu(remote_build: Path) -> None:
    """QEMU 7.2 ignores ^C: SIGINT to its process stops the guest, which runs on without it.

    The guest spins in one thread; liveunwind lets it run, stops it through
    QEMU's process, and lets it go.  gdb-multiarch reads its own QEMU (QEMU
    7.2 never serves a second connection): every frame but frame 0, which
    moves, has the same pc.  Afterwards the spinner still burns CPU and the
    guest answers SIGUSR2, so SIGINT never reached it.
    """
    tool("aarch64-linux-gnu-gcc")
    exe = remote_build / "build-aarch64" / "remote-O2"
    with QemuStub("aarch64", exe, "spin") as stub:
        oracle = gdb_multiarch_backtraces(stub, exe, busy=("spinner",))
    theirs = {
        role_of(functions([f.name for f in frames]), SPIN_CHAINS): frames
        for frames in oracle.values()
    }
    with QemuStub("aarch64", exe, "spin") as stub:
        backtrace = gdb_remote(
            f"127.0.0.1:{stub.port}", sysroot=str(AARCH64_SYSROOT), after=3.0, verbose=True
        )
        stub.program.wait_for_line(b"ready\n", time.monotonic() + 10)
        running = cpu_seconds(stub.program.pid)
        # A busy machine gives the spinner a few percent of a core: any progress counts.
        wait_until(
            lambda: cpu_seconds(stub.program.pid) > running + 0.05, 30, "the guest to spin on"
        )
        assert_alive(stub.program)
        assert stub.program.popen.poll() is None
    how = f"the target was stopped by SIGINT sent to QEMU (pid {stub.program.pid})"
    assert any(problem.startswith(how) for problem in backtrace.problems), backtrace.problems
    # QEMU user mode stops only the thread the signal landed on (the kernel
    # offers it to the main thread first); a spinner that ran on while its
    # registers were read is reported running, without frames.
    ours, running = {}, []
    for thread in backtrace.threads:
        names = functions([frame.function for frame in thread.frames])
        if not thread.frames:
            assert thread.stop_reason is StopReason.NOT_STOPPED, thread.stop_text
            assert thread.state.startswith("running: QEMU user mode stops only"), thread.state
            running.append(thread.tid)
            continue
        assert thread.complete, f"{thread.tid}: {thread.stop_text} {names}"
        ours[role_of(names, SPIN_CHAINS)] = thread.frames
    assert set(ours) | ({"spinner"} if running else set()) == set(SPIN_CHAINS), ours
    assert len(running) <= 1
    # Frame 0 moves: the spinner's, and a system call's, which QEMU rewinds to
    # the svc to restart it when the signal lands on that thread.
    for role, frames in ours.items():
        assert [f.pc for f in frames[1:]] == pcs(theirs[role])[1:], role
        assert frames[0].function == theirs[role][0].name, role
        assert abs(frames[0].pc - theirs[role][0].pc) <= (0x100 if role == "spinner" else 4)


# -- the command --------------------------------------------------------------------------


def command(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", "gdb-remote", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_command_silent_stub_exits_2_with_one_line_within_ten_seconds() -> None:
    with ScriptedStub(silent) as stub:
        started = time.monotonic()
        result = command(f"127.0.0.1:{stub.port}")
        elapsed = time.monotonic() - started
    assert result.returncode == 2 and elapsed < 10
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert "did not answer" in result.stderr and "Traceback" not in result.stderr


def test_command_rejects_a_timeout_of_zero() -> None:
    result = command("127.0.0.1:1", "--timeout", "0")
    assert result.returncode == 64 and "--timeout" in result.stderr


def test_command_aarch64_under_qemu_json_and_stats(remote_build: Path) -> None:
    """The command end to end: every thread's known chain, the counters, the target runs on."""
    tool("aarch64-linux-gnu-gcc")
    with QemuStub("aarch64", remote_build / "build-aarch64" / "remote-O2") as stub:
        stopper = stub.stop_when_ready()
        result = command(
            f"127.0.0.1:{stub.port}",
            "--sysroot",
            str(AARCH64_SYSROOT),
            "--after",
            str(SERVE_TIMEOUT),
            "--json",
            "--stats",
        )
        stopper.join(timeout=5)
        assert result.returncode == 0, result.stderr
        assert_alive(stub.program)
    document = json.loads(result.stdout)
    assert document["arch"] == "aarch64" and document["complete"]
    names = [[frame["function"] for frame in thread["frames"]] for thread in document["threads"]]
    assert sorted(role_of(functions(thread)) for thread in names) == sorted(CHAINS)
    VALIDATOR.validate(document)
    assert re.search(r"protocol: round trips \d+", result.stderr), result.stderr
