"""Live processes through ptrace, on the platform's own programs, frame for frame against gdb.

Runs where ptrace works: the x86_64 container (started with
``--cap-add=SYS_PTRACE``) and the arm64 VM, whose test programs and Debian's
libraries sign their return addresses (pointer authentication, -cpu max).
In the arm64 container the programs run under QEMU user mode, which has no
ptrace: these tests skip there, saying so, and test_gdb_remote.py unwinds the
same programs through QEMU's GDB stub instead.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import platform
import signal
import struct
from pathlib import Path

import pytest

import liveunwind
from liveunwind.frames import Method, StopReason
from tests.support.assertions import assert_matches_gdb
from tests.support.oracles import gdb_backtraces
from tests.support.platform import (
    backtrace_json,
    contains_chain,
    functions,
    require_ptrace,
    thread_named,
    wait_state,
)
from tests.support.programs import RunProgram

pytestmark = pytest.mark.integration

#: threads.c's thread "deep", innermost first from chain_30 to chain_01.
DEEP_CHAIN = [f"chain_{n:02d}" for n in range(30, 0, -1)]


@pytest.fixture(scope="module", autouse=True)
def ptrace_here() -> None:
    require_ptrace()


@pytest.mark.parametrize("name", ["threads-O0", "threads-O2", "threads-O2-nofp", "cxxthrow-O2"])
def test_program_matches_gdb(run_program: RunProgram, gdb: str, name: str) -> None:
    """Every thread of a program built here: gdb's pcs, and each walk reaches the end."""
    program = run_program(name)
    backtrace = liveunwind.attach(program.pid)
    assert backtrace.arch == platform.machine()
    assert_matches_gdb(backtrace, gdb_backtraces(program.pid, gdb=gdb))
    for thread in backtrace.threads:
        assert thread.frames[0].method is Method.CONTEXT
        assert all(frame.method is Method.CFI for frame in thread.frames[1:]), thread.name


def test_copies_of_a_program_take_moved_walks_with_their_own_frames(
    run_program: RunProgram,
) -> None:
    """Four copies of a program backtraced as ``pid`` over many processes does
    (``unwinder/layouts.py``): from the third, a thread parked as the second's were
    takes its walk moved (the main thread's by the two stack pointers' distance), and
    every thread's frames are those of a backtrace of that copy alone, to the CFA.
    On arm64 each process signs its return addresses with keys of its own: the words
    differ, so the later copies walk for themselves (the frames are still checked)."""
    from liveunwind.backtrace.session import Session
    from liveunwind.backtrace.shared import SharedFiles

    copies = [run_program("threads-O2") for _ in range(4)]
    shared = SharedFiles(once=True)
    moved = []
    for program in copies:
        session = Session(program.pid, shared=shared, once=True)
        together = session.backtrace()
        moved.append(session.cache.suffixed)
        alone = liveunwind.attach(program.pid)
        assert _walks(together) == _walks(alone)
    assert moved[:2] == [0, 0], moved
    if platform.machine() == "x86_64":
        assert moved[2:] == [len(together.threads)] * 2, moved


def _walks(backtrace: liveunwind.Backtrace) -> list[tuple[object, ...]]:
    return [
        (
            thread.tid,
            thread.stop_reason,
            thread.stop_detail,
            [(f.pc, f.sp, f.cfa, f.method, f.module, f.function) for f in thread.frames],
        )
        for thread in backtrace.threads
    ]


def test_command_names_every_frame_of_the_deep_thread(run_program: RunProgram) -> None:
    """The installed command, as a user runs it: thread names, functions, modules, exit 0."""
    program = run_program("threads-O2")
    document = backtrace_json("pid", str(program.pid))
    assert document["complete"] is True
    assert {thread["name"] for thread in document["threads"]} >= {"sleeper", "reader", "deep"}
    deep = thread_named(document, "deep")
    assert contains_chain(functions(deep), DEEP_CHAIN), functions(deep)
    modules = {Path(frame["module"]).name for frame in deep["frames"] if frame["module"]}
    assert modules == {"threads-O2", "libc.so.6"}, modules


def test_signal_frames_match_gdb(run_program: RunProgram, gdb: str) -> None:
    """Through the kernel's sigreturn trampoline (the vDSO's on arm64) into the interrupted code."""
    program = run_program("sighandler")
    os.kill(program.pid, signal.SIGSTOP)
    try:
        wait_state(program.pid, "T")
        backtrace = liveunwind.attach(program.pid)
        assert_matches_gdb(backtrace, gdb_backtraces(program.pid, gdb=gdb))
    finally:
        os.kill(program.pid, signal.SIGCONT)
    for name in ("busy", "syscall"):
        thread = next(t for t in backtrace.threads if t.name == name)
        names = [frame.function for frame in thread.frames]
        index = next(i for i, frame in enumerate(thread.frames) if frame.signal_frame)
        assert names[index - 1] == "on_signal", names
        assert thread.frames[index + 1].exact_pc, names


