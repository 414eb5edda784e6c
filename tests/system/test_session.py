"""Warm backtraces: a Session keeps what it learned between backtraces; --repeat and --collapsed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import BacktraceOptions
from liveunwind.backtrace.session import Session
from liveunwind.frames import Backtrace, Frame, ThreadBacktrace
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.targets.live import procfs
from liveunwind.targets.live.ptrace import PtraceProcess
from liveunwind.targets.live.snapshot import Snapshot
from tests.support.hostile import assert_untraced, states
from tests.support.paths import ROOT, TESTPROGS
from tests.support.programs import start_command
from tests.support.waits import wait_until

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.targets.base import ThreadState


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


@pytest.mark.parametrize("program_args", [("threads-O2",), ("sighandler",), ("recurse", "300")])
def test_a_session_of_one_backtrace_records_nothing_for_a_next(run_program, program_args) -> None:
    """``once`` (a single ``liveunwind pid``): the same walk, no walk or suffix recorded, and
    the session closed as its backtrace ends (its tracer thread ended, its files closed)."""
    program = run_program(*program_args)
    kept = Session(program.pid)
    alone = Session(program.pid, once=True)
    assert _everything(alone.backtrace()) == _everything(kept.backtrace())
    assert kept.cache.suffixes and not alone.cache.suffixes and not alone.cache._next_walks
    assert alone._tracer is None and alone._task_stats is None
    assert kept._tracer is not None and kept._tracer.running


def test_a_perf_map_left_by_an_earlier_process_with_the_pid_is_not_read(run_program) -> None:
    """Pids are reused and perf maps outlive their processes: one last written before the
    process started is another's (no registry looked for), one written since is its own."""
    before = time.time()
    program = run_program("threads-O2")
    started = procfs.started_at(program.pid)
    assert started is not None and before - 0.02 < started < time.time()  # to a clock tick
    perf_map = Path(f"/tmp/perf-{program.pid}.map")
    perf_map.write_text("7f0000000000 40 left_behind\n")
    os.utime(perf_map, (started - 5, started - 5))
    assert "registry" not in Session(program.pid).backtrace().timings
    os.utime(perf_map)  # written now: the process's own
    assert "registry" in Session(program.pid).backtrace().timings


def _everything(backtrace: Backtrace) -> list[tuple[object, ...]]:
    """All a backtrace says of each thread and frame."""
    return [
        (
            thread.tid,
            thread.stop_reason,
            thread.stop_detail,
            [
                (
                    *_frame_key(frame),
                    frame.exact_pc,
                    frame.module,
                    frame.module_offset,
                    frame.offset,
                )
                for frame in thread.frames
            ],
        )
        for thread in backtrace.threads
    ]


def _warm_against_cold(pid: int, rounds: int, pause: float = 0.0) -> tuple[int, set[int]]:
    """Each round one stop: a warm backtracer (kept across rounds) and a cold one walk the
    same snapshot, and must say the same.  Returns the walks replayed and the generations."""
    warm = Backtracer(BacktraceOptions())
    replayed, generations = 0, set()
    for _ in range(rounds):
        with PtraceProcess(pid) as process:
            snapshot = Snapshot.capture(process)
            ours = warm.backtrace(snapshot, {})
            fresh = Backtracer(BacktraceOptions()).backtrace(snapshot, {})
        assert _everything(ours) == _everything(fresh)
        for thread in ours.threads:  # a replayed frame is made without Frame.__init__
            assert all(hasattr(frame, slot) for frame in thread.frames for slot in Frame.__slots__)
            assert [frame.index for frame in thread.frames] == list(range(len(thread.frames)))
        assert [[frame.notes for frame in t.frames] for t in ours.threads] == [
            [frame.notes for frame in t.frames] for t in fresh.threads
        ]
        replayed += warm.cache.replayed
        generations.add(warm.cache.generation)
        time.sleep(pause)
    return replayed, generations


