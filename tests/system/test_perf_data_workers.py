"""``liveunwind perf`` in worker processes: the serial run's outputs, and every way a worker fails.

A real ``perf record --call-graph dwarf`` of testprogs/profile/profiled,
started by perf (a fork, an exec, the loader's mappings: state every worker
must replay), is read with ``--workers 1`` (one process), 2 and 3: every
output — folded stacks, pprof, speedscope, JSON, the text report — is the
same bytes.  Then real worker processes are killed, stopped and made to
fail, and the run ends with one line, never a traceback, and leaves no
process behind.  (tests/system/test_perf_data.py compares the stacks with
``perf script``'s.)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from liveunwind.backtrace import workers
from liveunwind.backtrace.samples import SampleUnwinder
from liveunwind.backtrace.workers import CannotFork, WorkerError, Workers, worker_count
from liveunwind.cli import main
from liveunwind.errors import UsageError
from tests.support.forking import fork_failing_after_one
from tests.support.paths import ROOT
from tests.support.programs import RunningProgram
from tests.support.waits import wait_until

pytestmark = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", "perf", *args],
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )


def record(program: Path, output: Path) -> Path:
    """``perf record -- timeout 2 PROGRAM``: perf starts it, so every mmap is in the file."""
    counter = str(output.parent / "chunks")
    result = subprocess.run(
        ["perf", "record", "--call-graph", "dwarf", "-F", "1500", "-o", str(output),
         "--", "timeout", "-s", "INT", "2", str(program), counter],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode in (0, 124) and output.stat().st_size > 0, result.stderr
    return output


@pytest.fixture(autouse=True)
def single_threaded() -> None:
    """Each test starts with this process running no thread but its own: workers are never
    forked beside another thread, and an earlier test's live sessions may leave their tracer
    threads ending (a session freed in a cycle ends its tracer when collected)."""
    import gc

    gc.collect()
    wait_until(lambda: len(os.listdir("/proc/self/task")) == 1, 10, "earlier tests' threads")


@pytest.fixture(scope="module")
def recording(testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("perfworkers")
    return record(testprogs_build / "profiled", folder / "started.data")


@pytest.fixture(scope="module")
def program_replaced(testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of a copy of the program, the copy then replaced by another program: its
    build-id is not the recording's, its frames are unnamed and the notes say why."""
    folder = tmp_path_factory.mktemp("perfworkers")
    program = folder / "profiled"
    shutil.copy(testprogs_build / "profiled", program)
    recorded = record(program, folder / "replaced.data")
    program.unlink()
    shutil.copy(testprogs_build / "threads-O2", program)
    return recorded


