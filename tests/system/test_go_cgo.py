"""From C code called through cgo into the goroutine that called it.

testprogs/go/gocgo's goroutine calls a C function that sleeps for good: its
thread runs the C frames on the M's g0 stack, entered through
``runtime.asmcgocall``, which saved the goroutine's registers in its
``g.sched`` (a ``runtime.systemstack_switch`` frame, whose caller is
``runtime.cgocall``) and left it in its system call state as ``m.curg``.
The oracle is Go's own traceback of that goroutine under
``GOTRACEBACK=crash`` (SIGQUIT): the same functions at the same sps, the
same pcs but runtime.cgocall's, which Go prints where it entered its system
call state (``g.syscallpc``) and the walk finds where it called asmcgocall
(the thread's physical return address).  Live (with and without the
snapshot) and in the kernel's core.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from liveunwind.backtrace.api import attach, open_core
from liveunwind.frames import Backtrace, Method
from tests.support.go import GoFrames, crash, crashable, go_goroutines

NOTE = "(m.curg), saved by runtime.asmcgocall"


class _Run:
    def __init__(self, live: list[Backtrace], core: Path, crash_text: str) -> None:
        self.live, self.core, self.crash_text = live, core, crash_text


@pytest.fixture(scope="module")
def run(go_build: Path, tmp_path_factory: pytest.TempPathFactory) -> _Run:
    folder = tmp_path_factory.mktemp("go-cgo")
    with crashable(go_build / "gocgo", folder) as program:
        program.wait_for_line(b"ready\n", time.monotonic() + 30)
        live = [
            attach(program.pid, verbose=True, stop_timeout=10.0),
            attach(program.pid, snapshot=False, verbose=True, stop_timeout=10.0),
        ]
        core, text = crash(program, folder)
    return _Run(live, core, text)


def _check(backtrace: Backtrace, go: dict[int, list[GoFrames]], cgocall: tuple[int, int]) -> None:
    """The thread in C crosses into the goroutine; from cgocall on, Go's frames."""
    (thread,) = [t for t in backtrace.threads if any(f.function == "block_in_c" for f in t.frames)]
    described = "\n".join(
        f"#{f.index} {f.pc:#x} sp={f.sp:#x} {f.function} [{f.method.value}] {f.notes}"
        for f in thread.frames
    )
    crossings = [f for f in thread.frames if f.method is Method.GOROUTINE]
    assert len(crossings) == 1, described
    (crossing,) = crossings
    (note,) = [n for n in crossing.notes if n.endswith(NOTE)]
    goid = int(note.split()[1])
    assert crossing.function == "runtime.systemstack_switch.abi0", described
    before = [f.function for f in thread.frames[: crossing.index]]
    assert before[-3:] == [
        "block_in_c",
        next(n for n in before if n and n.startswith("_cgo_") and n.endswith("_Cfunc_block_in_c")),
        "runtime.asmcgocall.abi0",
    ], described
    ours = [
        ((f.function or "??").removesuffix(".abi0"), f.pc, f.sp)
        for f in thread.frames[crossing.index + 1 :]
    ]
    # Printed once or twice (by the M the signal reached first, and by the M in C).
    assert go[goid], f"Go printed no frames of goroutine {goid}"
    for theirs in go[goid]:
        assert [(name, sp) for name, _pc, sp in ours] == [(name, sp) for name, _pc, sp in theirs]
        assert ours[1:] == theirs[1:], described
        # runtime.cgocall: Go's pc where it entered its system call state, ours where it
        # called asmcgocall, later in the same function.
        assert ours[0][0] == "runtime.cgocall"
        assert cgocall[0] <= theirs[0][1] < ours[0][1] < cgocall[1], (theirs[0], ours[0])
    assert thread.complete, described


def _cgocall_range(backtrace: Backtrace) -> tuple[int, int]:
    """Where runtime.cgocall lies, by the walk's own frame of it (its start and a bound)."""
    for thread in backtrace.threads:
        for frame in thread.frames:
            if frame.function == "runtime.cgocall" and frame.offset is not None:
                start = frame.pc - frame.offset
                return start, start + 0x1000
    raise AssertionError("no runtime.cgocall frame")


def test_live_c_frames_go_on_into_the_goroutine(run: _Run) -> None:
    go = go_goroutines(run.crash_text)
    for backtrace in run.live:
        _check(backtrace, go, _cgocall_range(backtrace))


def test_kernel_core_c_frames_go_on_into_the_goroutine(run: _Run, go_build: Path) -> None:
    backtrace = open_core(str(run.core), str(go_build / "gocgo"), verbose=True)
    _check(backtrace, go_goroutines(run.crash_text), _cgocall_range(backtrace))
