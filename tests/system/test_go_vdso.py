"""Out of Go's calls into the vDSO, whose stack pointer their tables do not follow.

testprogs/go/goclock reads the clock without end: on amd64, time.Now calls
``time.now``, which moves the stack pointer to g0's stack and calls the
vDSO's ``clock_gettime``, keeping its caller's pc and sp in the M's
``vdsoPC`` and ``vdsoSP``.  gdb stops the program there, on the thread whose
``time.now`` it stopped at the entry of just before (where the caller's sp
and return address are what gdb prints: the oracle), and writes its core.
gdb's own backtrace ends in garbage after ``time.now``; ours must go on
from the M's record to exactly those registers, then through the goroutine
to its start.  The arm64 case (``runtime.nanotime1`` on g0, in QEMU's core)
is in tests/system/test_go_switch.py; the refusals are unit tests.  Live,
the loop's thread is sampled wherever it is in its clock reads, and each
walk must reach the thread's start.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from liveunwind.backtrace.api import attach, open_core
from liveunwind.frames import Method
from tests.support.oracles import gdb_run_to_core
from tests.support.programs import RunningProgram

#: What gdb prints at time.now's entry: its sp, then the word there (the return address).
_SP = re.compile(r"^\$1 = (0x[0-9a-f]+)$", re.MULTILINE)
_RETURN = re.compile(r"^0x[0-9a-f]+:\s+(0x[0-9a-f]+)$", re.MULTILINE)
_VDSO_NOTE = "caller from m.vdsoPC and m.vdsoSP"


def _stop_in_the_vdso(program: Path, core: Path, gdb: str) -> tuple[int, int]:
    """Runs ``program`` under gdb to its clock's vDSO call; its core, and time.now's sp and
    return address at entry."""
    printed = gdb_run_to_core(
        program,
        [
            "break main.clockloop",
            "run",
            "break 'time.now'",
            "continue",
            "p/x $sp",
            "x/gx $sp",
            # The same thread's next clock_gettime: this time.now's (it cannot be preempted).
            'eval "break __vdso_clock_gettime thread %d", $_thread',
            "continue",
        ],
        core,
        gdb=gdb,
    )
    sp, returned = _SP.search(printed), _RETURN.search(printed)
    if sp is None or returned is None:
        pytest.fail(f"gdb did not stop in time.now's vDSO call:\n{printed}")
    return int(sp[1], 16), int(returned[1], 16)


def test_time_now_in_the_vdso_goes_on_from_the_ms_record(
    go_build: Path, tmp_path: Path, gdb: str
) -> None:
    core = tmp_path / "core"
    entry_sp, return_address = _stop_in_the_vdso(go_build / "goclock", core, gdb)
    backtrace = open_core(str(core), str(go_build / "goclock"), verbose=True)
    assert backtrace.crash is not None
    (thread,) = [t for t in backtrace.threads if t.tid == backtrace.crash.tid]  # gdb's stop
    described = "\n".join(
        f"#{f.index} {f.pc:#x} sp={f.sp:#x} {f.function} [{f.method.value}] {f.notes}"
        for f in thread.frames
    )
    names = [f.function for f in thread.frames]
    assert names[:2] == ["__vdso_clock_gettime", "time.now"], described
    caller = thread.frames[2]
    assert caller.method is Method.GOROUTINE and _VDSO_NOTE in caller.notes, described
    # The caller's frame as time.now entered: its return address, and sp above it.
    assert (caller.pc, caller.sp) == (return_address, entry_sp + 8), described
    assert not caller.exact_pc
    assert names[2:] == [
        "time.Now",
        "main.clockloop",
        "main.main",
        "runtime.main",
        "runtime.goexit.abi0",
    ], described
    assert thread.complete, described
    # The other threads, some in the vDSO too (the runtime's own clock reads): complete.
    assert backtrace.complete, [t.stop_text for t in backtrace.threads]


#: The clock's functions seen at the top of a walk, whatever Go release built goclock.
_CLOCK = {"time.now", "runtime.nanotime1.abi0", "runtime.walltime.abi0", "runtime.walltime1.abi0"}
#: The outermost frames of goclock's goroutines (main) and Ms (sysmon, idle Ms).
_OUTERMOST = {"runtime.goexit.abi0", "runtime.mstart.abi0"}


@pytest.mark.parametrize("snapshot", [True, False])
def test_live_threads_in_the_clock_walk_to_their_start(go_build: Path, snapshot: bool) -> None:
    """goclock's loop sampled live: every walk through a clock read reaches its thread's start.

    Most samples find the loop's thread in time.now or the vDSO under it,
    where its stack pointer is on g0's stack (its walk ended there before);
    the others in its prologue or epilogue, where the SP deltas hold.
    """
    program = RunningProgram(go_build / "goclock", [])
    try:
        program.wait_for_line(b"ready\n", time.monotonic() + 30)
        through_clock = 0
        for _ in range(40):
            backtrace = attach(program.pid, snapshot=snapshot, stop_timeout=10.0)
            for thread in backtrace.threads:
                names = [f.function for f in thread.frames]
                if not _CLOCK & set(names[:3]):
                    continue
                through_clock += 1
                assert thread.complete and names[-1] in _OUTERMOST, (names, thread.stop_text)
                if "main.clockloop" in names:
                    assert names[-3:] == ["main.main", "runtime.main", "runtime.goexit.abi0"]
    finally:
        program.stop()
    assert through_clock >= 10, through_clock