def test_sframe_alone_equals_cfi(run_program: RunProgram) -> None:
    """SFrame of this architecture's code: the frames CFI finds, up to the first libc frame."""
    program = run_program("sframe-O2")
    sframe_only = liveunwind.attach(program.pid, unwinders=("sframe",))
    with_cfi = liveunwind.attach(program.pid, unwinders=("cfi",))
    for thread in sframe_only.threads:
        frames = thread.frames
        assert [frame.method for frame in frames[1:]] == [Method.SFRAME] * (len(frames) - 1)
        assert thread.stop_reason is StopReason.NO_UNWIND_INFO
        cfi = next(t for t in with_cfi.threads if t.tid == thread.tid)
        assert cfi.complete, cfi.stop_text
        assert [f.pc for f in frames] == [f.pc for f in cfi.frames][: len(frames)]
    chain = next(thread for thread in sframe_only.threads if thread.name == "chain")
    names = [frame.function for frame in chain.frames]
    assert names[:13] == ["sf_park", *(f"sf_chain_{n}" for n in range(12, 0, -1))]


# -- pointer authentication (arm64) ----------------------------------------------------

_PTRACE_SEIZE, _PTRACE_INTERRUPT, _PTRACE_GETREGSET, _PTRACE_DETACH = 0x4206, 0x4207, 0x4204, 17
_NT_ARM_PAC_MASK = 0x406
_WALL = 0x40000000


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def pac_masks(tid: int) -> tuple[int, int]:
    """(data mask, instruction mask) of a thread: PTRACE_GETREGSET NT_ARM_PAC_MASK, as gdb does."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(_PTRACE_SEIZE, tid, None, None) != 0:
        raise OSError(ctypes.get_errno(), f"PTRACE_SEIZE {tid}")
    try:
        libc.ptrace(_PTRACE_INTERRUPT, tid, None, None)
        os.waitpid(tid, _WALL)
        buffer = ctypes.create_string_buffer(16)
        vector = _IoVec(ctypes.cast(buffer, ctypes.c_void_p), 16)
        if libc.ptrace(_PTRACE_GETREGSET, tid, _NT_ARM_PAC_MASK, ctypes.byref(vector)) != 0:
            raise OSError(ctypes.get_errno(), "PTRACE_GETREGSET NT_ARM_PAC_MASK")
        data_mask, insn_mask = struct.unpack("<QQ", buffer.raw)
        return data_mask, insn_mask
    finally:
        libc.ptrace(_PTRACE_DETACH, tid, None, None)


def test_signed_return_addresses_are_stripped(
    platform_name: str, run_program: RunProgram, gdb: str
) -> None:
    """arm64 with PAC on: the saved return addresses carry codes in the kernel's PAC mask,
    and liveunwind's frames are those addresses without them, as gdb's are."""
    if platform_name != "arm64-vm":
        pytest.skip("pointer authentication with ptrace needs the arm64 VM")
    program = run_program("threads-O2")
    deep = program.tid("deep")
    _, insn_mask = pac_masks(deep)
    assert insn_mask != 0, "the kernel reports no PAC mask: pointer authentication is off"
    backtrace = liveunwind.attach(program.pid)
    assert_matches_gdb(backtrace, gdb_backtraces(program.pid, gdb=gdb))
    frames = next(thread for thread in backtrace.threads if thread.tid == deep).frames
    memory = Path(f"/proc/{program.pid}/mem")
    signed = 0
    with memory.open("rb") as stream:
        for inner, outer in itertools.pairwise(frames):
            if not (inner.function or "").startswith("chain_") or inner.cfa is None:
                continue
            # chain_NN's prologue: paciasp; stp x29, x30, [sp, #-16]! — x30 sits at CFA - 8.
            stream.seek(inner.cfa - 8)
            saved = int.from_bytes(stream.read(8), "little")
            assert saved & ~insn_mask == outer.pc, (inner.function, hex(saved), hex(outer.pc))
            signed += saved != outer.pc
    # A code is zero by chance for about one address in 2**7: nearly all must be signed.
    assert signed >= 25, f"only {signed} of 30 saved return addresses carry a PAC"
