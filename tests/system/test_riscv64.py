"""riscv64 (RV64GC, lp64d): liveunwind against gdb-multiarch on programs under QEMU user mode.

The programs are the host test programs built for riscv64 by
testprogs/riscv64/Makefile (threads, sighandler, recurse, deepstacks,
remote) in every variant: -O0/-O2, with and without frame pointers,
dynamically and statically linked.  Each runs under ``qemu-riscv64 -g``.

Most tests hold one target at one stopping point (tests/support/riscv64.py,
:class:`Held`): the program runs until it printed "ready", its own signals
passed on, then SIGUSR2 stops it; gdb-multiarch and then
``liveunwind gdb-remote`` connect one after the other to the same stopped
target.  So both see the same registers and the same stacks, and every
thread's frames must be gdb's frames, pc for pc (the physical ones: no
inline frames), with the functions of the program's own source named
alike, each walk complete, and each thread's chain of the program's own
functions the one its source promises.

What gdb-multiarch 13 cannot do there, and how the tests deal with it:

- Debian 12's riscv64 glibc has unwind tables (.eh_frame) only for some of
  its functions (810 FDEs in libc.so.6) and libc.so.6 has no .symtab: for
  frames in libc functions that have neither, gdb's prologue analyser has
  no function start, and gdb stops — in a dynamic program's main thread
  after ``pthread_join``'s inner function, in every other thread after
  libc's unnamed ``start_thread``.  There gdb's frames must be the start of
  liveunwind's, and liveunwind's walk must still be complete.  In static
  programs (full symbol table) gdb walks to the end and the frames must be
  equal.
- gcc 12 for riscv64 does not default to -fasynchronous-unwind-tables: the
  programs' own functions have CFI only in .debug_frame (they are built -g).

Cores: QEMU 7.2 writes no riscv64 core, and gdb-multiarch's ``gcore``
through QEMU's stub writes NT_PRSTATUS notes of its x86_64 host's size (336
bytes, which gdb cannot read back) and no stacks.  Real riscv64 cores come
from a riscv64 kernel: test_riscv64_cores.py reads ones the riscv64 VM
wrote (docs/integration.md).

One test runs the way a user would, without the relay: liveunwind connects
to QEMU itself and waits (``--after``) for the SIGUSR1 the test sends once
the program is ready, as the aarch64 tests in test_gdb_remote.py do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.oracles import (
    GDB_SCRIPT,
    Backtraces,
    describe,
    parse_gdb,
    physical,
)
from tests.support.ports import free_port, wait_listening
from tests.support.programs import RunningProgram
from tests.support.riscv64 import SYSROOT, Held

FLAVOURS = ["O0", "O0-fp", "O0-nofp", "O2", "O2-fp", "O2-nofp"]
VARIANTS = FLAVOURS + [f"{flavour}-static" for flavour in FLAVOURS]
#: Seconds liveunwind or gdb-multiarch may take for one program.
COMMAND_TIMEOUT = 600.0

# -- what each program's threads must show: its own functions, innermost first ----------

_CHAIN = [f"chain_{n:02d}" for n in range(30, 0, -1)]  # chain_30 (innermost) .. chain_01
THREADS_CHAINS = {
    "sleeper": ["block_in_nanosleep", "start"],
    "reader": ["block_in_read", "start"],
    "condwait": ["block_in_cond_wait", "start"],
    "poller": ["block_in_poll", "start"],
    "selecter": ["block_in_select", "start"],
    "epoller": ["block_in_epoll_wait", "start"],
    "acceptor": ["block_in_accept", "start"],
    "deep": ["block_in_nanosleep", *_CHAIN, "start"],
    "main": ["main"],
}
SIGHANDLER_CHAINS = {
    "busy": [
        "handler_block", "handler_middle", "on_signal",
        "busy_loop", "middle_busy", "outer_busy", "start",
    ],
    "syscall": [
        "handler_block", "handler_middle", "on_signal",
        "blocked_read", "middle_sys", "outer_sys", "start",
    ],
    "main": ["main"],
}  # fmt: skip
RECURSE_DEPTH = 50
RECURSE_CHAINS = {
    # rec_a(50) -> rec_b(49) -> rec_c(48) -> ... -> the call with n = 1 at the bottom.
    "recursion": [
        "block_at_bottom",
        *[("rec_a", "rec_b", "rec_c")[(RECURSE_DEPTH - 1 - i) % 3] for i in range(RECURSE_DEPTH)],
        "recurse_main",
    ],
    "main": ["main"],
}
REMOTE_CHAINS = {
    "main": ["wait_3", "wait_2", "wait_1", "main"],
    "sleeper": ["sleep_3", "sleep_2", "sleep_1", "start"],
    "reader": ["read_2", "read_1", "start"],
}
#: The functions each program defines (the names compared with gdb's).
OWN_FUNCTIONS = {
    "threads": {name for chain in THREADS_CHAINS.values() for name in chain}
    | {"spin_step", "spin_forever"},
    "sighandler": {name for chain in SIGHANDLER_CHAINS.values() for name in chain},
    "recurse": {name for chain in RECURSE_CHAINS.values() for name in chain},
    "deepstacks": {"park", "descend", "deep", "main"},
    "remote": {name for chain in REMOTE_CHAINS.values() for name in chain}
    | {"spin_1", "spin_2", "all_ready", "ignore", "say_alive"},
}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (apt-get install gcc-riscv64-linux-gnu "
                    "libc6-dev-riscv64-cross qemu-user gdb-multiarch)")  # fmt: skip
    return path


# -- the two unwinders ------------------------------------------------------------------


def _gdb_argv(*setup: str) -> list[str]:
    argv = [_tool("gdb-multiarch"), "-batch", "-nx", "-iex", "set debuginfod enabled off"]
    argv += ["-iex", f"set sysroot {SYSROOT}"]
    for command in setup:
        argv += ["-ex", command]
    return [*argv, "-ex", "set $lu_max_frames = 0", "-x", str(GDB_SCRIPT)]


def gdb_through(held: Held, exe: Path) -> Backtraces:
    """gdb-multiarch's frames of every thread of the held target (the relay keeps it stopped)."""
    session = held.serve_one()
    argv = [*_gdb_argv(f"target remote 127.0.0.1:{held.port}"), "-ex", "detach", str(exe)]
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    session.join(timeout=30)
    return parse_gdb(result)


