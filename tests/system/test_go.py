"""Go programs: kernel cores of a GOTRACEBACK=crash death, and a live program at random instants.

testprogs/go runs goroutines that spin and goroutines parked in the
scheduler.  Go's threads end their stacks in ways DWARF does not describe
(``runtime.goexit``, ``runtime.mstart``, the scheduler stack g0 entered by
``runtime.mcall`` or ``runtime.systemstack``), and its signal handlers run
on signal stacks of their own.  The known truth each walk is held to:
complete, every pc in the program's code, the last frame one where Go's own
traceback ends (its .gopclntab says which), and through a signal frame into
the code the signal interrupted.  gdb is the oracle where it is right: up to
the first signal frame (it does not get through Go's).
"""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pytest

from liveunwind.backtrace.api import attach, open_core
from liveunwind.frames import Backtrace, Method, ThreadBacktrace
from liveunwind.targets.cores.elfcore import ElfCore
from tests.support.cores import unlimited_core
from tests.support.go import go_table
from tests.support.oracles import gdb_core_backtraces, pcs
from tests.support.programs import start_program

#: The functions after the spinning thread's signal frame, outermost last.
SPINNER = ["main.busy", "main.main.func1", "runtime.goexit"]


@pytest.fixture(scope="module")
def go_core(go_program, tmp_path_factory) -> tuple[Path, int]:
    """A kernel core of testprogs/go dying under GOTRACEBACK=crash, and its spinner's tid."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores here ({pattern})")
    folder = tmp_path_factory.mktemp("go-core")
    result = subprocess.run(
        [str(go_program), "crash"],
        cwd=folder,
        env={"GOTRACEBACK": "crash", "PATH": "/usr/bin:/bin"},
        preexec_fn=unlimited_core,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode < 0, f"the program did not die of a signal: {result}"
    cores = list(folder.glob("core*"))
    assert len(cores) == 1, cores
    spinner = int(result.stdout.split("spinner ")[1].split()[0])
    return cores[0], spinner


def _walked(thread: ThreadBacktrace) -> list[tuple[object, ...]]:
    return [(f.pc, f.sp, f.cfa, f.method, f.signal_frame, f.function) for f in thread.frames]


def _describe(thread: ThreadBacktrace) -> str:
    lines = [f"#{f.index:<3} {f.pc:#x} {f.function} [{f.method.value}]" for f in thread.frames]
    return "\n".join([*lines, thread.stop_text])


def _check_known_truth(backtrace: Backtrace, code: list[tuple[int, int]], program: Path) -> None:
    """Every walk complete, every pc code, each ending where Go's traceback ends."""
    table, _ = go_table(program)
    for thread in backtrace.threads:
        assert thread.complete, _describe(thread)
        for frame in thread.frames:
            assert any(start <= frame.pc < end for start, end in code), (
                f"frame #{frame.index} {frame.pc:#x} is not code\n{_describe(thread)}"
            )
        last = thread.frames[-1]
        function = table.function_at(last.lookup_pc)
        assert function is not None and table.ends_stack(function), (
            f"thread {thread.tid} ends where Go's traceback does not\n{_describe(thread)}"
        )


def test_kernel_core_of_a_go_crash(go_core, go_program, gdb) -> None:
    core, spinner = go_core
    backtrace = open_core(str(core), str(go_program))
    with ElfCore.open(str(core), str(go_program)) as target:
        code = [(m.start, m.end) for m in target.mappings() if m.executable]
    assert backtrace.crash is not None and backtrace.crash.signal_name == "SIGABRT"
    _check_known_truth(backtrace, code, go_program)

    aborting = backtrace.threads[0]
    assert aborting.tid == backtrace.crash.tid
    signal = [f.index for f in aborting.frames if f.signal_frame]
    assert signal, _describe(aborting)
    interrupted = aborting.frames[signal[-1] + 1 :]
    assert interrupted and all(f.function for f in interrupted), _describe(aborting)

    threads = {thread.tid: thread for thread in backtrace.threads}
    spinning = threads[spinner]
    frames = spinning.frames
    handler = [f.index for f in frames if f.signal_frame]
    assert len(handler) == 1, _describe(spinning)
    assert frames[handler[0]].function == "runtime.sigreturn.abi0"  # named by its pc
    after = [f.function for f in frames[handler[0] + 1 :]]
    if after[0] not in ("main.spin", "main.busy"):
        # The signal caught the thread in the runtime, on g0 (an asynchronous preemption
        # of the spinner, say): the walk crosses from the scheduler into the goroutine.
        assert any(f.method is Method.GOROUTINE for f in frames), _describe(spinning)
        assert "main.spin" in after or "main.busy" in after, _describe(spinning)
    assert after[-3:] == [*SPINNER[:2], "runtime.goexit.abi0"], _describe(spinning)

    # The cached fast path walks exactly like the general path (--verbose).
    general = open_core(str(core), str(go_program), verbose=True)
    assert [_walked(thread) for thread in general.threads] == [
        _walked(thread) for thread in backtrace.threads
    ]

    # gdb is right up to the first signal frame, whose trampoline it does not recognise.
    oracle = gdb_core_backtraces(core, go_program, gdb=gdb, max_frames=64)
    for thread in backtrace.threads:
        first = next(f.index for f in thread.frames if f.signal_frame)
        ours = [f.pc for f in thread.frames[: first + 1]]
        assert pcs(oracle[thread.tid])[: first + 1] == ours, _describe(thread)


def _executable_ranges(pid: int) -> list[tuple[int, int]]:
    ranges = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if "x" in fields[1]:
            start, end = (int(part, 16) for part in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


def test_live_go_program_at_ten_random_instants(go_program) -> None:
    """Spinning threads are stopped anywhere: in Go code, the scheduler, the vDSO."""
    randomness = random.Random(15)
    with start_program(go_program.parent, go_program.name, busy={go_program.name}) as program:
        code = _executable_ranges(program.pid)
        for _ in range(10):
            time.sleep(randomness.uniform(0.0, 0.05))
            backtrace = attach(program.pid)
            assert len(backtrace.threads) >= 6
            _check_known_truth(backtrace, code, go_program)