def test_a_remembered_walk_gives_the_frames_of_a_cold_one(run_program) -> None:
    """Parked threads are given their last walk again (UnwindCache.walks), frame for frame."""
    program = run_program("threads-O2")
    replayed, _ = _warm_against_cold(program.pid, 6)
    # The first round walks them all; after it most threads sit where they were (a spinner
    # moves, and a sleep's timeout words may change under a parked thread).
    assert replayed >= 5 * len(program.threads()) // 2


#: Threads parked in the program's code, and one that dlopens and dlcloses libm all along,
#: each state held for 60 ms.
DLCYCLE = r"""
#include "tp.h"
#include <dlfcn.h>
#include <unistd.h>
TP_NOINLINE static void parked_inner(void) { tp_arrive(); for (;;) pause(); }
TP_NOINLINE static void *parked(void *unused)
{
    (void)unused;
    parked_inner();
    tp_sink++;
    return NULL;
}
static void *loader(void *unused)
{
    (void)unused;
    tp_arrive();
    for (;;) {
        void *library = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
        usleep(60000);
        if (library != NULL)
            dlclose(library);
        usleep(60000);
    }
}
int main(void)
{
    tp_allow_tracing();
    tp_spawn("parked", parked, NULL);
    tp_spawn("parked", parked, NULL);
    tp_spawn("loader", loader, NULL);
    tp_announce(3);
    for (;;)
        pause();
}
"""


def test_remembered_walks_go_when_a_library_comes_or_goes(tmp_path: Path) -> None:
    """dlopen/dlclose move the map between backtraces: each warm walk still equals a cold one,
    walks are replayed while the map holds, and the cache starts anew when it moves."""
    source = tmp_path / "dlcycle.c"
    source.write_text(DLCYCLE)
    exe = tmp_path / "dlcycle"
    subprocess.run(["gcc", "-O2", "-g", "-pthread", f"-I{TESTPROGS}", "-o", exe, source, "-ldl"],
                   check=True)  # fmt: skip
    with start_command([str(exe)]) as program:
        time.sleep(0.1)
        # Each map holds for 60 ms: a few rounds see it twice (replays), and
        # the rounds span many changes (new generations).
        replayed, generations = _warm_against_cold(program.pid, 50, pause=0.01)
    assert replayed > 0
    assert len(generations) > 5  # libm came and went under the cache


def test_jit_code_renewed_under_a_warm_cache(jit_build: Path) -> None:
    """jit-soak renews its JIT code, dlopens and dlcloses libraries and starts threads all the
    time: warm walks equal cold ones at every instant (the registry's code is never remembered)."""
    with start_command([str(jit_build / "jit-soak")]) as program:
        try:
            replayed, generations = _warm_against_cold(program.pid, 30, pause=0.005)
        finally:
            Path(f"/tmp/perf-{program.pid}.map").unlink(missing_ok=True)
    assert replayed == 0  # a process with JIT code: no walk is remembered
    assert len(generations) > 1


def sleeper_remembered(warm: Backtracer, backtrace: Backtrace) -> bool:
    sleeper = next(thread for thread in backtrace.threads if thread.name == "sleeper")
    return sleeper.tid in warm.cache._next_walks


