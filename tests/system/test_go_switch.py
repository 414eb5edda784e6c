"""Go threads on their scheduler stack (g0), followed into the goroutine that switched to it.

testprogs/go/goswitch holds threads on g0 for good: a thread locked to a
goroutine parked in a channel receive (runtime.mcall → park_m → … →
stoplockedm, the M's lockedg that goroutine), a stop of the world that never
completes (runtime.systemstack from runtime.gcStart, the M's curg the
goroutine that called runtime.GC), idle Ms (m.curg nil) and sysmon.

The oracle is the program's own view of the same instant: with
GOTRACEBACK=crash, SIGQUIT makes every M print its goroutines (pc and sp of
every frame) and dump core.  The goroutines here cannot move (parked, or
waiting for a world that never stops), so the live backtraces taken before
the signal see what it prints too.  Each walk that crosses a switch must
give, from the resumed frame on, Go's frames of that goroutine: the same
functions at the same pcs and sps.  Live (with and without the snapshot)
and in the kernel's core on x86_64; in QEMU user mode's core of the arm64
build.  The unit side: tests/unit/test_go_switch.py.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from liveunwind.backtrace.api import attach, open_core
from liveunwind.cli.report import to_json_document
from liveunwind.frames import Backtrace, Method, ThreadBacktrace
from tests.support.cores import unlimited_core
from tests.support.go import GoFrames, crash, crashable, go_goroutines
from tests.support.programs import RunningProgram
from tests.support.schema import VALIDATOR
from tests.support.waits import wait_until

NAME = "goswitch"
#: Seconds a thread may take to stop (the default's half second is short for a busy machine).
STOP_TIMEOUT = 10.0
#: What QEMU logs of runtime.stopTheWorldWithSema's wait for the Ps: 100 µs at a time.
_STOP_WAIT = "FUTEX_WAIT,0,{tv_sec = 0,tv_nsec = 100000}"
_NOTE = re.compile(r"^goroutine (?P<goid>\d+) \((?P<how>m\.\w+)\), saved by (?P<switch>\S+)$")


def _name(function: str | None) -> str:
    """A frame's function as Go's traceback names it (without the ABI suffix of the symbol)."""
    name = function or "??"
    return name.removesuffix(".abi0")


def _describe(thread: ThreadBacktrace) -> str:
    lines = [
        f"#{f.index:<3} {f.pc:#x} sp={f.sp:#x} {f.function} [{f.method.value}] {f.notes}"
        for f in thread.frames
    ]
    return "\n".join([*lines, thread.stop_text])


def _switched(backtrace: Backtrace) -> dict[int, tuple[ThreadBacktrace, int, str]]:
    """The threads whose walk crossed into a goroutine: thread, frame index, note, by goid."""
    found = {}
    for thread in backtrace.threads:
        # Method goroutine also marks a caller read from m.vdsoPC/vdsoSP (a call into the
        # vDSO on g0's stack, as the stop of the world's clock may be in a core): no crossing.
        crossings = [
            f
            for f in thread.frames
            if f.method is Method.GOROUTINE and any(_NOTE.match(n) for n in f.notes)
        ]
        if not crossings:
            continue
        assert len(crossings) == 1, _describe(thread)
        (note,) = [n for n in crossings[0].notes if _NOTE.match(n)]
        match = _NOTE.match(note)
        assert match is not None
        found[int(match["goid"])] = (thread, crossings[0].index, note)
    return found


def check_against_go(backtrace: Backtrace, go: dict[int, list[GoFrames]]) -> None:
    """Every crossing gives Go's frames of its goroutine; the walks are otherwise as before.

    A caller taken from ``m.vdsoPC`` (the thread on g0 in the clock's call
    into the vDSO) gives, up to the crossing, Go's print of the same g0
    frames where Go printed them.
    """
    switched = _switched(backtrace)
    # The locked thread's parked goroutine (mcall, m.lockedg) and the stop of the
    # world (systemstack, m.curg): both crossings are made.
    kinds = {(note.split()[-1], note.split()[2]) for _, _, note in switched.values()}
    every_walk = "\n\n".join(_describe(t) for t in backtrace.threads)
    assert ("runtime.mcall", "(m.lockedg),") in kinds, every_walk
    assert ("runtime.systemstack", "(m.curg),") in kinds, every_walk
    for goid, (thread, first, _note) in switched.items():
        ours = [(_name(f.function), f.pc, f.sp) for f in thread.frames[first:]]
        assert ours in go[goid], f"goroutine {goid}:\n{_describe(thread)}\nGo: {go[goid]}"
        vdso = [f.index for f in thread.frames[:first] if f.method is Method.GOROUTINE]
        if vdso:
            on_g0 = [(_name(f.function), f.pc, f.sp) for f in thread.frames[vdso[0] : first]]
            printed = [frames for frames in go[goid] if frames[0][0] == on_g0[0][0]]
            assert all(frames == on_g0 for frames in printed), f"{_describe(thread)}\n{printed}"
    for thread in backtrace.threads:
        assert thread.complete, _describe(thread)
    idle = [t for t in backtrace.threads if "m.curg is nil" in t.stop_detail]
    assert idle, "no idle M was told apart"
    for thread in idle:
        last = thread.frames[-1].function
        assert last in ("runtime.mcall", "runtime.morestack.abi0"), _describe(thread)


class _Run:
    """One run of goswitch: live backtraces, then the program's own view and its core."""

    def __init__(self, live: list[Backtrace], core: Path, crash_text: str) -> None:
        self.live = live
        self.core = core
        self.crash_text = crash_text


