"""End to end: live processes unwound by liveunwind, frame for frame equal to gdb and eu-stack.

Every thread's list of pcs must equal gdb's (physical frames: gdb's inline
and tail-call frames have no stack frame of their own), and eu-stack's where
eu-stack gets that far.  Programs that run rather than sleep are stopped with
SIGSTOP first, so every tool sees the same stacks; liveunwind must leave them
stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import liveunwind
from liveunwind.frames import Backtrace, Method
from liveunwind.targets.live import procfs
from tests.support.assertions import assert_matches_gdb
from tests.support.oracles import Backtraces, eu_stack_backtraces, gdb_backtraces
from tests.support.paths import ROOT
from tests.support.waits import state, wait_for_state, wait_until

TEST_PROGRAMS = [
    ("threads-O0", ()),
    ("threads-O2", ()),
    ("threads-O2-nofp", ()),
    ("threads-O0-fp", ()),
    ("recurse", ("200",)),
    ("realign-O0", ()),
    ("realign-O2", ()),
    ("plt", ()),
    ("cxxthrow-O0", ()),
    ("cxxthrow-O2", ()),
]


def assert_agrees_with_eu_stack(backtrace: Backtrace, oracle: Backtraces) -> None:
    """eu-stack may stop early (it has no signal-frame or expression support in places)."""
    for thread in backtrace.threads:
        theirs = [frame.pc for frame in oracle.get(thread.tid, [])]
        ours = [frame.pc for frame in thread.frames][: len(theirs)]
        assert ours == theirs, f"thread {thread.tid} ({thread.name}) differs from eu-stack"


def check_frames_are_well_formed(backtrace: Backtrace) -> None:
    for thread in backtrace.threads:
        assert thread.frames[0].method is Method.CONTEXT
        for frame in thread.frames[1:]:
            assert frame.method in (Method.CFI, Method.SIGNAL), frame
        cfas = [frame.cfa for frame in thread.frames if frame.cfa is not None]
        assert cfas == sorted(cfas) or any(f.signal_frame for f in thread.frames)


@pytest.mark.parametrize(("name", "args"), TEST_PROGRAMS, ids=[name for name, _ in TEST_PROGRAMS])
def test_test_program_matches_gdb_and_eu_stack(run_program, gdb, eu_stack, name, args) -> None:
    program = run_program(name, *args)
    backtrace = liveunwind.attach(program.pid)
    check_frames_are_well_formed(backtrace)
    assert_matches_gdb(backtrace, gdb_backtraces(program.pid, gdb=gdb))
    assert_agrees_with_eu_stack(backtrace, eu_stack_backtraces(program.pid, eu_stack=eu_stack))


def test_signal_handler_frames(run_program, gdb) -> None:
    program = run_program("sighandler")
    os.kill(program.pid, signal.SIGSTOP)
    try:
        wait_for_state(program.pid, "T")
        backtrace = liveunwind.attach(program.pid)
        assert_matches_gdb(backtrace, gdb_backtraces(program.pid, gdb=gdb))
        assert procfs.process_stat(program.pid).state == "T"
    finally:
        os.kill(program.pid, signal.SIGCONT)
    for name in ("busy", "syscall"):
        thread = next(t for t in backtrace.threads if t.name == name)
        functions = [frame.function for frame in thread.frames]
        signal_index = next(i for i, f in enumerate(thread.frames) if f.signal_frame)
        assert functions[signal_index - 1] == "on_signal"
        # The interrupted frame's pc is exact: it is looked up without pc - 1.
        assert thread.frames[signal_index + 1].exact_pc


def test_no_snapshot_gives_the_same_frames(run_program) -> None:
    program = run_program("threads-O2")
    with_copy = liveunwind.attach(program.pid)
    stopped_throughout = liveunwind.attach(program.pid, snapshot=False)
    assert _pcs_by_tid(with_copy) == _pcs_by_tid(stopped_throughout)


def test_threads_option_and_frame_limit(run_program) -> None:
    program = run_program("recurse", "300")
    backtrace = liveunwind.attach(program.pid, max_frames=20)
    deep = max(backtrace.threads, key=lambda thread: len(thread.frames))
    assert len(deep.frames) == 20
    assert deep.stop_text == "frame limit: 20 frames"
    only = liveunwind.attach(program.pid, threads=[deep.tid], max_frames=0)
    assert [thread.tid for thread in only.threads] == [deep.tid]
    assert only.threads[0].complete
    assert len(only.threads[0].frames) > 300


def test_cli_json_document(run_program) -> None:
    program = run_program("threads-O2")
    result = _cli("pid", str(program.pid), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["pid"] == program.pid
    assert {thread["tid"] for thread in document["threads"]} == set(program.threads())
    for thread in document["threads"]:
        assert thread["stop_reason"] == "end of stack"
        for index, frame in enumerate(thread["frames"]):
            assert frame["index"] == index
            assert isinstance(frame["pc"], int) and isinstance(frame["sp"], int)
            assert frame["method"] == ("context" if index == 0 else "cfi")
            assert frame["trust"] == ("exact" if index == 0 else "high")
            assert set(frame) >= {"cfa", "module", "module_offset", "function", "offset"}


def test_cli_text_names_functions_and_modules(run_program) -> None:
    program = run_program("threads-O0")
    result = _cli("pid", str(program.pid))
    assert result.returncode == 0, result.stderr
    chain = next(block for block in result.stdout.split("\n\n") if '"deep"' in block)
    lines = chain.splitlines()
    assert lines[0] == f'Thread {program.tid("deep")} "deep" (sleeping):'
    assert any("  (threads-O0)  [cfi]" in line and "chain_30" in line for line in lines)
    assert any("(libc.so.6)" in line for line in lines)
    assert lines[-1] == "  -- end of stack (complete)"


def test_cli_sigterm_halfway_leaves_the_target_untraced(run_program) -> None:
    program = run_program("recurse", "10000", timeout=30)
    command = [sys.executable, "-m", "liveunwind", "pid", str(program.pid)]
    command += ["--max-frames", "0", "--no-snapshot", "--no-symbols"]
    for delay in (0.05, 0.2, 0.4):
        runner = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT
        )
        time.sleep(delay)
        runner.send_signal(signal.SIGTERM)
        _, stderr = runner.communicate(timeout=60)
        assert b"Traceback" not in stderr
        assert procfs.tracer_of(program.pid) == 0
        wait_for_state(program.pid, "S")


def test_sigint_halfway_exits_130(run_program) -> None:
    program = run_program("recurse", "10000", timeout=30)
    command = [sys.executable, "-m", "liveunwind", "pid", str(program.pid)]
    command += ["--max-frames", "0", "--no-snapshot"]
    runner = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    # Interrupt only once liveunwind holds the target (a first run in a fresh
    # checkout spends a while compiling its modules before it gets there).
    deadline = time.monotonic() + 30
    while procfs.tracer_of(program.pid) != runner.pid and runner.poll() is None:
        assert time.monotonic() < deadline, "liveunwind never attached"
        time.sleep(0.001)
    runner.send_signal(signal.SIGINT)
    _, stderr = runner.communicate(timeout=60)
    if runner.returncode == 130:
        assert stderr.decode().strip() == "liveunwind: interrupted"
    else:  # it finished before the signal came
        assert runner.returncode == 0, stderr.decode()
    assert procfs.tracer_of(program.pid) == 0
    wait_for_state(program.pid, "S")


# -- programs nobody here wrote ----------------------------------------------------------

PYTHON_THREADS = (
    "import threading, time\n"
    "threads = [threading.Thread(target=time.sleep, args=(600,), daemon=True) for _ in range(8)]\n"
    "[t.start() for t in threads]\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def _all_threads_sleep(pid: int) -> bool:
    return all(state(pid, int(tid)) in ("S", None) for tid in os.listdir(f"/proc/{pid}/task"))


def _cpu_seconds(pid: int) -> float:
    """User and system time the process has run (utime and stime of its stat, in ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def foreign_program(request) -> Iterator[subprocess.Popen[str]]:
    """The program, stopped with SIGSTOP once it is where it stays: asleep, or busy in its loop."""
    command, ready_line = request.param
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        if ready_line:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
            wait_until(lambda: _all_threads_sleep(process.pid), 10, f"{command[0]} asleep")
        else:  # past its start-up: a tenth of a second of CPU is loop, not loader
            wait_until(lambda: _cpu_seconds(process.pid) >= 0.1, 30, f"{command[0]} busy")
        os.kill(process.pid, signal.SIGSTOP)
        wait_for_state(process.pid, "T")
        yield process
    finally:
        process.kill()
        process.wait()


FOREIGN = [
    pytest.param((["/usr/bin/python3", "-c", PYTHON_THREADS], True), id="python3-8-threads"),
    pytest.param((["bash", "-c", "while true; do :; done"], False), id="bash-loop"),
    pytest.param(
        (
            [
                "sqlite3",
                ":memory:",
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                "SELECT count(*) FROM c;",
            ],
            False,
        ),
        id="sqlite3-long-query",
    ),
]


@pytest.mark.parametrize("foreign_program", FOREIGN, indirect=True)
def test_foreign_program_matches_gdb(foreign_program, gdb) -> None:
    pid = foreign_program.pid
    backtrace = liveunwind.attach(pid)
    assert_matches_gdb(backtrace, gdb_backtraces(pid, gdb=gdb))
    assert procfs.process_stat(pid).state == "T", "a stopped process must stay stopped"
    assert procfs.tracer_of(pid) == 0
    if "python3" in foreign_program.args[0]:
        assert len(backtrace.threads) == 9


def _pcs_by_tid(backtrace: Backtrace) -> dict[int, list[int]]:
    return {thread.tid: [frame.pc for frame in thread.frames] for thread in backtrace.threads}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.parametrize(("name", "word"), [("x86_64", 19), ("aarch64", 31), ("riscv64", 2)])
def test_the_stack_pointer_is_the_word_the_kernel_puts_it_in(name: str, word: int) -> None:
    """rsp is word 19 of x86_64's user_regs_struct (r15 … orig_rax rip cs eflags rsp),
    sp word 31 of aarch64's user_pt_regs (x0–x30 sp pc), x2 word 2 of riscv64's
    (pc ra sp …): the word a stop reads alone, before the rest is decoded."""
    from liveunwind.arch import arch_by_name
    from liveunwind.targets.live.ptrace import _stack_pointer_word

    assert _stack_pointer_word(arch_by_name(name)) == word


def test_stack_pointers_taken_in_the_stop_are_the_decoded_registers(run_program) -> None:
    """What a snapshot copies the stacks from, read in the stop from the register blocks
    alone, is every stopped thread's stack pointer once they are decoded after it."""
    from liveunwind.targets.live.ptrace import PtraceProcess
    from liveunwind.targets.live.snapshot import Snapshot

    program = run_program("threads-O2")
    process = PtraceProcess(program.pid)
    in_the_stop = process.hold(lambda: (process.stack_pointers(), Snapshot.capture(process)))
    taken, snapshot = in_the_stop
    threads = snapshot.threads()
    assert len(threads) == len(procfs.list_tids(program.pid)) > 1
    assert taken == [(thread.tid, thread.registers[process.arch.sp]) for thread in threads]
    assert threads[0].tid == program.pid  # the main thread first
    assert all(len(thread.registers) >= 17 for thread in threads)
