"""A walk that ends in a Go function which moves its stack pointer unrecorded says why.

Go's assembly functions that write the stack pointer (SPWRITE in
``.gopclntab``) have SP deltas that stop holding once they have written it;
Go's own traceback stops at them.  A few are crossed (``mcall``,
``systemstack``, ``morestack``, ``asmcgocall``: tests/system/test_go_switch.py)
or read through the M (the clock's: tests/system/test_go_vdso.py); at the
others (``gogo``, cgo's ``callCgoMmap``, ``sigfwd``, ``clone``) the thread's
stack goes on above, and a walk ending there is not whole.  gdb stops
goclock, built without DWARF as release builds are (only ``.gopclntab``
describes its frames), at the entry of ``gogo`` (the scheduler switching to
a goroutine, from the first moments of the program) and writes its core.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from liveunwind.backtrace.api import open_core
from liveunwind.frames import StopReason
from tests.support.oracles import gdb_run_to_core


def _symbol(program: Path, name: str) -> int:
    """The address nm gives the text symbol ``name`` of ``program``."""
    listed = subprocess.run(["nm", str(program)], capture_output=True, text=True, check=True)
    for line in listed.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == name and fields[1] in "tT":
            return int(fields[0], 16)
    raise AssertionError(f"nm lists no {name} in {program}")


def test_a_walk_ending_in_gogo_is_not_whole_and_says_why(
    go_build: Path, tmp_path: Path, gdb: str
) -> None:
    program = go_build / "goclock-nodwarf"
    gogo = _symbol(program, "gogo")
    core = tmp_path / "core"
    gdb_run_to_core(program, [f"break *{gogo:#x}", "run"], core, gdb=gdb)
    backtrace = open_core(str(core), str(program))
    assert backtrace.crash is not None
    (thread,) = [t for t in backtrace.threads if t.tid == backtrace.crash.tid]  # gdb's stop
    assert [(f.pc, f.function) for f in thread.frames] == [(gogo, "gogo")]
    assert thread.stop_reason is StopReason.NO_UNWIND_INFO, thread.stop_text
    assert "gogo moves the stack pointer" in thread.stop_detail
    assert not thread.complete and not backtrace.complete
    # The program's other threads (if it has started any yet) end at their tops.
    others = [t for t in backtrace.threads if t is not thread]
    assert all(t.complete for t in others), [t.stop_text for t in others]
