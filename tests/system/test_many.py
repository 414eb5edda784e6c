"""``liveunwind pid`` over many processes: chosen by pid, --exe, --name, --all; some failing.

Real processes (testprogs' threads-O2, copied under a name of the test's
own so that no other process on the machine matches; vforker, whose main
thread cannot stop), each process's frames against gdb's, and every
process left running and untraced.  The JSON document is validated
against the shipped schema.  What needs no process (the parser, the
choice between pids and selectors) is in unit/test_cli_parse.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.cli.targets import choose
from liveunwind.frames import Backtrace, Frame
from liveunwind.targets.live import procfs
from liveunwind.targets.live.ptrace import PtraceProcess
from tests.support.assertions import assert_one_line_error
from tests.support.builds import build
from tests.support.cli import run_cli
from tests.support.hostile import assert_untraced, states
from tests.support.paths import ROOT
from tests.support.processes import assert_frames_are_gdbs, assert_running_untraced
from tests.support.programs import RunningProgram, start_command, start_program
from tests.support.schema import VALIDATOR
from tests.support.startup import modules_the_command_imported
from tests.support.waits import wait_until

COPIES = 3


@pytest.fixture
def program_copy(testprogs_build: Path, tmp_path: Path) -> Path:
    """threads-O2 under a name no other process has (comm is its first 15 bytes)."""
    name = f"lu{uuid.uuid4().hex[:10]}"
    copy = tmp_path / name
    shutil.copy2(testprogs_build / "threads-O2", copy)
    return copy


@pytest.fixture
def copies(program_copy: Path) -> Iterator[list[RunningProgram]]:
    started = []
    try:
        for _ in range(COPIES):
            started.append(start_program(program_copy.parent, program_copy.name))
        yield started
    finally:
        for program in started:
            program.stop()


def _document(result: subprocess.CompletedProcess[str]) -> dict:
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    return document


def test_by_exe_every_copy_with_gdbs_frames_and_modules_read_once(
    copies: list[RunningProgram], program_copy: Path, gdb: str
) -> None:
    result = run_cli("pid", "--exe", str(program_copy), "--json", "--stats")
    assert result.returncode == 0, result.stderr
    document = _document(result)
    assert document["complete"] is True
    entries = document["processes"]
    assert [entry["pid"] for entry in entries] == sorted(program.pid for program in copies)
    assert {entry["name"] for entry in entries} == {program_copy.name}
    # The program and libc of the second and third copies came from the first, and
    # threads of the third took the second's walks, moved (checked against gdb below).
    assert f"{COPIES} processes" in result.stderr
    assert _modules_taken(result.stderr) >= 2 * (COPIES - 1)
    assert _walks_moved(result.stderr) >= 3
    for entry in entries:
        assert entry["error"] is None and entry["backtrace"]["pid"] == entry["pid"]
        assert_frames_are_gdbs(entry, gdb)
    assert_running_untraced([program.pid for program in copies])


def test_by_name_text_and_collapsed(copies: list[RunningProgram], program_copy: Path) -> None:
    pids = sorted(program.pid for program in copies)
    text = run_cli("pid", "--name", f"^{program_copy.name}$")
    assert text.returncode == 0, text.stderr
    headers = [line for line in text.stdout.splitlines() if line.startswith("Process ")]
    assert headers == [f'Process {pid} "{program_copy.name}":' for pid in pids]
    assert text.stdout.count("chain_30") == COPIES  # the deep thread of each
    summed = run_cli("pid", "--name", f"^{program_copy.name}$", "--collapsed")
    assert summed.returncode == 0, summed.stderr
    deep = [line for line in summed.stdout.splitlines() if "chain_30" in line]
    assert len(deep) == 1 and deep[0].startswith(f"{program_copy.name};deep;")
    assert deep[0].endswith(f" {COPIES}")
    apart = run_cli("pid", *map(str, pids), "--collapsed", "--per-process")
    firsts = {line.split(";", 1)[0] for line in apart.stdout.splitlines()}
    assert firsts == {f"{program_copy.name}:{pid}" for pid in pids}
    assert_running_untraced(pids)


def test_all_leaves_out_ourselves_our_parents_and_kernel_threads(
    copies: list[RunningProgram],
) -> None:
    chosen = choose([], every=True, name=None, exe=None).pids
    assert {program.pid for program in copies} <= set(chosen)
    assert os.getpid() not in chosen and os.getppid() not in chosen
    assert 2 not in chosen  # kthreadd
    assert all(not procfs.process_stat(pid).flags & 0x00200000 for pid in chosen if _alive(pid))


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def test_one_that_exits_one_already_traced_one_that_does_not_stop(
    testprogs_build: Path, program_copy: Path, gdb: str
) -> None:
    """vforker holds the run 500 ms (its main thread cannot stop); meanwhile one copy exits.

    The order given is kept: vforker, the copy that exits while vforker is
    held, the copy another tracer holds, then two that are backtraced.  The
    report has a line for each failure, the others' frames are gdb's, and
    the exit code is 2.
    """
    vforker = start_command([str(testprogs_build / "vforker"), "30"])
    programs = [start_program(program_copy.parent, program_copy.name) for _ in range(4)]
    exiting, traced, *fine = programs
    try:
        wait_until(lambda: states(vforker.pid)[vforker.pid][0] == "D", what="vfork")
        order = [vforker.pid, exiting.pid, traced.pid, *(program.pid for program in fine)]
        with PtraceProcess(traced.pid):  # another tracer: this test
            run = subprocess.Popen(
                [sys.executable, "-m", "liveunwind", "pid", *map(str, order), "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd="/",
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )
            held = [tid for tid in states(vforker.pid) if tid != vforker.pid]
            wait_until(
                lambda: any(states(vforker.pid)[tid][1] for tid in held),
                timeout=30,
                what="liveunwind holding vforker",
            )
            exiting.stop()  # while liveunwind still holds vforker
            stdout, stderr = run.communicate(timeout=60)
            assert procfs.tracer_of(traced.pid) not in (0, run.pid)  # still the other tracer
        assert run.returncode == 2, stderr
        assert "Traceback" not in stderr
        document = json.loads(stdout)
        VALIDATOR.validate(document)
        entries = {entry["pid"]: entry for entry in document["processes"]}
        assert list(entries) == order and document["complete"] is False
        held_entry = entries[vforker.pid]["backtrace"]
        main = next(t for t in held_entry["threads"] if t["tid"] == vforker.pid)
        assert main["stop_reason"] == "thread did not stop" and "disk sleep" in main["state"]
        assert entries[exiting.pid]["backtrace"] is None
        assert any(word in entries[exiting.pid]["error"] for word in ("exited", "no process"))
        assert entries[traced.pid]["backtrace"] is None
        assert "already traced" in entries[traced.pid]["error"]
        for program in fine:
            assert_frames_are_gdbs(entries[program.pid], gdb)
        assert_running_untraced([traced.pid, *(program.pid for program in fine)])
        _assert_the_schema_refuses_broken_copies_of(document)
        assert states(vforker.pid)[vforker.pid] == ("D", 0)
        assert_untraced(vforker.pid)
    finally:
        vforker.stop()
        for program in programs:
            program.stop()


def _assert_the_schema_refuses_broken_copies_of(document: dict) -> None:
    """The processes document's ties hold in the schema: each change below breaks it."""
    failed = next(i for i, e in enumerate(document["processes"]) if e["error"] is not None)
    fine = next(i for i, e in enumerate(document["processes"]) if e["error"] is None)
    breakages = {
        "complete with a failure": lambda d: d.update(complete=True),
        "no backtrace and no error": lambda d: d["processes"][failed].update(error=None),
        "an error and a backtrace": lambda d: d["processes"][fine].update(error="gone"),
        "threads beside processes": lambda d: d.update(threads=[]),
        "a processes document inside": lambda d: d["processes"][fine].update(
            backtrace={**d, "processes": []}
        ),
    }
    for name, change in breakages.items():
        broken = json.loads(json.dumps(document))
        change(broken)
        assert not VALIDATOR.is_valid(broken), name


