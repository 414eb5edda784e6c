"""End to end through JIT code: libunwind DYNAMIC and REMOTE_TABLE, the GDB JIT interface.

Each program in testprogs/jit copies two functions into anonymous executable
memory (whose frames neither frame pointers nor any file's CFI describe),
registers them one of three ways, and prints the true call chain it built:
``chain: blocker jit_inner jit_outer main``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import liveunwind
from liveunwind.frames import Method
from liveunwind.targets import procfs
from tests.conftest import TESTPROGS
from tests.oracles import gdb_backtraces, gdb_gcore, pcs

PROGRAMS = {"jit-dynamic": "libunwind", "jit-table": "perf-map", "jit-gdb": "gdb-jit"}


@pytest.fixture(scope="module")
def jit_build() -> Path:
    folder = TESTPROGS / "jit"
    result = subprocess.run(["make", "-C", str(folder), "-j2"], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot build testprogs/jit (needs x86_64 and libunwind-dev): {result.stderr}")
    return folder / "build"


@pytest.fixture
def jit_program(jit_build: Path, request: pytest.FixtureRequest) -> Iterator[tuple[int, list[str]]]:
    """Starts a JIT program; yields its pid and the chain it says it built."""
    process = subprocess.Popen([jit_build / request.param], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        chain: list[str] = []
        for line in process.stdout:
            if line.startswith("chain:"):
                chain = line.split()[1:]
            if line.strip() == "ready":
                break
        deadline = time.monotonic() + 10
        while procfs.process_stat(process.pid).state != "S":
            assert time.monotonic() < deadline, "the JIT program never went to sleep"
            time.sleep(0.01)
        yield process.pid, chain
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("jit_program", sorted(PROGRAMS), indirect=True)
def test_backtrace_goes_through_jit_frames(jit_program: tuple[int, list[str]]) -> None:
    pid, chain = jit_program
    assert chain == ["blocker", "jit_inner", "jit_outer", "main"]
    backtrace = liveunwind.attach(pid)
    thread = backtrace.threads[0]
    assert thread.complete, thread.stop_text
    names = [frame.function for frame in thread.frames]
    start = names.index("blocker")
    assert names[start : start + 4] == chain
    jit_frames = thread.frames[start + 1 : start + 3]
    assert all((frame.module or "").startswith("[jit ") for frame in jit_frames)
    # jit_inner's and jit_outer's callers are found by what was registered.
    assert [frame.method for frame in thread.frames[start + 2 : start + 4]] == [Method.DYNAMIC] * 2


@pytest.mark.parametrize("jit_program", ["jit-gdb"], indirect=True)
def test_gdb_agrees_on_the_gdb_jit_program(jit_program: tuple[int, list[str]], gdb: str) -> None:
    pid, _ = jit_program
    ours = [frame.pc for frame in liveunwind.attach(pid).threads[0].frames]
    assert ours == pcs(gdb_backtraces(pid, gdb=gdb)[pid])


@pytest.mark.parametrize("jit_program", ["jit-dynamic"], indirect=True)
def test_without_the_registry_the_walk_stops_in_jit_code(
    jit_program: tuple[int, list[str]],
) -> None:
    pid, _ = jit_program
    thread = liveunwind.attach(pid, unwinders=("cfi",)).threads[0]
    assert not thread.complete
    assert thread.frames[-1].function == "jit_inner"


@pytest.mark.parametrize("jit_program", sorted(PROGRAMS), indirect=True)
def test_the_same_from_a_gcore_core(
    jit_program: tuple[int, list[str]], gdb: str, tmp_path: Path
) -> None:
    pid, _ = jit_program
    live = liveunwind.attach(pid).threads[0]
    core = tmp_path / "jit.core"
    gdb_gcore(pid, core, gdb=gdb)
    from_core = liveunwind.open_core(str(core)).threads[0]
    assert [frame.pc for frame in from_core.frames] == [frame.pc for frame in live.frames]
    assert [frame.method for frame in from_core.frames[1:]] == [
        frame.method for frame in live.frames[1:]
    ]
    assert from_core.complete, from_core.stop_text
    jit = [frame for frame in from_core.frames if (frame.module or "").startswith("[jit ")]
    assert len(jit) == 2
