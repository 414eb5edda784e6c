"""``liveunwind pid`` over many processes in forked workers (``cli/manyworkers.py``).

Real processes: copies of testprogs' threads-O2 and threads-O0 under names
of the test's own, vforker (whose main thread cannot stop), a pid that is
gone.  What a parallel run prints is byte for byte what ``--workers 1``
prints; a watcher reading every target's TracerPid over and over never
sees two targets traced at once; a worker killed while it holds a target
(SIGKILL: nothing of it runs) ends the run at once with one line, and
SIGINT/SIGTERM end it with 130/143 — every target left running and
untraced, no worker left.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.backtrace.workers import Turns, WorkerError
from liveunwind.cli import main
from liveunwind.errors import NoSuchProcessError
from liveunwind.targets.live import procfs
from liveunwind.targets.live.ptrace import PtraceProcess
from tests.support.cli import run_cli, start_cli
from tests.support.forking import fork_failing_after_one
from tests.support.hostile import states
from tests.support.interrupts import assert_let_go
from tests.support.processes import assert_running_untraced
from tests.support.programs import RunningProgram, RunProgram, start_command, start_program
from tests.support.schema import VALIDATOR
from tests.support.startup import modules_the_command_imported
from tests.support.waits import wait_until

#: Copies of each program: enough that both workers backtrace several.
COPIES = 8


def _copy(testprogs_build: Path, tmp_path: Path, program: str) -> Path:
    """``program`` under a name no other process has (comm is its first 15 bytes)."""
    copy = tmp_path / f"lu{uuid.uuid4().hex[:10]}"
    shutil.copy2(testprogs_build / program, copy)
    return copy


@pytest.fixture
def two_programs(testprogs_build: Path, tmp_path: Path) -> Iterator[list[RunningProgram]]:
    """COUNT copies of threads-O2 and of threads-O0, started in turns (their pids interleave)."""
    optimized = _copy(testprogs_build, tmp_path, "threads-O2")
    plain = _copy(testprogs_build, tmp_path, "threads-O0")
    started: list[RunningProgram] = []
    try:
        for _ in range(COPIES):
            for program in (optimized, plain):
                started.append(start_program(program.parent, program.name))
        yield started
    finally:
        for program in started:
            program.stop()


def _gone_pid() -> int:
    """The pid of a process that was and is no more."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _workers_of(command: int) -> list[int]:
    """The child processes of ``command`` (its workers), read from /proc."""
    try:
        children = Path(f"/proc/{command}/task/{command}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in children.split()]


def _workers(run: subprocess.Popen[str]) -> list[int]:
    """The two workers of ``run``, the first forked first (pids grow), once both run."""
    while run.poll() is None:
        workers = _workers_of(run.pid)
        if len(workers) == 2:
            return sorted(workers)
        time.sleep(0.0002)
    raise AssertionError(f"two workers were not seen: {run.communicate()}")


def _wait_holding(run: subprocess.Popen[str], pids: list[int], worker: int) -> None:
    """Returns as soon as ``worker`` is seen tracing one of ``pids`` (holding its turn)."""
    targets = sorted(set(pids))
    while run.poll() is None:
        for pid in targets:
            tracer = procfs.tracer_of(pid)
            if tracer and procfs.process_of(tracer) == worker:
                return
    raise AssertionError(f"worker {worker} was not seen holding a target: {run.communicate()}")


def test_workers_print_what_one_process_prints(
    two_programs: list[RunningProgram], testprogs_build: Path
) -> None:
    """Two programs interleaved, a process that does not stop (vforker: its turn lasts
    the 0.5 s stop timeout) and one that is gone: the JSON, the text and the folded
    stacks of two workers are those of one process, byte for byte."""
    vforker = start_command([str(testprogs_build / "vforker"), "30"])
    try:
        wait_until(lambda: procfs.process_stat(vforker.pid).state == "D", what="vfork")
        pids = [program.pid for program in two_programs]
        pids[3:3] = [vforker.pid, _gone_pid()]
        printed = {}
        for output in ("--json", "--text", "--collapsed"):
            flags = {"--json": ["--json"], "--text": [], "--collapsed": ["--collapsed"]}[output]
            serial = run_cli("pid", *map(str, pids), *flags, "--workers", "1", "--stats")
            parallel = run_cli("pid", *map(str, pids), *flags, "--workers", "2", "--stats")
            assert serial.returncode == parallel.returncode == 2, parallel.stderr
            assert "Traceback" not in parallel.stderr
            assert f"{len(pids)} processes in" in serial.stderr
            assert f"{len(pids)} processes in" in parallel.stderr
            assert "(2 workers)" in parallel.stderr and "workers)" not in serial.stderr
            assert parallel.stdout == serial.stdout
            printed[output] = parallel.stdout
        # The document joined from entries rendered in the workers is Python's own rendering.
        document = json.loads(printed["--json"])
        assert json.dumps(document, indent=2) + "\n" == printed["--json"]
        VALIDATOR.validate(document)
        entries = document["processes"]
        assert [entry["pid"] for entry in entries] == pids
        assert sum(entry["backtrace"] is None for entry in entries) == 1  # the gone one
        held = next(entry for entry in entries if entry["pid"] == vforker.pid)["backtrace"]
        main = next(thread for thread in held["threads"] if thread["tid"] == vforker.pid)
        assert main["stop_reason"] == "thread did not stop"
        assert all(
            entry["backtrace"]["complete"]
            for entry in entries
            if entry["backtrace"] and entry["pid"] != vforker.pid
        )
        assert printed["--text"].count("chain_30") == len(two_programs)  # each deep thread
        assert (
            len([line for line in printed["--collapsed"].splitlines() if "chain_30" in line]) == 2
        )
        assert_running_untraced([program.pid for program in two_programs])
    finally:
        vforker.stop()


class TraceWatch(threading.Thread):
    """Reads the TracerPid of each target's main thread, round after round, until stopped.

    ``seen`` is every read that found it traced: (read number, pid).  Each
    target is seized once in a run, so a target seen traced at reads ``a``
    and ``c`` was traced all along between them: another seen traced at a
    read ``b`` between them was traced at the same time.
    """

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.seen: list[tuple[int, int]] = []
        self.rounds = 0
        self._stop_watching = threading.Event()

    def run(self) -> None:
        read = 0
        while not self._stop_watching.is_set():
            for pid in self.pids:
                read += 1
                if procfs.tracer_of(pid):
                    self.seen.append((read, pid))
            self.rounds += 1

    def stop(self) -> None:
        self._stop_watching.set()
        self.join()

    def together(self) -> list[tuple[int, int, int]]:
        """(read, pid, other pid traced all along around that read), for every overlap."""
        spans: dict[int, tuple[int, int]] = {}
        for read, pid in self.seen:
            first, _last = spans.get(pid, (read, read))
            spans[pid] = (first, read)
        return [
            (read, pid, other)
            for read, pid in self.seen
            for other, (first, last) in spans.items()
            if other != pid and first < read < last
        ]


def test_workers_start_without_pickle_re_or_collections(
    two_programs: list[RunningProgram],
) -> None:
    """A run's pieces come back marshalled, and the workers' module imports the C modules under
    signal, collections and operator: nothing of pickle (6 ms with re and enum), contextlib
    or collections is imported before the workers start, or after."""
    pids = [str(program.pid) for program in two_programs]
    output, imported = modules_the_command_imported("pid", *pids, "--workers", "2")
    for pid in pids:
        assert f"Process {pid} " in output
    assert "liveunwind.backtrace.workers" in imported
    for heavy in ("pickle", "re", "enum", "collections", "contextlib", "signal"):
        assert heavy not in imported, heavy


def test_never_two_targets_stopped_at_once(two_programs: list[RunningProgram]) -> None:
    pids = [program.pid for program in two_programs]
    watch = TraceWatch(pids)
    watch.start()
    try:
        wait_until(lambda: watch.rounds > 0, what="the watcher's first round")
        run = run_cli("pid", *map(str, pids), "--workers", "2", "--stats")
    finally:
        watch.stop()
    assert run.returncode == 0, run.stderr
    assert "(2 workers)" in run.stderr
    # The watcher saw the stops (else it could have missed overlaps too) ...
    assert len({pid for _read, pid in watch.seen}) >= len(pids) // 4, watch.seen
    # ... and never two at once.
    assert watch.together() == []
    assert_running_untraced(pids)


def test_a_worker_killed_holding_a_target_ends_the_run_at_once(
    two_programs: list[RunningProgram],
) -> None:
    """SIGKILL to the second worker as it traces a target: it dies holding the turn, which
    the first then waits for while the command waits for the first's processes; the command
    sees the death and ends the run, long before that wait's bound (60 s).  Its target is
    let go by the kernel as its tracer dies."""
    pids = [program.pid for program in two_programs] * 4  # a run long enough to catch
    run = start_cli("pid", *map(str, pids), "--workers", "2", "--json", own_group=True)
    try:
        workers = _workers(run)
        killed = workers[1]
        _wait_holding(run, pids, killed)
        os.kill(killed, signal.SIGKILL)
        killed_at = time.monotonic()
        stdout, stderr = run.communicate(timeout=60)
        ended_after = time.monotonic() - killed_at
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 2, stderr
    assert re.fullmatch(
        rf"liveunwind: worker 2 of 2 \(pid {killed}\) ended \(killed by SIGKILL\) "
        r"before its processes were done\n",
        stderr,
    ), stderr
    assert stdout == ""
    assert ended_after < 10
    for worker in workers:
        assert not Path(f"/proc/{worker}").exists()  # killed and reaped: no zombie
    for pid in set(pids):
        assert_let_go(pid)
    assert_running_untraced(sorted(set(pids)))


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_with_workers_ends_as_ever(
    two_programs: list[RunningProgram], sent: signal.Signals
) -> None:
    """Ctrl-C (to the whole process group, workers included) or SIGTERM (to the command)
    while a worker holds a target: 130 or 143 and its one line, no worker left, every
    target running and untraced."""
    pids = [program.pid for program in two_programs] * 4
    run = start_cli("pid", *map(str, pids), "--workers", "2", own_group=True)
    try:
        workers = _workers(run)
        _wait_holding(run, pids, workers[0])
        if sent == signal.SIGINT:
            os.killpg(run.pid, sent)
        else:
            run.send_signal(sent)
        _stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    expected = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}[sent]
    assert (run.returncode, stderr) == (expected[0], f"liveunwind: {expected[1]}\n")
    for worker in workers:
        assert not Path(f"/proc/{worker}").exists()
    for pid in set(pids):
        assert_let_go(pid)
    assert_running_untraced(sorted(set(pids)))


