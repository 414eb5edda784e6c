"""Cores written where the programs run: by the kernel (x86_64 container, arm64 VM) or by
QEMU user mode (arm64 container), unwound by the installed command and compared with gdb.

Two kinds: a crash (testprogs/crash: a fault in a thread, a fault in a signal
handler) and a parked multi-threaded program killed with SIGQUIT, which dumps
every thread. gdb reads kernel cores as an oracle; it cannot relocate a PIE
in a QEMU core (QEMU leaves the ELF headers out), so QEMU cores are checked
against the programs' known call chains instead.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import liveunwind
from liveunwind.frames import Method, StopReason
from tests.support.assertions import assert_matches_gdb
from tests.support.oracles import gdb_core_backtraces
from tests.support.platform import (
    UNDER_QEMU_USER,
    backtrace_json,
    contains_chain,
    functions,
    start_parked,
)

pytestmark = pytest.mark.integration

CRASH = Path(__file__).resolve().parents[2] / "testprogs" / "crash" / "build"
#: crash.c's chains, innermost first, by mode.
CRASH_CHAINS = {
    "handler": ["handler_fault", "on_usr1"],
    "thread": ["thread_fault", "thread_middle", "thread_main"],
}
MakeCore = Callable[..., Path]


def _unlimited_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


@pytest.fixture(scope="module")
def core_writer() -> str:
    """``qemu`` or ``kernel``: who writes cores here; skips where none lands in the directory."""
    if UNDER_QEMU_USER:
        return "qemu"  # QEMU writes the guest's core (qemu_*.core) into the working directory
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|"):
        pytest.skip(f"kernel.core_pattern pipes cores to a program of the host ({pattern})")
    if "/" in pattern:
        pytest.skip(f"kernel.core_pattern writes cores elsewhere ({pattern})")
    return "kernel"


def only_core(folder: Path) -> Path:
    """The guest's core under QEMU (QEMU 7.2 then dies of the signal and the kernel leaves
    ``core`` of QEMU itself beside it), the kernel's ``core`` otherwise."""
    prefix = "qemu_" if UNDER_QEMU_USER else "core"
    cores = [path for path in folder.iterdir() if path.name.startswith(prefix)]
    assert len(cores) == 1, f"cores in {folder}: {cores}"
    return cores[0]


@pytest.fixture(scope="module")
def parked_core(
    core_writer: str, testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory
) -> MakeCore:
    """parked_core(name) -> the core of testprogs/build/NAME, parked, then killed by SIGQUIT."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            folder = tmp_path_factory.mktemp(f"quit-{name}")
            program = start_parked(testprogs_build / name, cwd=folder, preexec_fn=_unlimited_core)
            os.kill(program.pid, signal.SIGQUIT)
            assert program.popen.wait(timeout=300) == -signal.SIGQUIT
            program.stop()
            made[name] = only_core(folder)
        return made[name]

    return make


@pytest.fixture(scope="module")
def crash_core(
    core_writer: str, testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory
) -> MakeCore:
    """crash_core(mode) -> the core of testprogs/crash/build/crash-O2 MODE."""
    made: dict[str, Path] = {}

    def make(mode: str) -> Path:
        if mode not in made:
            folder = tmp_path_factory.mktemp(f"crash-{mode}")
            result = subprocess.run(
                [str(CRASH / "crash-O2"), mode],
                cwd=folder,
                preexec_fn=_unlimited_core,
                capture_output=True,
                timeout=300,
                check=False,
            )
            assert result.returncode < 0, f"crash-O2 {mode} did not die of a signal: {result}"
            made[mode] = only_core(folder)
        return made[mode]

    return make


def test_core_of_every_thread(
    core_writer: str, parked_core: MakeCore, testprogs_build: Path, gdb: str
) -> None:
    """SIGQUIT of threads-O2: nine threads, nine kinds of blocking call, each walked to its end."""
    exe = testprogs_build / "threads-O2"
    core = parked_core("threads-O2")
    document = backtrace_json("core", str(core), str(exe))
    assert document["crash"]["signal_name"] == "SIGQUIT"
    for thread in document["threads"]:
        assert thread["complete"], (thread["name"], thread["stop_reason"], functions(thread))
    # A core has no thread names: one thread is parked under chain_30 … chain_01.
    deep = [f"chain_{n:02d}" for n in range(30, 0, -1)]
    assert sum(contains_chain(functions(thread), deep) for thread in document["threads"]) == 1
    if core_writer == "kernel":
        backtrace = liveunwind.open_core(str(core), str(exe))
        assert_matches_gdb(backtrace, gdb_core_backtraces(core, exe, gdb=gdb))


@pytest.mark.parametrize("mode", sorted(CRASH_CHAINS))
def test_crash_core(core_writer: str, crash_core: MakeCore, gdb: str, mode: str) -> None:
    """A fault in a second thread, and one inside a signal handler: the crash comes first."""
    core = crash_core(mode)
    exe = CRASH / "crash-O2"
    backtrace = liveunwind.open_core(str(core), str(exe))
    assert backtrace.crash is not None and backtrace.crash.signal_name == "SIGSEGV"
    crashed = backtrace.threads[0]
    assert crashed.tid == backtrace.crash.tid
    names = [frame.function or "??" for frame in crashed.frames]
    assert contains_chain(names, CRASH_CHAINS[mode]), names
    # The crashed thread's walk is complete. Another thread QEMU caught running may need a
    # guess at frame 0; a walk that guessed is complete only where it reaches a frame known to
    # be outermost, else it says so (issue 25) — never a silent "complete".
    assert crashed.complete, crashed.stop_text
    for thread in backtrace.threads:
        assert thread.complete or thread.stop_reason is StopReason.NO_OUTERMOST_FRAME, (
            thread.name,
            thread.stop_text,
            [f"{f.function}@{f.pc:#x}:{f.method.value}" for f in thread.frames],
        )
    if mode == "handler":
        assert any(frame.signal_frame for frame in crashed.frames), names
    if core_writer == "kernel":
        assert_matches_gdb(backtrace, gdb_core_backtraces(core, exe, gdb=gdb))


def test_sframe_alone_equals_cfi_in_a_core(parked_core: MakeCore, testprogs_build: Path) -> None:
    """SFrame of this architecture: the frames CFI finds, up to the first libc frame."""
    core = str(parked_core("sframe-O2"))
    exe = str(testprogs_build / "sframe-O2")
    sframe_only = liveunwind.open_core(core, exe, unwinders=("sframe",))
    with_cfi = liveunwind.open_core(core, exe, unwinders=("cfi",))
    for thread in sframe_only.threads:
        frames = thread.frames
        assert [frame.method for frame in frames[1:]] == [Method.SFRAME] * (len(frames) - 1)
        assert thread.stop_reason is StopReason.NO_UNWIND_INFO
        assert "libc" in (frames[-1].module or ""), frames[-1]
        cfi = next(t for t in with_cfi.threads if t.tid == thread.tid)
        assert cfi.complete, cfi.stop_text
        assert [(f.pc, f.sp) for f in frames] == [(f.pc, f.sp) for f in cfi.frames][: len(frames)]
    # A core has no thread names: the "chain" thread is the one parked under sf_chain_12.
    chains = [[frame.function or "??" for frame in thread.frames] for thread in sframe_only.threads]
    expected = ["sf_park", *(f"sf_chain_{n}" for n in range(12, 0, -1))]
    assert [names[:13] for names in chains].count(expected) == 1, chains
