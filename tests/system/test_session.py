"""Warm backtraces: a Session keeps what it learned between backtraces; --repeat and --collapsed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import BacktraceOptions
from liveunwind.backtrace.session import Session
from liveunwind.frames import Frame
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.targets.live.ptrace import PtraceProcess
from tests.support.paths import ROOT


def _frame_key(frame: Frame) -> tuple[object, ...]:
    return (frame.pc, frame.sp, frame.cfa, frame.method, frame.signal_frame, frame.function)


def test_warm_backtraces_equal_cold_ones(run_program) -> None:
    program = run_program("threads-O2")
    session = Session(program.pid, options=BacktraceOptions())
    first = session.backtrace()
    second = session.backtrace()
    fresh = Session(program.pid).backtrace()
    for backtrace in (second, fresh):
        assert [[f.pc for f in t.frames] for t in backtrace.threads] == [
            [f.pc for f in t.frames] for t in first.threads
        ]
        assert [[f.function for f in t.frames] for t in backtrace.threads] == [
            [f.function for f in t.frames] for t in first.threads
        ]
    assert second.complete


def test_module_map_takes_over_unchanged_modules(run_program) -> None:
    program = run_program("threads-O2")
    with PtraceProcess(program.pid) as process:
        first = ModuleMap(process)
        assert all(module.image is not None for module in first.modules if module.path != "")
        second = ModuleMap(process, previous=first)
    assert [id(module) for module in second.modules] == [id(module) for module in first.modules]
    assert second.unchanged_since == first.unchanged_since


def test_repeat_collapsed(run_program) -> None:
    program = run_program("threads-O2")
    command = [sys.executable, "-m", "liveunwind", "pid", str(program.pid), "--repeat", "3"]
    result = subprocess.run(
        [*command, "--interval", "0.01", "--collapsed"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(program.threads())
    stacks = dict(line.rsplit(" ", 1) for line in lines)
    assert set(stacks.values()) == {"3"}
    deep = next(stack for stack in stacks if stack.startswith("deep;"))
    frames = deep.split(";")
    assert frames[-3:-1] == ["block_in_nanosleep", "__nanosleep"]
    assert [name for name in frames if name.startswith("chain_")] == [
        f"chain_{n:02d}" for n in range(1, 31)
    ]


def test_repeat_prints_every_backtrace(run_program) -> None:
    program = run_program("threads-O2")
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", "pid", str(program.pid), "--repeat", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(f'Thread {program.pid} "threads-O2"') == 2


@pytest.mark.parametrize(
    "program_args",
    [("threads-O2",), ("threads-O0",), ("threads-O2-nofp",), ("sighandler",), ("plt",),
     ("realign-O2",), ("cxxthrow-O2",), ("recurse", "300")],
)  # fmt: skip
def test_fast_path_walks_exactly_like_the_general_path(run_program, program_args) -> None:
    """The per-pc plan cache is an optimisation: --verbose walks every frame the general way."""
    program = run_program(*program_args)
    with PtraceProcess(program.pid) as process:
        fast = Backtracer(BacktraceOptions()).backtrace(process, {})
        general = Backtracer(BacktraceOptions(verbose=True)).backtrace(process, {})
    assert fast.threads and len(fast.threads) == len(general.threads)
    for ours, theirs in zip(fast.threads, general.threads):
        assert [_frame_key(frame) for frame in ours.frames] == [
            _frame_key(frame) for frame in theirs.frames
        ]
        assert ours.stop_reason == theirs.stop_reason


@pytest.mark.parametrize(
    ("snapshot", "lines", "phases"),
    [
        (True, False, "prepare attach copy detach freeze unwind symbolize total"),
        (True, True, "prepare attach copy detach freeze unwind symbolize lines total"),
        (False, True, "prepare attach unwind symbolize lines detach freeze total"),
    ],
)
def test_phases_in_the_order_stats_prints_them(
    run_program, snapshot: bool, lines: bool, phases: str
) -> None:
    """--stats names each phase once, in the order of the pipeline (a phase in pieces: its last)."""
    program = run_program("threads-O2")
    backtrace = Session(program.pid, snapshot=snapshot, lines=lines).backtrace()
    assert list(backtrace.timings) == phases.split()
    assert all(seconds >= 0 for seconds in backtrace.timings.values())
    assert backtrace.timings["total"] >= backtrace.timings["unwind"] + backtrace.timings["attach"]