def liveunwind(*args: str) -> dict[str, Any]:
    """``liveunwind ARGS --json --max-frames 0``: the document (exit 0 or 1 only)."""
    result = run_cli(*args, "--json", "--max-frames", "0", timeout=COMMAND_TIMEOUT)
    assert result.returncode in (0, 1), f"liveunwind {' '.join(args)}:\n{result.stderr}"
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def liveunwind_through(held: Held) -> dict[str, Any]:
    """``liveunwind gdb-remote`` on the held target, through the relay."""
    session = held.serve_one()
    document = liveunwind(
        "gdb-remote", f"127.0.0.1:{held.port}", "--sysroot", str(SYSROOT), "--timeout", "60"
    )
    session.join(timeout=30)
    return document


# -- comparing ------------------------------------------------------------------------------


def own_chain(names: list[str | None], own: set[str]) -> list[str]:
    """The program's own functions among ``names``, in order."""
    return [name for name in names if name in own]


def role_of(chain: list[str], chains: dict[str, list[str]]) -> str:
    roles = [role for role, expected in chains.items() if chain == expected]
    assert len(roles) == 1, f"the chain {chain} is none of {sorted(chains)}"
    return roles[0]


def describe_ours(thread: dict[str, Any]) -> str:
    lines = [f"liveunwind ({thread['stop_reason']}: {thread['stop_detail']}):"]
    for frame in thread["frames"]:
        mark = " [signal]" if frame["signal_frame"] else ""
        lines.append(
            f"#{frame['index']:<3} {frame['pc']:#x} {frame['function']} ({frame['method']}){mark}"
        )
    return "\n".join(lines)