def test_the_command_killed_takes_its_workers_and_lets_go(
    two_programs: list[RunningProgram],
) -> None:
    """SIGKILL to the command itself (nothing of it runs) while a worker holds a target: the
    workers die with it (PR_SET_PDEATHSIG) and the kernel lets their targets go."""
    pids = [program.pid for program in two_programs] * 4
    run = start_cli("pid", *map(str, pids), "--workers", "2", own_group=True)
    try:
        workers = _workers(run)
        _wait_holding(run, pids, workers[1])
        run.kill()
        run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == -signal.SIGKILL
    for worker in workers:  # orphans reaped by init, or zombies of no one for a moment
        wait_until(lambda worker=worker: not _alive(worker), what=f"worker {worker} gone")
    for pid in set(pids):
        assert_let_go(pid)
    assert_running_untraced(sorted(set(pids)))


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return procfs.process_stat(pid).state != "Z"
    except (OSError, NoSuchProcessError):
        return False


def test_a_worker_that_cannot_be_forked_leaves_the_rest_to_the_command(
    two_programs: list[RunningProgram],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fork failing (EAGAIN: too many processes) after one worker started: that one is
    killed and reaped, and the command backtraces the rest itself, printing what one
    process prints."""
    pids = [str(program.pid) for program in two_programs]
    ours = run_cli("pid", *pids, "--json", "--workers", "1")
    gc.collect()  # earlier tests' sessions end their tracer threads: no fork beside them
    wait_until(lambda: len(os.listdir("/proc/self/task")) == 1, 10, "earlier tests' threads")
    forks = fork_failing_after_one(monkeypatch)
    status = main(["pid", *pids, "--json", "--workers", "2", "--stats"])
    captured = capsys.readouterr()
    assert (status, captured.out) == (ours.returncode, ours.stdout)
    assert len(forks) == 1 and not Path(f"/proc/{forks[0]}").exists()
    assert f"{len(pids)} processes in" in captured.err and "workers)" not in captured.err
    assert_running_untraced([program.pid for program in two_programs])


class WatchedTurn:
    """A worker's :class:`Turns`, noting as it is taken and given back which threads of
    ``pid`` are traced at that instant, and when."""

    def __init__(self, turns: Turns, pid: int) -> None:
        self.turns = turns
        self.pid = pid
        self.events: list[tuple[str, float, list[int]]] = []

    def _note(self, what: str) -> None:
        traced = [tid for tid, (_state, tracer) in states(self.pid).items() if tracer]
        self.events.append((what, time.perf_counter(), traced))

    def take(self) -> None:
        self.turns.take()
        self._note("take")

    def give(self) -> None:
        self._note("give")
        self.turns.give()


def _turn_is_free(turns: Turns) -> bool:
    """Whether the turn's byte is in its pipe (taken here at once, and given back)."""
    turns.wait = 0.0
    try:
        turns.take()
    except WorkerError:
        return False
    turns.give()
    return True


def test_a_stop_holds_its_turn_from_the_first_seize_to_the_last_release(
    run_program: RunProgram,
) -> None:
    """The turn is taken with no thread of the target traced yet and given back with every
    thread let go, around the whole freeze; once, although the stop reads the threads
    twice (the second round looks for threads started meanwhile)."""
    program = run_program("threads-O2")
    turns = Turns()
    try:
        watched = WatchedTurn(turns, program.pid)
        process = PtraceProcess(program.pid, turn=watched)
        held = process.hold(lambda: len(process.threads()))
        assert held == len(procfs.list_tids(program.pid)) > 1
        assert [(what, traced) for what, _at, traced in watched.events] == [
            ("take", []),
            ("give", []),
        ]
        taken_at, given_at = watched.events[0][1], watched.events[1][1]
        assert process.stopped_at is not None and process.resumed_at is not None
        assert taken_at < process.stopped_at < process.resumed_at < given_at
        assert _turn_is_free(turns)
    finally:
        turns.close()
    assert_running_untraced([program.pid])


def test_a_stop_that_fails_gives_its_turn_back(run_program: RunProgram) -> None:
    """A stop of a process that is gone takes no turn; one whose work fails in the freeze
    gives it back as it lets the target go: the other worker is never left waiting."""
    program = run_program("threads-O2")
    turns = Turns()
    try:
        with pytest.raises(NoSuchProcessError):
            PtraceProcess(_gone_pid(), turn=turns).hold(lambda: None)
        assert _turn_is_free(turns)

        def fails() -> None:
            raise RuntimeError("the work in the freeze failed")

        with pytest.raises(RuntimeError):
            PtraceProcess(program.pid, turn=turns).hold(fails)
        assert _turn_is_free(turns)
    finally:
        turns.close()
    assert_running_untraced([program.pid])
