"""Frames gdb and eu-stack get wrong, held to the known truth.

- A JIT function stopped on its first instruction (testprogs/jit/jit-entry,
  like a V8 function interrupted before its prologue): its return address
  is at [rsp], while rbp still holds its caller's frame.  eu-stack follows
  rbp and drops the caller (``call_jit``); liveunwind reads [rsp] first for
  a frame 0 without unwind information, and checks it is a return address.
  gdb is right here, and agrees.
- Go's scheduler stack and signal stacks (tests/system/test_go.py): gdb and
  eu-stack take the word above ``runtime.mcall``'s frame on g0 (the
  address of ``runtime.g0``, a stray 1) for a return address, and gdb does
  not get through Go's signal trampoline; liveunwind ends where Go's own
  traceback ends and reads the signal frame.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.backtrace.api import attach
from liveunwind.frames import Method
from tests.support.builds import build
from tests.support.oracles import gdb_backtraces, pcs
from tests.support.programs import start_command

#: jit-entry's spinning thread, as the program builds it (outermost frames differ by libc).
CHAIN = ["jit_entry", "call_jit", "spin", "start_thread"]


@pytest.fixture
def jit_entry() -> Iterator[tuple[int, int]]:
    """testprogs/jit/jit-entry, running: its pid and the address of jit_entry."""
    programs = build("jit", "build/jit-entry")
    with start_command([str(programs / "jit-entry")]) as program:
        lines = program.output.decode().splitlines()
        entries = [int(line.split()[1], 16) for line in lines if line.startswith("entry ")]
        assert entries, f"jit-entry printed no entry address: {lines}"
        try:
            yield program.pid, entries[0]
        finally:
            Path(f"/tmp/perf-{program.pid}.map").unlink(missing_ok=True)


def _spinner(pid: int, entry: int):
    """The spinning thread, once it stands on jit_entry's first byte."""
    deadline = time.monotonic() + 10
    while True:
        backtrace = attach(pid)
        (thread,) = [t for t in backtrace.threads if t.name == "spinner"]
        if thread.frames and thread.frames[0].pc == entry:
            return thread
        assert time.monotonic() < deadline, "the spinner never reached jit_entry"
        time.sleep(0.01)


def test_jit_frame_before_its_prologue_keeps_its_caller(jit_entry, gdb) -> None:
    pid, entry = jit_entry
    thread = _spinner(pid, entry)
    names = [frame.function for frame in thread.frames]
    assert names[: len(CHAIN)] == CHAIN, thread.frames
    assert thread.frames[1].method is Method.LEAF
    assert thread.complete, thread.stop_text
    oracle = gdb_backtraces(pid, gdb=gdb)
    assert pcs(oracle[thread.tid]) == [frame.pc for frame in thread.frames]