def assert_same_as_gdb(
    document: dict[str, Any], oracle: Backtraces, program: str, *, static: bool
) -> None:
    """Thread by thread: gdb's pcs (all of them, or — dynamic programs — as far as gdb got).

    gdb may stop short only in a dynamic program, only at a frame it could
    not name (a libc function without symbol and without unwind table);
    then its frames must begin liveunwind's.  Where gdb names one of the
    program's own functions, liveunwind must name the frame alike.
    """
    own = OWN_FUNCTIONS[program]
    ours = {thread["tid"]: thread for thread in document["threads"]}
    assert set(ours) == set(oracle), f"liveunwind saw threads {sorted(ours)}, gdb {sorted(oracle)}"
    for tid, frames in oracle.items():
        theirs = physical(frames)
        thread = ours[tid]
        got = [frame["pc"] for frame in thread["frames"]]
        want = [frame.pc for frame in theirs]
        message = (
            f"thread {tid} differs from gdb-multiarch\n{describe_ours(thread)}\n"
            f"gdb:\n{describe(theirs)}"
        )
        if got != want:
            gdb_gave_up = not static and theirs and theirs[-1].name is None
            assert gdb_gave_up and len(got) > len(want) and got[: len(want)] == want, message
        for frame, their in zip(thread["frames"], theirs):
            if their.name in own:
                assert frame["function"] == their.name, message
            if their.kind == "sigtramp":
                assert frame["signal_frame"], f"gdb's signal frame is not one here\n{message}"
        assert thread["complete"], f"thread {tid} stopped early\n{message}"


def assert_chains(document: dict[str, Any], program: str, chains: dict[str, list[str]]) -> None:
    """Every thread shows one of the program's chains, each chain once."""
    own = OWN_FUNCTIONS[program]
    roles = []
    for thread in document["threads"]:
        names = [frame["function"] for frame in thread["frames"]]
        roles.append(role_of(own_chain(names, own), chains))
    assert sorted(roles) == sorted(chains), roles


def is_static(variant: str) -> bool:
    return variant.endswith("-static")


