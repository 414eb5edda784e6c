"""``liveunwind gdb-remote`` on each platform's own programs (testprogs/remote, built here).

In the arm64 container the programs run under ``qemu-aarch64-static -g PORT``
— the host's static QEMU, which the kernel runs directly — and liveunwind
(itself arm64 under QEMU user mode) unwinds them through QEMU's GDB stub:
live arm64 unwinding without ptrace. gdb, from the same container, reads the
same program through a second stub as the oracle (QEMU places everything at
the same addresses every run). Where ptrace works, gdbserver --attach serves
a running program instead.

The programs sign their return addresses, and QEMU's default CPU (``max``)
authenticates them. QEMU 7.2's stub (Debian 12's) does not describe the
pointer-authentication registers, so gdb 13 through it cannot strip the codes
and stops at the first signed return address; the oracle therefore runs the
program on ``-cpu max,pauth=off`` (PACIASP/AUTIASP are hints there: nothing is
signed, everything else is the same), and a third run checks that under
``max`` gdb does see signed return addresses, so liveunwind really stripped them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.oracles import GDB_MARKER, GDB_SCRIPT, OracleFrame, pcs
from tests.support.platform import (
    COMMAND_TIMEOUT,
    UNDER_QEMU_USER,
    backtrace_json,
    contains_chain,
    functions,
    require_ptrace,
    start_parked,
    tool,
)
from tests.support.ports import free_port, wait_listening
from tests.support.programs import RunningProgram

pytestmark = pytest.mark.integration

REMOTE = Path(__file__).resolve().parents[2] / "testprogs" / "remote" / "build"
#: remote.c's chains by thread role, innermost first.
CHAINS = {
    "main": ["wait_3", "wait_2", "wait_1", "main"],
    "sleeper": ["sleep_3", "sleep_2", "sleep_1", "start"],
    "reader": ["read_2", "read_1", "start"],
}
#: Seconds a program under a stub may take to get ready (QEMU, emulated debuggers).
READY_TIMEOUT = 300.0


def chains_by_role(threads: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each thread's role (whose chain it shows) -> its pcs; every walk must be complete."""
    found = {}
    for thread in threads:
        names = functions(thread)
        assert thread["complete"], (thread["stop_reason"], names)
        roles = [role for role, chain in CHAINS.items() if contains_chain(names, chain)]
        assert len(roles) == 1, names
        found[roles[0]] = [frame["pc"] for frame in thread["frames"]]
    assert set(found) == set(CHAINS), found
    return found


def assert_alive(program: RunningProgram) -> None:
    """The target runs on, free of any debugger: it answers SIGUSR2 with "alive"."""
    os.kill(program.pid, signal.SIGUSR2)
    program.wait_for_line(b"alive\n", time.monotonic() + READY_TIMEOUT)


#: User-space addresses have 48 bits here; a return address above them carries a PAC.
ADDRESS_BITS = 48


class QemuStub:
    """``qemu-aarch64-static -cpu CPU -g PORT remote-O2``; stopped with SIGUSR1 once the guest
    is ready (QEMU 7.2 ignores a debugger's ^C while the guest runs; remote.c ignores SIGUSR1)."""

    def __init__(self, exe: Path, cpu: str = "max") -> None:
        self.port = free_port()
        qemu = Path(tool("qemu-aarch64-static"))
        self.program = RunningProgram(qemu, ["-cpu", cpu, "-g", str(self.port), str(exe)])
        wait_listening(self.port, timeout=60.0)

    def stop_when_ready(self) -> threading.Thread:
        def stop() -> None:
            # Parked: "ready", and every thread of QEMU (the guest's are QEMU's) sleeps.
            self.program.wait_ready((), READY_TIMEOUT)
            os.kill(self.program.pid, signal.SIGUSR1)

        thread = threading.Thread(target=stop, daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> QemuStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.program.stop()


def gdb_through_stub(stub: QemuStub, exe: Path, gdb: str) -> list[list[OracleFrame]]:
    """gdb connected to the stub: continue until SIGUSR1, every thread's frames, detach."""
    stopper = stub.stop_when_ready()
    argv = [
        gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off",
        "-ex", f"target remote 127.0.0.1:{stub.port}", "-ex", "continue",
        "-ex", "set $lu_max_frames = 0", "-x", str(GDB_SCRIPT), "-ex", "detach", str(exe),
    ]  # fmt: skip
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL
    )
    stopper.join(timeout=READY_TIMEOUT)
    for line in result.stdout.splitlines():
        if line.startswith(GDB_MARKER):
            return [
                [OracleFrame(f["pc"], f["name"], f["kind"]) for f in thread["frames"]]
                for thread in json.loads(line[len(GDB_MARKER) :])
            ]
    raise AssertionError(f"gdb printed no frames:\n{result.stdout}\n{result.stderr}")


def test_qemu_user_stub_matches_gdb(platform_name: str, gdb: str) -> None:
    """arm64 under qemu-aarch64-static -g: every thread's chain, PAC stripped, gdb's pcs."""
    if not UNDER_QEMU_USER:
        pytest.skip("QEMU's GDB stub is the arm64 container's way in; ptrace works here")
    exe = REMOTE / "remote-O2"
    with QemuStub(exe) as stub:
        stopper = stub.stop_when_ready()
        document = backtrace_json(
            "gdb-remote", f"127.0.0.1:{stub.port}", "--after", str(READY_TIMEOUT), "--timeout", "60"
        )
        stopper.join(timeout=READY_TIMEOUT)
        assert document["arch"] == "aarch64"
        ours = chains_by_role(document["threads"])
        assert_alive(stub.program)
    with QemuStub(exe, "max,pauth=off") as stub:
        oracle = gdb_through_stub(stub, exe, gdb)
    theirs = {}
    for frames in oracle:
        names = [frame.name or "??" for frame in frames]
        roles = [role for role, chain in CHAINS.items() if contains_chain(names, chain)]
        assert len(roles) == 1, names
        theirs[roles[0]] = pcs(frames)
    assert ours == theirs
    with QemuStub(exe) as stub:
        signed = gdb_through_stub(stub, exe, gdb)
    assert any(frame.pc >> ADDRESS_BITS for frames in signed for frame in frames), signed


def test_gdbserver_attach(platform_name: str) -> None:
    """gdbserver --attach serving a running program: every chain, and the program runs on."""
    require_ptrace()
    program = start_parked(REMOTE / "remote-O2")
    try:
        port = free_port()
        where = f"127.0.0.1:{port}"
        server = subprocess.Popen(
            [tool("gdbserver"), "--attach", where, str(program.pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_listening(port, timeout=60.0)
            document = backtrace_json("gdb-remote", where, "--timeout", "60")
            server.wait(timeout=60)  # a detached gdbserver --attach exits
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
        assert document["pid"] == program.pid
        chains_by_role(document["threads"])
        assert_alive(program)
    finally:
        program.stop()
