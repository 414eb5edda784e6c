"""SFrame alone unwinds live processes: the same frames as gdb, for every frame SFrame covers.

The sframe-* test programs carry SFrame (version 1, binutils 2.40) in their own
code only and park every thread in a raw system call made from that code, so
with ``--unwinder sframe`` the walk goes from frame 0 through main (or the
thread's start routine) and stops at the first libc frame, which has no SFrame.
"""

from __future__ import annotations

import pytest

import liveunwind
from liveunwind.frames import Method, StopReason
from tests.support.oracles import gdb_backtraces, pcs

PROGRAMS = ["sframe-O0", "sframe-O2", "sframe-O2-nofp"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_sframe_alone_matches_gdb(run_program, gdb, name) -> None:
    program = run_program(name)
    sframe_only = liveunwind.attach(program.pid, unwinders=("sframe",))
    with_cfi = liveunwind.attach(program.pid, unwinders=("cfi",))
    oracle = gdb_backtraces(program.pid, gdb=gdb)
    for thread in sframe_only.threads:
        frames = thread.frames
        assert [frame.method for frame in frames[1:]] == [Method.SFRAME] * (len(frames) - 1)
        # The last frame is the first one outside the program: a libc frame.
        assert frames[-1].module is not None and "libc" in frames[-1].module
        assert all(frame.module.endswith(name) for frame in frames[:-1])
        assert thread.stop_reason is StopReason.NO_UNWIND_INFO
        expected = pcs(oracle[thread.tid])
        assert [frame.pc for frame in frames] == expected[: len(frames)], thread.name
        cfi_thread = next(t for t in with_cfi.threads if t.tid == thread.tid)
        cfi_pcs = [frame.pc for frame in cfi_thread.frames]
        assert [frame.pc for frame in frames] == cfi_pcs[: len(frames)]
        assert [frame.cfa for frame in frames[:-1]] == [f.cfa for f in cfi_thread.frames][
            : len(frames) - 1
        ]
    chain = next(thread for thread in sframe_only.threads if thread.name == "chain")
    names = [frame.function for frame in chain.frames]
    assert names[:13] == ["sf_park", *(f"sf_chain_{n}" for n in range(12, 0, -1))]