# -- held targets: liveunwind gdb-remote against gdb-multiarch --------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_threads_match_gdb_multiarch(riscv64_build: Path, variant: str) -> None:
    """threads.c: nine threads in eight kinds of blocking call, one of them 31 calls deep."""
    exe = riscv64_build / f"threads-{variant}"
    with Held(exe) as held:
        oracle = gdb_through(held, exe)
        document = liveunwind_through(held)
    assert document["arch"] == "riscv64"
    assert_same_as_gdb(document, oracle, "threads", static=is_static(variant))
    assert_chains(document, "threads", THREADS_CHAINS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_signal_handler_frames_match_gdb_multiarch(riscv64_build: Path, variant: str) -> None:
    """sighandler.c: two threads inside a SIGUSR1 handler, below QEMU's signal frame.

    QEMU 7.2 puts its sigreturn trampoline (``li a7, 139; ecall``, the bytes
    of the kernel's ``__vdso_rt_sigreturn``) at the start of an anonymous
    page of its own, and the handler returns there: the frame is recognised
    by its code, and the interrupted registers come from the ``rt_sigframe``
    at its sp.  One thread was interrupted mid-loop (its pc is no return
    address), the other in ``read``.
    """
    exe = riscv64_build / f"sighandler-{variant}"
    with Held(exe) as held:
        assert held.passed == [30, 30], held.passed  # the program's two SIGUSR1s went through
        oracle = gdb_through(held, exe)
        document = liveunwind_through(held)
    assert document["arch"] == "riscv64"
    assert_same_as_gdb(document, oracle, "sighandler", static=is_static(variant))
    assert_chains(document, "sighandler", SIGHANDLER_CHAINS)
    for thread in document["threads"]:
        names = [frame["function"] for frame in thread["frames"]]
        if "on_signal" not in names:
            continue
        frames = thread["frames"]
        handler = names.index("on_signal")
        trampoline, interrupted = frames[handler + 1], frames[handler + 2]
        assert trampoline["signal_frame"] and trampoline["method"] != "scan", describe_ours(thread)
        assert sum(frame["signal_frame"] for frame in frames) == 1, describe_ours(thread)
        assert interrupted["method"] == "signal", describe_ours(thread)
        assert interrupted["function"] in ("busy_loop", "read", "__libc_read", "__read"), (
            describe_ours(thread)
        )


@pytest.mark.parametrize("variant", VARIANTS)
def test_recursion_matches_gdb_multiarch(riscv64_build: Path, variant: str) -> None:
    """recurse.c: 50 frames of mutual recursion, the same three return addresses over and over."""
    exe = riscv64_build / f"recurse-{variant}"
    with Held(exe, (str(RECURSE_DEPTH),)) as held:
        oracle = gdb_through(held, exe)
        document = liveunwind_through(held)
    assert_same_as_gdb(document, oracle, "recurse", static=is_static(variant))
    assert_chains(document, "recurse", RECURSE_CHAINS)


@pytest.mark.parametrize("variant", ["O2", "O0-static"])
def test_big_frames_match_gdb_multiarch(riscv64_build: Path, variant: str) -> None:
    """deepstacks.c with two threads of 1 MiB stacks, each nearly filled by 16 KiB frames."""
    exe = riscv64_build / f"deepstacks-{variant}"
    with Held(exe, ("2", "1")) as held:
        oracle = gdb_through(held, exe)
        document = liveunwind_through(held)
    assert_same_as_gdb(document, oracle, "deepstacks", static=is_static(variant))
    own = OWN_FUNCTIONS["deepstacks"]
    chains = sorted(
        own_chain([frame["function"] for frame in thread["frames"]], own)
        for thread in document["threads"]
    )
    assert chains[0] == ["main"], chains
    for chain in chains[1:]:
        assert chain[0] == "park" and chain[-1] == "deep" and len(chain) > 10, chain
        assert set(chain[1:-1]) == {"descend"}, chain


# -- the signal frame itself --------------------------------------------------------------------


def _sigframe_facts(exe: Path) -> dict[str, str]:
    qemu = _tool("qemu-riscv64")
    sysroot = [] if exe.name.endswith("-static") else ["-L", str(SYSROOT)]
    result = subprocess.run(
        [qemu, *sysroot, str(exe)], capture_output=True, text=True, timeout=60, check=True
    )
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


@pytest.mark.parametrize("name", ["sigframe", "sigframe-static"])
def test_signal_frame_reader_and_trampoline(riscv64_build: Path, name: str) -> None:
    """The riscv64 Arch reads the interrupted registers glibc's ucontext_t shows.

    sigframe.c's handler prints the sp it was entered with (the sp at the
    trampoline when it returns), 1 KiB of stack from there, the trampoline's
    bytes, and pc/ra/sp/s0 from ``uc_mcontext.__gregs``; the rt_sigframe is
    siginfo (128 bytes) then ucontext, whose mcontext — pc, then x1..x31 —
    is 176 bytes in: the registers start 304 bytes above that sp.
    """
    from liveunwind.arch import arch_by_name

    facts = _sigframe_facts(riscv64_build / name)
    assert facts["tramp"] == "93 08 b0 08 73 00 00 00"  # li a7, 139; ecall
    assert (int(facts["siginfo_offset"]), int(facts["ucontext_offset"])) == (0, 128)
    assert int(facts["mcontext_offset"]) == 304
    arch = arch_by_name("riscv64")
    assert arch.sigreturn_code == bytes.fromhex(facts["tramp"].replace(" ", ""))
    sp = int(facts["sp"], 16)
    frame = bytes.fromhex(facts["frame"])

    def read(address: int, size: int) -> bytes:
        assert sp <= address and address + size <= sp + len(frame), (hex(address), size)
        return frame[address - sp : address - sp + size]

    registers = arch.signal_frame_reader(read, sp)
    assert registers[arch.pc] == int(facts["pc"], 16)
    assert registers[arch.sp] == int(facts["sp_interrupted"], 16)
    assert registers[arch.fp] == int(facts["s0"], 16)
    assert registers[arch.return_address] == int(facts["ra"], 16)
    assert arch.sp == 2 and arch.fp == 8 and arch.return_address == 1
    assert arch.link_register == 1 and arch.red_zone == 0 and arch.elf_machine == 243


def test_qemu_riscv64_stub_layout(riscv64_build: Path) -> None:
    """What liveunwind relies on in QEMU 7.2's stub: "riscv:rv64", a 33-register ``g`` block.

    The general registers come first, named by their ABI names (x8 is "fp",
    not "s0"), then the pc: 33 registers of 64 bits, 264 bytes.
    """
    exe = riscv64_build / "threads-O2-static"
    with Held(exe) as held:
        client = held.client
        target = client.xfer(b"features", b"target.xml").decode()
        cpu = client.xfer(b"features", b"riscv-64bit-cpu.xml").decode()
        block = client.request(b"g")
    assert "<architecture>riscv:rv64</architecture>" in target
    names = [part.split('"', 1)[0] for part in cpu.split('<reg name="')[1:]]
    abi = ["zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "fp", "s1"]
    abi += [f"a{n}" for n in range(8)] + [f"s{n}" for n in range(2, 12)] + ["t3", "t4", "t5", "t6"]
    assert names == [*abi, "pc"]
    assert len(block) == 2 * 33 * 8


# -- the way a user runs it: liveunwind straight to QEMU, stopped by a signal --------------------


class DirectStub:
    """``qemu-riscv64 -g PORT remote-VARIANT``; SIGUSR1 (which remote.c ignores) stops it."""

    def __init__(self, exe: Path) -> None:
        self.port = free_port()
        sysroot = [] if exe.name.endswith("-static") else ["-L", str(SYSROOT)]
        self.program = RunningProgram(
            Path(_tool("qemu-riscv64")), ["-g", str(self.port), *sysroot, str(exe)]
        )
        wait_listening(self.port, timeout=30.0)

    def stop_when_ready(self) -> threading.Thread:
        def stop() -> None:
            self.program.wait_for_line(b"ready\n", time.monotonic() + 60)
            time.sleep(0.3)
            os.kill(self.program.pid, signal.SIGUSR1)

        thread = threading.Thread(target=stop, daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> DirectStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.program.stop()


@pytest.mark.parametrize("variant", ["O2", "O0-nofp-static"])
def test_direct_gdb_remote_matches_gdb_multiarch(riscv64_build: Path, variant: str) -> None:
    """``liveunwind gdb-remote --after`` straight to QEMU, then the target runs on.

    gdb-multiarch gets a QEMU of its own running the same program: QEMU
    places everything at the same addresses every run, so the pcs must be
    the same.
    """
    exe = riscv64_build / f"remote-{variant}"
    with DirectStub(exe) as stub:
        stopper = stub.stop_when_ready()
        document = liveunwind(
            "gdb-remote", f"127.0.0.1:{stub.port}", "--sysroot", str(SYSROOT),
            "--after", "60", "--timeout", "60",
        )  # fmt: skip
        stopper.join(timeout=60)
        os.kill(stub.program.pid, signal.SIGUSR2)  # remote.c answers "alive": it runs on
        stub.program.wait_for_line(b"alive\n", time.monotonic() + 30)
    assert document["arch"] == "riscv64"
    with DirectStub(exe) as stub:
        stopper = stub.stop_when_ready()
        argv = [
            *_gdb_argv(f"target remote 127.0.0.1:{stub.port}", "continue"), "-ex", "kill",
            str(exe),
        ]  # fmt: skip
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        stopper.join(timeout=60)
    oracle = parse_gdb(result)
    assert_chains(document, "remote", REMOTE_CHAINS)
    # Different runs, different thread ids: each of gdb's threads is the one of ours whose
    # frames begin with its frames (gdb stops early in the dynamic main thread).
    renamed = {**document, "threads": []}
    for tid, frames in oracle.items():
        want = [frame.pc for frame in physical(frames)]
        matches = [
            thread
            for thread in document["threads"]
            if [frame["pc"] for frame in thread["frames"]][: len(want)] == want
        ]
        assert len(matches) == 1, f"{len(matches)} threads begin like gdb's\n{describe(frames)}"
        renamed["threads"].append({**matches[0], "tid": tid})
    assert_same_as_gdb(renamed, oracle, "remote", static=is_static(variant))