def test_a_remembered_walk_is_not_given_again_when_a_word_it_read_changed(run_program) -> None:
    """The sleeper's return address is changed in the stop's copy (its registers stay the
    same): the walk is made again, and says what a cold one says of the changed stack."""
    program = run_program("threads-O2")
    warm = Backtracer(BacktraceOptions())
    for _ in range(2):  # the first walks read code (the new pcs' checks): remembered after
        with PtraceProcess(program.pid) as process:
            before = warm.backtrace(Snapshot.capture(process), {})
            arch = process.arch
    assert sleeper_remembered(warm, before)
    sleeper = next(thread for thread in before.threads if thread.name == "sleeper")
    return_address = sleeper.frames[1].pc
    with PtraceProcess(program.pid) as process:
        snapshot = Snapshot.capture(process)
        state = next(thread for thread in snapshot.threads() if thread.tid == sleeper.tid)
        sp = state.registers[arch.sp]
        copy = snapshot.stack_copy(sp)
        assert copy is not None and isinstance(copy[1], bytearray)
        start, data = copy
        at = next(
            offset
            for offset in range(sp - start, len(data) - 7, 8)
            if int.from_bytes(data[offset : offset + 8], "little") == return_address
        )
        data[at : at + 8] = (0x10).to_bytes(8, "little")  # not code: the walk ends there
        ours = warm.backtrace(snapshot, {})
        fresh = Backtracer(BacktraceOptions()).backtrace(snapshot, {})
    assert _everything(ours) == _everything(fresh)
    walked = next(thread for thread in ours.threads if thread.tid == sleeper.tid)
    assert [frame.pc for frame in walked.frames] != [frame.pc for frame in sleeper.frames]
    assert ours.threads and warm.cache.replayed >= 1  # the other threads were given theirs


def _sleeper_walks(
    warm: Backtracer, pid: int, change: Callable[[ThreadState, Snapshot], None]
) -> ThreadBacktrace:
    """The sleeper's walk by ``warm``, of one snapshot that ``change`` altered first (the
    sleeper's registers or its stack copy), checked against a cold backtracer's."""
    with PtraceProcess(pid) as process:
        snapshot = Snapshot.capture(process)
        state = next(thread for thread in snapshot.threads() if thread.name == "sleeper")
        change(state, snapshot)
        ours = warm.backtrace(snapshot, {})
        fresh = Backtracer(BacktraceOptions()).backtrace(snapshot, {})
    assert _everything(ours) == _everything(fresh)
    return next(thread for thread in ours.threads if thread.tid == state.tid)


def test_a_remembered_suffix_is_taken_only_where_every_register_and_word_it_used_holds(
    run_program,
) -> None:
    """threads-O0's sleeper: its frames' CFA rules read the frame pointer, which the libc
    frames under them pass on.  A register no rule of the walk reads changed: the walk is
    taken whole from the remembered suffix of its first frame.  The frame pointer (callee-
    saved) changed, or a word deep in the walk: it is walked again, as a cold walk goes."""
    program = run_program("threads-O0")
    warm = Backtracer(BacktraceOptions())
    for _ in range(2):  # the first walks read code (the new pcs' checks): remembered after
        with PtraceProcess(program.pid) as process:
            before = warm.backtrace(Snapshot.capture(process), {})
            arch = process.arch
    sleeper = next(thread for thread in before.threads if thread.name == "sleeper")
    record, index = warm.cache.suffixes[(sleeper.frames[0].pc, sleeper.frames[0].sp)]
    used = record.live[index][0]
    assert used is not None and arch.fp in used  # the rules of the -O0 frames read it
    frames = [_frame_key(frame) for frame in sleeper.frames]

    def unused_register(state: ThreadState, _snapshot: Snapshot) -> None:
        number = next(number for number in state.registers if number not in used)
        state.registers[number] ^= 0x5A5A

    ours = _sleeper_walks(warm, program.pid, unused_register)
    assert warm.cache.suffixed >= 1 and warm.cache.replayed < len(before.threads)
    assert [_frame_key(frame) for frame in ours.frames] == frames

    def frame_pointer(state: ThreadState, _snapshot: Snapshot) -> None:
        state.registers[arch.fp] += 64

    ours = _sleeper_walks(warm, program.pid, frame_pointer)
    assert [_frame_key(frame) for frame in ours.frames] != frames

    # The word start_thread's caller was read from (the walk's last return address).
    deep = sleeper.frames[-1].pc

    def deep_word(state: ThreadState, snapshot: Snapshot) -> None:
        state.registers[next(n for n in state.registers if n not in used)] ^= 0x5A5A
        sp = state.registers[arch.sp]
        copy = snapshot.stack_copy(sp)
        assert copy is not None and isinstance(copy[1], bytearray)
        start, data = copy
        at = max(
            offset
            for offset in range(sp - start, len(data) - 7, 8)
            if int.from_bytes(data[offset : offset + 8], "little") == deep
        )
        assert at + start in record.addresses[record.marks[len(frames) - 2] :]
        data[at : at + 8] = (0x10).to_bytes(8, "little")  # not code: the walk ends before

    ours = _sleeper_walks(warm, program.pid, deep_word)
    assert len(ours.frames) < len(frames)