def _stop_waits_after_ready(log: str) -> int:
    """The stop of the world's waits QEMU logged after the program's last write ("ready").

    runtime.GOMAXPROCS stops the world too, before "ready": on a busy machine
    its waits are many, and counting them would signal before runtime.GC's.
    """
    if log.count("write(1,") < 2:  # "locked TID", then "ready": not yet logged
        return 0
    return log.rpartition("write(1,")[2].count(_STOP_WAIT)


def _tgkill(pid: int, tid: int, signal_number: int) -> None:
    """Sends a signal to one thread of another process (QEMU's host thread of a guest thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, signal_number) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid})")


def _world_stopping(pid: int) -> bool:
    """Whether some thread of ``pid`` is in the stop of the world (its goroutine switched)."""
    backtrace = attach(pid, snapshot=False, stop_timeout=STOP_TIMEOUT)
    return any(
        f.function == "runtime.stopTheWorldWithSema" for t in backtrace.threads for f in t.frames
    )


@pytest.fixture(scope="module")
def run(go_build: Path, tmp_path_factory: pytest.TempPathFactory) -> _Run:
    folder = tmp_path_factory.mktemp("go-switch")
    with crashable(go_build / NAME, folder) as program:
        program.wait_ready({NAME}, timeout=30)
        wait_until(lambda: _world_stopping(program.pid), 30, "the stop of the world")
        # The spinning thread may take long to stop on a loaded machine.
        live = [
            attach(program.pid, verbose=True, stop_timeout=STOP_TIMEOUT),
            attach(program.pid, snapshot=False, verbose=True, stop_timeout=STOP_TIMEOUT),
        ]
        core, text = crash(program, folder)
    return _Run(live, core, text)


def test_live_goroutines_equal_gos_own_traceback(run: _Run) -> None:
    """The snapshot (Ms and goroutines copied while stopped) and --no-snapshot alike."""
    go = go_goroutines(run.crash_text)
    for backtrace in run.live:
        check_against_go(backtrace, go)
    # The JSON document marks the crossing with its method, as the schema allows.
    document = to_json_document(run.live[0])
    VALIDATOR.validate(document)
    methods = [frame["method"] for thread in document["threads"] for frame in thread["frames"]]
    assert methods.count("goroutine") >= 2


def test_kernel_core_goroutines_equal_gos_own_traceback(run: _Run, go_build: Path) -> None:
    backtrace = open_core(str(run.core), str(go_build / NAME), verbose=True)
    check_against_go(backtrace, go_goroutines(run.crash_text))


def test_arm64_qemu_core_goroutines_equal_gos_own_traceback(
    go_build: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The arm64 build under qemu-aarch64, GOTRACEBACK=crash, SIGQUIT once the world stops.

    QEMU's system-call log (``-strace -D``) tells when: the stop of the world
    waits on its note 100 µs at a time (``runtime.stopTheWorldWithSema``).
    """
    qemu = shutil.which("qemu-aarch64")
    if qemu is None:
        pytest.skip("qemu-aarch64 is not installed")
    program = go_build / f"{NAME}-arm64"
    folder = tmp_path_factory.mktemp("go-switch-arm64")
    # QEMU dies of the guest's signal after writing the guest core; a folder
    # named "core" keeps the kernel from also dumping QEMU itself.
    (folder / "core").mkdir()
    log = folder / "strace"
    errors = (folder / "stderr").open("wb")
    running = RunningProgram(
        Path(qemu),
        ["-strace", "-D", str(log), str(program)],
        cwd=folder,
        env={"GOTRACEBACK": "crash", "PATH": "/usr/bin:/bin"},
        stderr=errors,
        preexec_fn=unlimited_core,
    )
    try:
        running.wait_for_line(b"ready\n", time.monotonic() + 60)
        wait_until(
            lambda: _stop_waits_after_ready(log.read_text(errors="replace")) >= 3,
            60,
            "the stop of the world waiting under QEMU",
        )
        # To the locked thread: the thread that takes the signal first prints the
        # others' goroutines and has them print their own; the stop of the world's
        # goroutine, were its thread first, would be printed from its g0 frames alone.
        locked = re.search(rb"locked (\d+)", running.output)
        assert locked is not None, running.output
        _tgkill(running.pid, int(locked[1]), signal.SIGQUIT)
        running.popen.wait(timeout=60)
    finally:
        running.stop()
        errors.close()
    cores = list(folder.glob("qemu_*.core"))
    assert len(cores) == 1, cores
    backtrace = open_core(str(cores[0]), str(program), verbose=True)
    check_against_go(backtrace, go_goroutines((folder / "stderr").read_text()))