@pytest.fixture(scope="module")
def library_replaced(testprogs_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``perf record -p`` of latecomer, whose thread dlopens a copy of libburnlate.so in the
    middle of the recording; the copy then replaced by another library: the note that it is
    not used comes with the first sample in it, after hundreds of others."""
    folder = tmp_path_factory.mktemp("perfworkers")
    library = folder / "libburnlate.so"
    shutil.copy(testprogs_build / "libburnlate.so", library)
    program = RunningProgram(testprogs_build / "latecomer", [str(library), str(folder / "c")])
    output = folder / "late.data"
    with program:
        program.wait_for_line(b"ready\n", time.monotonic() + 30)
        recorder = subprocess.Popen(
            ["perf", "record", "--call-graph", "dwarf", "-F", "1500", "-o", str(output),
             "-p", str(program.pid), "--", "sleep", "3"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(0.8)  # the early thread sampled alone first
        program.popen.send_signal(signal.SIGUSR1)
        program.wait_for_line(b"late\n", time.monotonic() + 30)
        _, err = recorder.communicate(timeout=120)
        assert recorder.returncode == 0 and output.stat().st_size > 0, err
    library.unlink()
    shutil.copy(testprogs_build / "libdlcopy.so", library)
    return output


def outputs(recording: Path, folder: Path, *options: str) -> dict[str, bytes]:
    """Every output of one run, by name (files written to the same paths each run)."""
    folder.mkdir(exist_ok=True)
    files = {
        "folded": folder / "folded.txt",
        "pprof": folder / "profile.pb.gz",
        "speedscope": folder / "speedscope.json",
        "svg": folder / "flame.svg",
    }
    written = ["--collapsed-out", str(files["folded"]), "--pprof", str(files["pprof"])]
    written += ["--speedscope", str(files["speedscope"]), "--svg", str(files["svg"])]
    text = cli(str(recording), *written, *options)
    assert text.returncode in (0, 1), text.stderr
    found = {name: path.read_bytes() for name, path in files.items()}
    json = cli(str(recording), "--json", *options)
    assert json.returncode == text.returncode, json.stderr
    found.update(
        text=text.stdout, stderr=text.stderr, json=json.stdout, status=bytes([json.returncode])
    )
    return found


@pytest.mark.parametrize(
    "options", [(), ("--per-thread", "--lines"), ("--merge",)], ids=["default", "lines", "merge"]
)
def test_workers_give_the_serial_runs_outputs_byte_for_byte(
    recording: Path, tmp_path: Path, options: tuple[str, ...]
) -> None:
    the_same_in_workers(recording, tmp_path, options)


def test_workers_give_the_serial_runs_notes_of_a_file_not_used(
    program_replaced: Path, tmp_path: Path
) -> None:
    serial = the_same_in_workers(program_replaced, tmp_path, ())
    assert b"differs from" in serial["json"], serial["json"][-2000:]


def test_workers_give_the_serial_runs_notes_of_a_library_met_late(
    library_replaced: Path, tmp_path: Path
) -> None:
    serial = the_same_in_workers(library_replaced, tmp_path, ())
    assert b"libburnlate.so: not using" in serial["json"], serial["json"][-2000:]
    assert b"early_spin" in serial["folded"] and b"latecomer" in serial["folded"]


def the_same_in_workers(
    recording: Path, folder: Path, options: tuple[str, ...]
) -> dict[str, bytes]:
    """Every output of 2 and 3 workers is the one of a serial run (returned)."""
    serial = outputs(recording, folder, "--workers", "1", *options)
    assert serial["folded"].count(b"\n") >= 2
    for count in ("2", "3"):
        shared = outputs(recording, folder, "--workers", count, *options)
        for name, data in serial.items():
            assert shared[name] == data, f"--workers {count}: {name} differs"
    return serial


def test_stacks_not_named_again_give_the_outputs_of_walks_all_named(
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A walk at the pcs of one before takes that one's stack unnamed (stacks_only): the
    outputs are those of every walk named and its stack made (as Profile.add always did)."""
    ours = outputs(recording, tmp_path / "ours", "--workers", "1")
    # Every walk named, its stack made from its frames: the way before stacks_only.
    monkeypatch.setattr(
        SampleUnwinder, "stacks_only", property(lambda _: False, lambda *_: None), raising=False
    )
    for count in ("1", "2"):
        folder = tmp_path / f"named{count}"
        folder.mkdir()
        files = [str(folder / name) for name in ("folded.txt", "profile.pb.gz", "speedscope.json")]
        options = ["--collapsed-out", files[0], "--pprof", files[1], "--speedscope", files[2]]
        status = main(["perf", str(recording), "--workers", count, "--json", *options])
        assert bytes([status]) == ours["status"]
        assert capsys.readouterr().out.encode() == ours["json"]
        for name, path in zip(("folded", "pprof", "speedscope"), files, strict=True):
            assert Path(path).read_bytes() == ours[name], f"--workers {count}: {name} differs"


def test_samples_saying_nothing_new_are_sent_as_their_time_and_period(recording: Path) -> None:
    """Most samples of a busy thread are its worker's last item again, sent as two numbers
    (cli/perf.py's _Again); counted as that item, they make the profile Profile.add makes of
    the walks themselves: the same folded stacks, pprof, speedscope and JSON."""
    from types import SimpleNamespace

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.profile import Profile
    from liveunwind.cli import perf
    from liveunwind.cli.profile import (
        format_folded,
        render_pprof,
        render_speedscope,
        to_json_document,
    )
    from liveunwind.targets.sample.perfdata import PerfDataFile

    arguments = SimpleNamespace(pid=None, threads=None, sysroot=None, search_path="")
    added, received = Profile(0, 1.0, per_thread=True), Profile(0, 1.0, per_thread=True)
    sizes = []
    with PerfDataFile(str(recording)) as data:
        samples = perf._sample_replay(data, arguments, BacktraceOptions())
        samples.unwinder.stacks_only = True
        sender, receiver = perf._Sender(samples), perf._Receiver(received, perf._Tally())
        for each in perf._unwound(data, samples, arguments, perf._Share()):
            if each is not None:
                added.add(each.backtrace, each.modules, some_threads=True, stacks=each.stacks)
                item = sender.item(each)
                sizes.append(len(item))
                receiver.take(item)
    print(sizes.count(2), "of", len(sizes), "items were two numbers")
    assert sizes.count(2) > len(sizes) // 2
    assert format_folded(received) == format_folded(added)
    assert render_pprof(received) == render_pprof(added)
    assert render_speedscope(received) == render_speedscope(added)
    assert to_json_document(received) == to_json_document(added)


def test_workers_that_cannot_be_started_leave_the_walks_to_the_command(
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fork failing (EAGAIN: too many processes) after one worker started: the command walks
    the rest itself, with the one process's outputs."""
    ours = outputs(recording, tmp_path, "--workers", "1")
    forks = fork_failing_after_one(monkeypatch)
    status = main(["perf", str(recording), "--workers", "2", "--json"])
    assert bytes([status]) == ours["status"]
    assert capsys.readouterr().out.encode() == ours["json"]
    assert len(forks) == 1 and gone(forks[0])
    with pytest.raises(CannotFork, match="cannot start a worker: Resource temporarily"):
        Workers(2, slow(10))
    assert no_children_left()


def test_a_bad_worker_count_is_a_usage_error(recording: Path) -> None:
    result = cli(str(recording), "--workers", "0")
    assert result.returncode == UsageError.exit_code
    assert b"--workers" in result.stderr and b"Traceback" not in result.stderr


def test_no_workers_when_every_cpu_is_busy() -> None:
    """A spinning process per CPU: the default is one process, and asked workers are kept."""
    cpus = len(os.sched_getaffinity(0))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:

        def spinning() -> bool:
            states = [Path(f"/proc/{each.pid}/stat").read_text().rpartition(")")[2].split()[0]
                      for each in spinners]  # fmt: skip
            return all(state == "R" for state in states)

        wait_until(spinning, 30, "the spinners to run")
        assert worker_count(None) == 1
        assert worker_count(3) == 3
    finally:
        for each in spinners:
            each.kill()
            each.wait()


def children(pid: int) -> list[int]:
    """The processes ``pid`` started that are still there (its threads' children lists)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended
            found += [int(each) for each in (task / "children").read_text().split()]
    return found


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def running(command: list[str]) -> list[int]:
    """The processes running ``command``: the command's and its workers' (forks of it)."""
    wanted = "\0".join(command).encode()
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().rstrip(b"\0") == wanted:
                found.append(int(entry.name))
    return found


def test_a_worker_killed_in_a_run_is_one_line_and_leaves_nothing(recording: Path) -> None:
    """SIGKILL to a worker of the real command: exit 2, one line naming it, no process left."""
    command = [sys.executable, "-m", "liveunwind", "perf", str(recording), "--workers", "2"]
    for _attempt in range(5):
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        found: list[int] = []

        def started_or_ended(run: subprocess.Popen[bytes] = run, found: list[int] = found) -> bool:
            found.extend(children(run.pid) if run.poll() is None else ())
            return bool(found) or run.poll() is not None

        wait_until(started_or_ended, 60, "the workers to start", interval=0.001)
        if found:
            os.kill(found[-1], signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=120)
        if run.returncode in (0, 1):
            continue  # the worker had finished before it was killed: try again
        lines = stderr.decode().splitlines()
        assert run.returncode == WorkerError.exit_code, stderr
        killed = rf"liveunwind: worker [12] of 2 \(pid {found[-1]}\) ended \(killed by SIGKILL\)"
        assert len(lines) == 1 and re.match(killed, lines[0]), lines
        # A worker is a fork of the command: its command line is the command's.
        assert not running(command), "a worker was left behind"
        assert not stdout
        return
    pytest.fail("the workers finished before one could be killed, five times")


def started_run(recording: Path) -> tuple[subprocess.Popen[bytes], list[str], list[int]]:
    """The command with two workers, in a session of its own, once it has forked one."""
    command = [sys.executable, "-m", "liveunwind", "perf", str(recording), "--workers", "2"]
    run = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True
    )
    found: list[int] = []

    def started() -> bool:
        found.extend(children(run.pid) if run.poll() is None else ())
        return bool(found) or run.poll() is not None

    wait_until(started, 60, "the workers to start", interval=0.001)
    return run, command, found


def test_ctrl_c_is_the_commands_interruption_and_ends_every_worker(recording: Path) -> None:
    """SIGINT to the whole process group (a terminal's Ctrl-C): the command's own line and
    exit code, not a worker's death."""
    for _attempt in range(5):
        run, command, found = started_run(recording)
        if not found:
            continue
        os.killpg(run.pid, signal.SIGINT)
        _stdout, stderr = run.communicate(timeout=120)
        if run.returncode in (0, 1):
            continue  # it was done before the signal came
        assert run.returncode == 130, stderr
        assert stderr.decode().splitlines() == ["liveunwind: interrupted"]
        assert not running(command), "a worker was left behind"
        return
    pytest.fail("the command finished before it could be interrupted, five times")


def test_workers_end_when_the_command_is_killed(recording: Path) -> None:
    """SIGKILL to the command (no chance to clean up): the kernel ends its workers."""
    for _attempt in range(5):
        run, command, found = started_run(recording)
        if not found:
            continue
        run.kill()
        run.communicate(timeout=120)
        if run.returncode != -signal.SIGKILL:
            continue  # it was done before the signal came
        wait_until(lambda: not running(command), 10, "the workers to end")  # noqa: B023
        return
    pytest.fail("the command finished before it could be killed, five times")


def slow(items: int) -> workers.Work:
    """Work that sends ``items`` numbers, one every 10 ms, then its index."""

    def work(index: int, count: int) -> Generator[object, None, object]:
        for number in range(index, items, count):
            time.sleep(0.01)
            yield number
        return index

    return work


def no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_items_come_back_in_the_order_of_one_process() -> None:
    with Workers(3, slow(20)) as pool:
        assert [item for _worker, item in pool.results()] == list(range(20))
        assert pool.summaries == {0: 0, 1: 1, 2: 2}
    assert no_children_left()


def test_no_worker_is_forked_from_a_process_running_other_threads() -> None:
    """A lock another thread holds would stay held in the worker (--lines' DWARF threads)."""
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        with pytest.raises(CannotFork, match="runs other threads"):
            Workers(2, slow(10))
    finally:
        release.set()
        other.join()
    assert no_children_left()


def test_a_killed_worker_ends_the_results_with_one_error_and_is_reaped() -> None:
    with Workers(2, slow(1000)) as pool:
        os.kill(pool.pids[1], signal.SIGKILL)
        with pytest.raises(
            WorkerError, match=r"worker 2 of 2 \(pid \d+\) ended \(killed by SIGKILL\)"
        ):
            list(pool.results())
    assert no_children_left()


def test_a_hung_worker_is_stopped_after_the_silence_it_is_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "SILENCE", 0.5)
    with Workers(2, slow(1000)) as pool:
        os.kill(pool.pids[0], signal.SIGSTOP)  # a stopped worker sends nothing, like a hung one
        started = time.monotonic()
        with pytest.raises(WorkerError, match=r"sent nothing for 0\.5 s: taken as hung"):
            list(pool.results())
        assert time.monotonic() - started < 10
        stopped = pool.pids[0]
    assert gone(stopped) or no_children_left()
    assert no_children_left()


def test_a_workers_own_error_keeps_its_message_and_exit_code() -> None:
    def failing(index: int, count: int) -> Generator[object, None, object]:
        yield index
        if index == 1:
            raise UsageError("the worker's own words")
        yield index + count
        return None

    with Workers(2, failing) as pool, pytest.raises(WorkerError) as raised:
        list(pool.results())
    assert str(raised.value) == "the worker's own words"
    assert raised.value.exit_code == UsageError.exit_code
    assert no_children_left()


def test_a_worker_with_more_items_than_the_others_is_an_error() -> None:
    def uneven(index: int, count: int) -> Generator[object, None, object]:
        yield from range(3 if index == 0 else 1)
        return None

    with Workers(2, uneven) as pool, pytest.raises(WorkerError, match="more samples"):
        list(pool.results())
    assert no_children_left()