def _own_threads() -> set[int]:
    return {int(entry) for entry in os.listdir("/proc/self/task")}


def test_a_session_lends_one_tracer_thread_to_all_its_backtraces(run_program) -> None:
    """One thread of ours makes the ptrace calls of every backtrace (no thread started and
    ended per sample); between backtraces the target is traced by nobody, and closing the
    session ends the thread."""
    program = run_program("threads-O2")
    before = _own_threads()
    session = Session(program.pid)
    tracers: set[int] = set()
    for _ in range(4):
        assert session.backtrace().complete
        tracers |= _own_threads() - before
        assert_untraced(program.pid)
    assert len(tracers) == 1
    session.close()
    wait_until(lambda: not _own_threads() & tracers, 5, "the tracer thread to end")


def test_a_thread_that_never_stops_ends_the_lent_tracer(testprogs_build: Path) -> None:
    """A main thread inside vfork() cannot be detached: the tracer thread ends (the kernel
    then lets go of it), and the next backtrace stops the process with a new one."""
    with start_command([str(testprogs_build / "vforker"), "30"]) as program:
        wait_until(lambda: states(program.pid).get(program.pid, ("",))[0] == "D", 10, "vfork")
        before = _own_threads()
        session = Session(program.pid, stop_timeout=0.1)
        for _ in range(2):
            backtrace = session.backtrace()
            (main,) = [thread for thread in backtrace.threads if thread.tid == program.pid]
            assert not main.complete and "not stopped" in main.stop_detail
            wait_until(lambda: not _own_threads() - before, 5, "the tracer thread to end")
            assert_untraced(program.pid)
        session.close()


def _own_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_thread_stat_files_are_kept_open_for_live_threads_only(run_program) -> None:
    """Each thread's stat is read again from the file kept open (what the path gives); the
    file of a thread that ended is closed when read, and of one no longer listed on request."""
    import threading

    program = run_program("threads-O2")
    tids = procfs.list_tids(program.pid)
    files = procfs.TaskStatFiles(program.pid)
    before, kept = _own_files(), procfs.TaskStatFiles.kept
    for _ in range(2):
        read = [files.read(tid) for tid in tids]
        by_path = [procfs.read_stat(f"/proc/{program.pid}/task/{tid}/stat") for tid in tids]
        assert [(s.name, s.state) for s in read] == [(s.name, s.state) for s in by_path]
        assert _own_files() == before + len(tids)
    files.keep_only(tids[:1])
    assert _own_files() == before + 1 and procfs.TaskStatFiles.kept == kept + 1
    files.close()
    assert _own_files() == before and procfs.TaskStatFiles.kept == kept

    ours = procfs.TaskStatFiles(os.getpid())
    release = threading.Event()
    worker = threading.Thread(target=release.wait, daemon=True)
    worker.start()
    try:
        assert worker.native_id is not None
        path = f"/proc/self/task/{worker.native_id}/stat"
        wait_until(lambda: procfs.read_stat(path).state == "S", 5, "the worker to park")
        assert ours.read(worker.native_id).state == "S"  # parked in release.wait()
        assert _own_files() == before + 1
    finally:
        release.set()
        worker.join()
    wait_until(lambda: not os.path.exists(f"/proc/self/task/{worker.native_id}"), 5, "its end")
    with pytest.raises(OSError):
        ours.read(worker.native_id)
    assert _own_files() == before and procfs.TaskStatFiles.kept == kept