def test_nothing_matching_and_bad_selectors_are_one_line() -> None:
    absent = f"^lu-absent-{uuid.uuid4().hex[:6]}$"
    assert_one_line_error(run_cli("pid", "--name", absent), 2, "no process matches")
    assert_one_line_error(run_cli("pid", "--name", "("), 64, "--name", "regular expression")
    assert_one_line_error(run_cli("pid", "--exe", "/nonexistent/x"), 64, "--exe")
    assert_one_line_error(run_cli("pid", "1", "--all"), 64, "not both")
    assert_one_line_error(run_cli("pid", "1", "2", "--repeat", "2"), 64, "take one process")


def test_text_report_of_a_failure_is_a_line_and_the_rest_print(
    program_copy: Path,
) -> None:
    with start_program(program_copy.parent, program_copy.name) as fine:
        gone = subprocess.Popen(["true"])
        gone.wait()
        started = time.monotonic()
        result = run_cli("pid", str(gone.pid), str(fine.pid))
        assert time.monotonic() - started < 30
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].startswith(f"Process {gone.pid}: not backtraced: ")
        assert f'Process {fine.pid} "{program_copy.name}":' in lines
        assert "chain_30" in result.stdout
        assert_running_untraced([fine.pid])


def test_the_same_path_in_another_mount_namespace_is_another_file(
    testprogs_build: Path, program_copy: Path, gdb: str, tmp_path: Path
) -> None:
    """Two processes run /tmp/.../NAME, but in the second's mount namespace it is threads-O0.

    Same path, different device/inode and build-id: nothing of the first
    program may be used for the second, whose frames must be gdb's.
    """
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root for a mount namespace")
    first = start_program(program_copy.parent, program_copy.name)
    same = start_program(program_copy.parent, program_copy.name)
    other = tmp_path / "other"
    shutil.copy2(testprogs_build / "threads-O0", other)
    script = f"mount --bind {other} {program_copy} && exec {program_copy}"
    second = start_command(["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
    try:
        wait_until(
            lambda: all(s == "S" for s, _ in states(second.pid).values()), what="second asleep"
        )
        assert procfs.process_stat(second.pid).name == program_copy.name
        alike = run_cli("pid", str(first.pid), str(same.pid), "--stats")
        taken = _modules_taken(alike.stderr)
        result = run_cli("pid", str(first.pid), str(second.pid), "--json", "--stats")
        assert result.returncode == 0, result.stderr
        # The libraries are shared; the program, another file under the same path, is not.
        assert _modules_taken(result.stderr) == taken - 1 >= 1
        for entry in _document(result)["processes"]:
            assert_frames_are_gdbs(entry, gdb)
        assert_running_untraced([first.pid, second.pid])
    finally:
        second.stop()
        same.stop()
        first.stop()


def _modules_taken(stderr: str) -> int:
    """The count ``--stats`` gives of modules taken from another process instead of read."""
    found = re.search(r"; (\d+) modules taken from another process", stderr)
    assert found, stderr
    return int(found.group(1))


def _walks_moved(stderr: str) -> int:
    """The count ``--stats`` gives of threads' walks moved from another process."""
    found = re.search(r"; (\d+) threads' walks moved from another process", stderr)
    assert found, stderr
    return int(found.group(1))


def test_later_copies_decode_and_name_nothing_again(copies: list[RunningProgram]) -> None:
    """Plans and names are kept by file and link-time address for the whole run.

    The second and third copies map the same files elsewhere (ASLR): they
    find every plan and name the first one found, add none, and their
    frames are those of a run that shares nothing.
    """
    from liveunwind.backtrace.session import Session
    from liveunwind.backtrace.shared import SharedFiles

    shared = SharedFiles()
    Session(copies[0].pid, shared=shared).backtrace()
    facts = shared.facts
    found = (len(facts.plans), len(facts.shared), len(facts.names))
    assert all(found), found
    for program in copies[1:]:
        later = Session(program.pid, shared=shared).backtrace()
        assert (len(facts.plans), len(facts.shared), len(facts.names)) == found
        alone = Session(program.pid).backtrace()
        assert [[_frame(f) for f in t.frames] for t in later.threads] == [
            [_frame(f) for f in t.frames] for t in alone.threads
        ]
    assert_running_untraced([program.pid for program in copies])


def test_the_third_copy_takes_the_second_ones_walks_moved_and_its_own_frames(
    copies: list[RunningProgram],
) -> None:
    """The copies map their files and stacks elsewhere (ASLR) but are parked alike.

    The first copy of a layout is walked, the second records its walks, and
    the third is offered them with every address moved by its mapping's
    distance, the main thread's stack by its stack pointer's (unwinder/layouts.py):
    every thread, parked as the second's were, takes them, the main thread too,
    and every thread's frames are those of a backtrace of that copy alone, to
    the CFA and the stop's detail.
    """
    from liveunwind.backtrace.session import Session
    from liveunwind.backtrace.shared import SharedFiles

    shared = SharedFiles(once=True)
    moved = []
    for program in copies:
        session = Session(program.pid, shared=shared)
        together = session.backtrace()
        moved.append(session.cache.suffixed)
        alone = Session(program.pid).backtrace()
        assert _walks(together) == _walks(alone)
    assert moved[:2] == [0, 0]
    assert moved[2] == len(together.threads), moved
    assert_running_untraced([program.pid for program in copies])


def _walks(backtrace: Backtrace) -> list[tuple[object, ...]]:
    return [
        (
            thread.tid,
            thread.stop_reason,
            thread.stop_detail,
            [
                (*_frame(f), f.cfa, f.module_offset, f.exact_pc, f.signal_frame)
                for f in thread.frames
            ],
        )
        for thread in backtrace.threads
    ]


def _frame(frame: Frame) -> tuple[object, ...]:
    return (frame.pc, frame.sp, frame.method, frame.module, frame.function, frame.offset)


@pytest.mark.parametrize("program", ["threads-O2", "anonexec-static"])
def test_a_later_copy_of_a_plain_layout_skips_its_map_before_the_stop(
    program: str, testprogs_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a many-process run (one backtrace each, ``once``), a copy whose layout another copy
    found, running, to have nothing to read before its stop (no JIT code, no Go) makes no
    map while it runs: one module map, that of its stop, and the frames of a backtrace of
    it alone.  anonexec-static's code on an anonymous executable mapping may be a JIT's: every
    copy of it is mapped while it runs, for the registry that may be there.
    """
    from liveunwind.backtrace.backtracer import Backtracer
    from liveunwind.backtrace.session import Session
    from liveunwind.backtrace.shared import SharedFiles

    if program == "anonexec-static":
        build("testprogs", "static")
    copy = tmp_path / f"lu{uuid.uuid4().hex[:10]}"
    shutil.copy2(testprogs_build / program, copy)
    started = []
    try:
        for _ in range(COPIES):
            started.append(start_program(copy.parent, copy.name))
        maps = []
        made = Backtracer.module_map
        shared = SharedFiles(once=True)
        for running in started:
            counted: list[int] = []

            def counting(
                self: Backtracer, *args: object, counted: list[int] = counted, **keywords: object
            ) -> object:
                counted.append(1)
                return made(self, *args, **keywords)

            monkeypatch.setattr(Backtracer, "module_map", counting)
            together = Session(running.pid, shared=shared, once=True).backtrace()
            monkeypatch.setattr(Backtracer, "module_map", made)
            maps.append(len(counted))
            alone = Session(running.pid).backtrace()
            assert _walks(together) == _walks(alone)
        assert maps == ([2, 1, 1] if program == "threads-O2" else [2, 2, 2]), maps
        assert_running_untraced([running.pid for running in started])
    finally:
        for running in started:
            running.stop()


def test_a_tracer_lent_to_each_process_of_a_run_outlives_their_backtraces(
    copies: list[RunningProgram], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One tracer thread makes the ptrace calls of every process of a run, one after the
    other (``cli/many.py``): a session uses the thread lent to it and leaves it running,
    no other thread is started, and every copy is let go, with the frames of a backtrace
    of it alone."""
    from liveunwind.backtrace.session import Session
    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.targets.live import ptrace

    tracer = ptrace.Tracer()
    started: list[ptrace.Tracer] = []

    class Counted(ptrace.Tracer):
        def __init__(self) -> None:
            started.append(self)
            super().__init__()

    try:
        shared = SharedFiles(once=True)
        for program in copies:
            monkeypatch.setattr(ptrace, "Tracer", Counted)
            together = Session(program.pid, shared=shared, once=True, tracer=tracer).backtrace()
            monkeypatch.undo()
            assert tracer.running
            assert not started
            assert_running_untraced([program.pid])
            assert _walks(together) == _walks(Session(program.pid).backtrace())
    finally:
        tracer.finish()
    assert_running_untraced([program.pid for program in copies])


def test_by_a_literal_name_without_re(copies: list[RunningProgram], program_copy: Path) -> None:
    """``--name '^NAME$'`` finds every copy with no ``re`` imported (4.4 ms with ``enum``),
    by the command pip installs (bin/liveunwind)."""
    output, imported = modules_the_command_imported("pid", "--name", f"^{program_copy.name}$")
    for program in copies:
        assert f'Process {program.pid} "{program_copy.name}":' in output
    assert "liveunwind.cli.targets" in imported
    assert "re" not in imported


def test_the_collector_runs_seldom_while_the_processes_are_backtraced(
    copies: list[RunningProgram],
    program_copy: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run's young collections wait for MANY_GC_THRESHOLD objects (a process's backtrace
    set Python's 700 off about once), in the command and so in its workers; after the run
    the thresholds are as they were."""
    import gc

    from liveunwind.cli import main, many

    seen = []
    piece = many.ProcessPieces.piece

    def watched(self: many.ProcessPieces, pid: int) -> object:
        seen.append(gc.get_threshold()[0])
        return piece(self, pid)

    monkeypatch.setattr(many.ProcessPieces, "piece", watched)
    before = gc.get_threshold()
    assert main(["pid", "--name", f"^{program_copy.name}$", "--workers", "1"]) == 0
    assert seen == [many.MANY_GC_THRESHOLD] * len(copies)
    assert gc.get_threshold() == before
    assert capsys.readouterr().out.count(f'"{program_copy.name}":') == len(copies)


def test_a_backtraced_process_is_named_by_its_main_thread(
    copies: list[RunningProgram],
    program_copy: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The name above a process's backtrace is its main thread's, read in its stop (what its
    ``stat`` says): the ``stat`` is not read again for it (40 µs a process)."""
    from liveunwind.cli import main, targets

    read_again = []
    monkeypatch.setattr(targets, "process_name", lambda pid: read_again.append(pid) or "?")
    assert main(["pid", "--name", f"^{program_copy.name}$", "--workers", "1"]) == 0
    assert not read_again
    out = capsys.readouterr().out
    for program in copies:
        assert f'Process {program.pid} "{program_copy.name}":' in out
