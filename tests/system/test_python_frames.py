"""Python frames against the interpreter's own account of them.

tests/data/python_parked.py parks eight threads in known Python chains (one
under ``sorted`` calling a key function, one under ``map``, a generator,
methods, deep recursion, compiled code, a non-ASCII name) and writes what
``sys._current_frames()`` says of every thread.  liveunwind stops the
process, reads the interpreter's state from the snapshot (as ``--python``
will), and must find the same frames — function, file and line, innermost
first — on every thread, each on the native frame that runs it, with the
native frames of the builtin between the callback and its caller.  The same
for cores: gdb's gcore of the parked program, and the kernel's core when it
aborts.

Interpreters: Debian's python3 (stripped; with its debug file from
python3.X-dbg and without), CPython built with symbols (pyenv's, where
installed), and the newest CPython Debian has, in the sid root file system
(tools/sid-rootfs.sh), run in a chroot and read from outside.  Each is
skipped, saying why, where it is not installed.

Also here: the line-table decoder against ``co_lines()`` of each
interpreter, the built-in layouts against offsetof() compiled from each
interpreter's own headers, and the refusals (old versions).  Records that
do not match, hostile memory (cycles, wrong types) and the report of Python
frames, all on bytes made here, are tests/unit/test_python_frames.py.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from liveunwind.backtrace.api import attach
from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import BacktraceOptions
from liveunwind.backtrace.remote import gdb_remote
from liveunwind.backtrace.session import Session
from liveunwind.cpython import layouts, objects
from liveunwind.cpython.collected import Collected
from liveunwind.cpython.interpreter import Interpreter, find_interpreter
from liveunwind.cpython.memory import Memory
from liveunwind.cpython.placement import PlacedPython, place, place_all
from liveunwind.cpython.stacks import PythonRun, PythonThread, describe
from liveunwind.cpython.stop import capture, finish, prepare
from liveunwind.cpython.walk import collect
from liveunwind.errors import LiveUnwindError, MemoryReadError
from liveunwind.frames import Backtrace
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.targets.cores.elfcore import ElfCore
from liveunwind.targets.live.ptrace import PtraceProcess
from liveunwind.targets.live.snapshot import Snapshot
from tests.support.oracles import gdb_gcore
from tests.support.paths import ROOT
from tests.support.pythons import (
    INSIDE,
    PROGRAM,
    PYTHONS,
    SID_ROOT,
    START_TIMEOUT,
    THREADS,
    Parked,
    Python,
    Truth,
    available,
)
from tests.support.waits import wait_until


@pytest.fixture(scope="module", params=PYTHONS, ids=repr)
def parked(request: pytest.FixtureRequest) -> Iterator[Parked]:
    """python_parked.py under one interpreter, parked for the module's tests."""
    python: Python = request.param
    available(python)
    folder = INSIDE / f"{python.name}-{os.getpid()}"
    program = Parked(python, folder)
    yield program
    program.stop()
    shutil.rmtree(python.host_path(folder), ignore_errors=True)


# -- reading a live process as --python will ------------------------------------------


class LiveResult:
    """One stop of a parked program: the native backtrace and the Python stacks, same instant."""

    def __init__(
        self,
        interpreter: Interpreter,
        snapshot: Snapshot,
        collected: Collected,
        backtrace: Backtrace,
        problems: list[str],
        deferred: int = 0,
    ) -> None:
        #: How many threads the stop left to be walked after it.
        self.deferred = deferred
        self.interpreter = interpreter
        self.snapshot = snapshot
        self.collected = collected
        self.threads = describe(collected)
        self.backtrace = backtrace
        self.problems = problems


def frozen_batches(snapshot: Snapshot):  # type: ignore[no-untyped-def]
    """A ``read_many`` over the snapshot's frozen memory (each range read on its own)."""

    def read_many(ranges: list[tuple[int, int]]) -> list[bytes | None]:
        results: list[bytes | None] = []
        for address, size in ranges:
            try:
                results.append(snapshot.read_frozen(address, size))
            except MemoryReadError:
                results.append(None)
        return results

    return read_many


def read_live(
    parked: Parked,
    *,
    batches: bool = True,
    ahead: bool = True,
    stop_reads: list[list[tuple[int, int]]] | None = None,
) -> LiveResult:
    """Stops the process, copies its stacks and Python state, lets it go, then unwinds.

    As a session does: with ``ahead``, the running process is walked before
    the stop (:func:`prepare`); what the stop left is walked after it
    (:func:`finish`).  ``stop_reads`` collects the batches the stop reads.
    """
    debug_dirs = ("/usr/lib/debug",) if parked.python.debug else ()
    problems: list[str] = []
    process = PtraceProcess(parked.pid)
    before = ModuleMap(process, debug_dirs=debug_dirs)
    interpreter = find_interpreter(process, before.modules, problems)
    assert interpreter is not None, problems
    if ahead:
        prepare(process.read, interpreter, process.read_frozen_many)
    with process:
        snapshot = Snapshot.capture(process)
        read_many = frozen_batches(snapshot) if batches else None
        if read_many is not None and stop_reads is not None:
            counted = read_many

            def read_many(ranges: list[tuple[int, int]]) -> list[bytes | None]:
                stop_reads.append(list(ranges))
                return counted(ranges)

        captured = capture(snapshot, interpreter, read_many)
    assert not process.stopped
    collected = finish(captured, snapshot)
    modules = ModuleMap(snapshot, debug_dirs=debug_dirs, previous=before)
    backtrace = Backtracer(BacktraceOptions()).backtrace(snapshot, {}, modules=modules)
    return LiveResult(interpreter, snapshot, collected, backtrace, problems, len(captured.deferred))


@pytest.fixture(scope="module")
def live(parked: Parked) -> LiveResult:
    return read_live(parked)


def frames_of(thread: PythonThread) -> list[tuple[str, str, int | None]]:
    return [(frame.function, frame.file, frame.line) for frame in thread.frames]


def assert_equal_to_truth(threads: list[PythonThread], truth: Truth) -> None:
    ours = {thread.native_id: frames_of(thread) for thread in threads}
    assert set(truth) <= set(ours), f"threads missing: {set(truth) - set(ours)}"
    for tid, frames in truth.items():
        assert ours[tid] == frames, f"thread {tid}"


# -- live processes -----------------------------------------------------------------


def test_every_thread_has_the_frames_the_interpreter_reports(
    parked: Parked, live: LiveResult
) -> None:
    assert len(parked.truth) == THREADS
    assert_equal_to_truth(live.threads, parked.truth)
    assert live.collected.problems == []
    assert live.problems == []


def test_the_layout_matches_the_version_found(parked: Parked, live: LiveResult) -> None:
    version = subprocess.run(
        parked.python.argv("-c", "import sys; print(hex(sys.hexversion))"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert live.interpreter.version == int(version, 16)
    minor = layouts.minor_version(live.interpreter.version)
    assert live.interpreter.layout.minor == minor
    expected = "built in" if minor in layouts.BUILT_IN_LAYOUTS else "_Py_DebugOffsets"
    assert live.interpreter.layout.source == expected


def test_each_python_frame_sits_on_the_eval_call_that_runs_it(
    parked: Parked, live: LiveResult
) -> None:
    placed = place_all(live.backtrace, live.threads)
    assert set(placed) == set(parked.truth)
    for native in live.backtrace.threads:
        found = placed[native.tid]
        assert found.unplaced == [], f"thread {native.tid}"
        assert [(f.function, f.file, f.line) for f in found.python_frames] == parked.truth[
            native.tid
        ]
        for index, frames in enumerate(found.by_frame):
            if frames:  # the eval loop runs them: a frame of the interpreter's own module
                assert native.frames[index].module == live.interpreter.module


@pytest.mark.parametrize(
    ("callback", "caller", "builtin"),
    [
        ("key_that_parks", "sort_with_a_callback", "sorted"),
        ("mapped", "map_with_a_callback", "map_next"),
        ("<module>", "run_compiled_code", "exec"),
    ],
)
def test_the_builtin_sits_between_the_callback_and_its_caller(
    parked: Parked, live: LiveResult, callback: str, caller: str, builtin: str
) -> None:
    tid = parked.thread_running(caller)
    native = next(thread for thread in live.backtrace.threads if thread.tid == tid)
    python = next(thread for thread in live.threads if thread.native_id == tid)
    found = place(native, python)
    inner = _frame_running(found, callback)
    outer = _frame_running(found, caller)
    assert outer > inner + 1, "no native frame between the callback and its caller"
    between = [native.frames[index].function or "" for index in range(inner + 1, outer)]
    if _names_static_functions(parked.python):
        assert any(builtin in name for name in between), between


def _frame_running(found: PlacedPython, function: str) -> int:
    return next(
        index
        for index, frames in enumerate(found.by_frame)
        if any(frame.function == function for frame in frames)
    )


def _names_static_functions(python: Python) -> bool:
    """Whether native frames of static functions (builtin_sorted) get their names here."""
    if python.name.startswith("built-"):
        return True
    if python.root is not None or not python.debug:
        return False  # stripped, and the chroot's debug files are not looked for
    build_id = (
        subprocess.run(
            ["readelf", "-n", os.path.realpath(python.executable)], capture_output=True, text=True
        )
        .stdout.split("Build ID: ")[-1]
        .split()[0]
    )
    return Path(f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug").exists()


def test_the_snapshot_keeps_everything_the_python_walk_read(live: LiveResult) -> None:
    """After the process runs again the same walk reads only the copy.

    Thread states, frames and code objects' headers are all in it; the names
    and line tables were read ahead, into the interpreter's code cache.
    """
    again = collect(Memory(live.snapshot.read_frozen), live.interpreter)
    assert again.problems == []
    assert [frames_of(t) for t in describe(again)] == [frames_of(t) for t in live.threads]


def test_the_stop_reads_the_plan_with_one_request_and_walks_after_it(parked: Parked) -> None:
    """Read ahead, the stop fetches one batch and leaves the parked threads for after it."""
    stop_reads: list[list[tuple[int, int]]] = []
    result = read_live(parked, stop_reads=stop_reads)
    assert_equal_to_truth(result.threads, parked.truth)
    assert result.collected.problems == []
    assert len(stop_reads) == 1, stop_reads
    assert result.deferred == len(result.collected.threads) == THREADS  # all of them parked
    plan = result.interpreter.plan
    assert stop_reads[0] == plan and plan == sorted(plan)


def test_without_the_read_ahead_the_stop_walks_every_thread(parked: Parked) -> None:
    """Nothing seen before the stop: every thread is walked in it, and nothing is late."""
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough")
    result = read_live(parked, ahead=False)
    assert_equal_to_truth(result.threads, parked.truth)
    assert result.collected.problems == []


def test_what_the_stop_did_not_copy_is_read_after_it_and_said(parked: Parked) -> None:
    """A plan that leaves out the code objects: they are read late, and the walk says so."""
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough")
    problems: list[str] = []
    process = PtraceProcess(parked.pid)
    interpreter = find_interpreter(process, ModuleMap(process).modules, problems)
    assert interpreter is not None, problems
    ahead = collect(Memory(process.read, process.read_frozen_many), interpreter)  # prepare()
    codes = [address for address, code in ahead.codes.items() if code is not None]
    assert codes
    interpreter.plan = [
        (start, size)
        for start, size in interpreter.plan
        if not any(start <= code < start + size for code in codes)
    ]
    with process:
        snapshot = Snapshot.capture(process)
        captured = capture(snapshot, interpreter, snapshot.read_frozen_many)
    assert captured.deferred, "the parked threads did not move: they are left for after the stop"
    collected = finish(captured, snapshot)
    assert_equal_to_truth(describe(collected), parked.truth)
    late = [problem for problem in collected.problems if "after it ran again" in problem]
    assert late and all("reads of code objects" in problem for problem in late), collected.problems


def test_without_batched_reads_the_frames_are_the_same(parked: Parked) -> None:
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough for the unbatched path")
    assert_equal_to_truth(read_live(parked, batches=False).threads, parked.truth)


def test_a_second_backtrace_reads_no_code_object_twice(parked: Parked, live: LiveResult) -> None:
    """The interpreter's code cache: names and line tables are read once per process."""
    reads: list[tuple[int, int]] = []
    process = PtraceProcess(parked.pid)
    with process:
        snapshot = Snapshot.capture(process)

        def counting(address: int, size: int) -> bytes:
            reads.append((address, size))
            return snapshot.read_frozen(address, size)

        collected = collect(Memory(counting), live.interpreter)
    assert_equal_to_truth(describe(collected), parked.truth)
    string_reads = [
        size for _, size in reads if size == objects.header_size(live.interpreter.layout)
    ]
    assert string_reads == []


def test_read_ahead_the_stop_reads_only_frames(parked: Parked, live: LiveResult) -> None:
    """prepare() reads names and line tables from the running process; the stop checks them."""
    fresh = Interpreter(
        live.interpreter.module,
        live.interpreter.runtime,
        live.interpreter.version,
        live.interpreter.layout,
        live.interpreter.types,
    )
    process = PtraceProcess(parked.pid)
    prepare(process.read, fresh)
    reads: list[int] = []
    with process:
        snapshot = Snapshot.capture(process)

        def counting(address: int, size: int) -> bytes:
            reads.append(size)
            return snapshot.read_frozen(address, size)

        collected = collect(Memory(counting), fresh)
    assert_equal_to_truth(describe(collected), parked.truth)
    assert objects.header_size(fresh.layout) not in reads


# -- the command: liveunwind pid PID --python -------------------------------------------

SCHEMA = json.loads((ROOT / "liveunwind" / "cli" / "schemas" / "backtrace.schema.json").read_text())


def command(*args: str) -> subprocess.CompletedProcess[str]:
    """``liveunwind ARGS`` as a user runs it (this checkout), its exit checked."""
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result


def document_python(document: dict) -> Truth:  # type: ignore[type-arg]
    """Each thread's Python frames in a --json document, innermost first, placed or not."""
    found: Truth = {}
    for thread in document["threads"]:
        placed = [place for frame in thread["frames"] for place in frame["python"]]
        found[thread["tid"]] = [
            (place["function"], place["file"], place["line"])
            for place in [*placed, *thread["python_unplaced"]]
        ]
    return found


@pytest.fixture(scope="module")
def pid_json(parked: Parked) -> dict:  # type: ignore[type-arg]
    """``liveunwind pid PID --python --json`` of the parked program, checked against the schema."""
    # A parked interpreter's main-thread stack can pass the default 16 MiB copy (sid's
    # python3.14 in its chroot does); a larger cap keeps "no problems" a real check.
    document = json.loads(
        command("pid", str(parked.pid), "--python", "--json", "--stack-cap", str(64 << 20)).stdout
    )
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return document  # type: ignore[no-any-return]


def test_the_command_shows_every_thread_its_python_frames(parked: Parked, pid_json: dict) -> None:  # type: ignore[type-arg]
    found = document_python(pid_json)
    for tid, frames in parked.truth.items():
        assert found[tid] == frames, f"thread {tid}"
    assert all(not thread["python_unplaced"] for thread in pid_json["threads"])
    assert pid_json["problems"] == []
    modules = {
        frame["module"]
        for thread in pid_json["threads"]
        for frame in thread["frames"]
        if frame["python"]
    }
    assert len(modules) == 1  # every run sits on a frame of the interpreter's eval loop


@pytest.mark.parametrize(
    ("callback", "caller", "builtin"),
    [
        ("key_that_parks", "sort_with_a_callback", "sorted"),
        ("mapped", "map_with_a_callback", "map_next"),
        ("<module>", "run_compiled_code", "exec"),
    ],
)
def test_the_command_puts_the_builtin_between_callback_and_caller(
    parked: Parked,
    pid_json: dict,  # type: ignore[type-arg]
    callback: str,
    caller: str,
    builtin: str,
) -> None:
    tid = parked.thread_running(caller)
    (thread,) = [thread for thread in pid_json["threads"] if thread["tid"] == tid]
    frames = thread["frames"]

    def running(function: str) -> int:
        return next(
            index
            for index, frame in enumerate(frames)
            if any(place["function"] == function for place in frame["python"])
        )

    inner, outer = running(callback), running(caller)
    assert outer > inner + 1, "no native frame between the callback and its caller"
    if _names_static_functions(parked.python):
        between = [frame["function"] or "" for frame in frames[inner + 1 : outer]]
        assert any(builtin in name for name in between), between


def parse_text(text: str) -> Truth:
    """Each thread's ``[py]`` lines in the text report, innermost first.

    Checks the shape on the way: every ``[py]`` line follows a native frame's
    line or another ``[py]`` line, in the columns of the frame's name.
    """
    found: Truth = {}
    tid = 0
    previous = ""
    for line in text.splitlines():
        if line.startswith("Thread "):
            tid = int(line.split()[1])
            found[tid] = []
        elif line.startswith("  #"):
            column = line.index("0x") + 20  # where the frame's name starts
        elif "[py] " in line:
            assert previous.startswith("  #") or "[py] " in previous, (previous, line)
            assert line.index("[py] ") == column, line
            function, _, where = line.split("[py] ", 1)[1].rpartition(" (")
            file, _, number = where[:-1].rpartition(":")
            found[tid].append((function, file, int(number)))
        previous = line
    return found


def test_the_command_prints_python_frames_under_their_native_frame(parked: Parked) -> None:
    found = parse_text(command("pid", str(parked.pid), "--python").stdout)
    for tid, frames in parked.truth.items():
        assert found[tid] == frames, f"thread {tid}"


def test_folded_stacks_have_a_level_per_python_frame(parked: Parked) -> None:
    """``--collapsed`` names Python frames as ``profile`` does, outermost first."""
    folded = command("pid", str(parked.pid), "--python", "--collapsed").stdout
    stacks = [line.rpartition(" ")[0].split(";") for line in folded.splitlines()]
    # Without --lines only Python frames carry a place: "function (file:line)".
    python_levels = [
        [level for level in stack if re.search(r" \(.+:\d+\)$", level)] for stack in stacks
    ]
    for tid, frames in parked.truth.items():
        expected = [
            f"{function.replace(' ', '_')} ({os.path.basename(file)}:{line})"
            for function, file, line in reversed(frames)
        ]
        assert expected in python_levels, f"thread {tid}"


def test_without_python_no_frame_has_python_frames(parked: Parked) -> None:
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough")
    document = json.loads(command("pid", str(parked.pid), "--json").stdout)
    assert all(not found for found in document_python(document).values())
    assert "[py]" not in command("pid", str(parked.pid)).stdout


def test_a_session_keeps_the_interpreter_and_reads_again_in_each_stop(parked: Parked) -> None:
    """The second backtrace finds the interpreter it kept; the frames are read anew."""
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough")
    session = Session(parked.pid, options=BacktraceOptions(python=True))
    first = session.backtrace()
    reader = session._backtracer.python
    assert reader is not None
    interpreter = reader.interpreter(session._backtracer.modules)  # type: ignore[arg-type]
    second = session.backtrace()
    assert reader.interpreter(session._backtracer.modules) is interpreter  # type: ignore[arg-type]
    for backtrace in (first, second):
        assert {"python_copy", "python"} <= set(backtrace.timings)
        assert_equal_to_truth(_as_threads(backtrace), parked.truth)


def test_a_session_stop_reads_python_with_one_system_call(
    parked: Parked, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a session's stop the Python state of the parked program is one planned read."""
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough")
    from liveunwind.cpython.reader import PythonReader
    from liveunwind.targets.live import syscalls

    calls: list[str] = []
    monkeypatch.setattr(
        syscalls, "read_remote", _counted(calls, "read_remote", syscalls.read_remote)
    )
    monkeypatch.setattr(
        syscalls.PlannedRead, "run", _counted(calls, "planned", syscalls.PlannedRead.run)
    )
    in_stop: list[list[str]] = []
    real_capture = PythonReader.capture

    def capture(reader: PythonReader, snapshot: Snapshot) -> None:
        calls.clear()
        real_capture(reader, snapshot)
        in_stop.append(list(calls))

    monkeypatch.setattr(PythonReader, "capture", capture)
    backtrace = Session(parked.pid, options=BacktraceOptions(python=True)).backtrace()
    assert in_stop == [["planned"]]
    assert backtrace.problems == []
    assert_equal_to_truth(_as_threads(backtrace), parked.truth)


def _counted(calls: list[str], name: str, function):  # type: ignore[no-untyped-def]
    def counting(*arguments):  # type: ignore[no-untyped-def]
        calls.append(name)
        return function(*arguments)

    return counting


def _as_threads(backtrace: Backtrace) -> list[PythonThread]:
    """The Python frames a backtrace carries, as PythonThreads (one run per thread)."""
    threads = []
    for native in backtrace.threads:
        frames = [place for frame in native.frames for place in frame.python]
        run = PythonRun(None, [*frames, *native.python_unplaced])
        threads.append(PythonThread(native.tid, 0, [run]))
    return threads


def test_without_the_snapshot_the_frames_are_the_same(parked: Parked) -> None:
    """--no-snapshot: the process stays stopped and is read after the native walk."""
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough")
    backtrace = attach(parked.pid, snapshot=False, python=True)
    assert_equal_to_truth(_as_threads(backtrace), parked.truth)
    assert backtrace.problems == []


def test_through_gdbserver_the_frames_are_the_same(parked: Parked) -> None:
    """gdb-remote --python: the interpreter read through the stub while it holds the process."""
    if parked.python.name != "debian":
        pytest.skip("one interpreter is enough")
    if shutil.which("gdbserver") is None:
        pytest.skip("gdbserver is not installed")
    from tests.support.stubs import GdbServer

    with GdbServer(parked.pid) as server:
        backtrace = gdb_remote(f"127.0.0.1:{server.port}", python=True)
        server.process.wait(timeout=10)
    assert_equal_to_truth(_as_threads(backtrace), parked.truth)


def test_a_process_in_a_pid_namespace_is_matched_by_its_own_thread_ids(tmp_path: Path) -> None:
    """In a container CPython knows its threads by their ids there; the walk by the host's."""
    if shutil.which("unshare") is None or not Path("/usr/bin/python3").exists():
        pytest.skip("needs unshare and /usr/bin/python3")
    truth_path = tmp_path / "truth.json"
    program = ["/usr/bin/python3", str(PROGRAM), str(truth_path)]
    launcher = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", *program],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert launcher.stdout is not None
        if launcher.stdout.readline() != b"ready\n":
            pytest.skip(f"unshare --pid failed here: {launcher.communicate()[1]!r}")
        children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text()
        (pid,) = [int(child) for child in children.split()]
        wait_until(
            lambda: len(os.listdir(f"/proc/{pid}/task")) == THREADS,
            START_TIMEOUT,
            "the reporter thread of python_parked.py to end",
        )
        document = json.loads(command("pid", str(pid), "--python", "--json").stdout)
        inside = {tid: _id_inside(pid, tid) for tid in (t["tid"] for t in document["threads"])}
    finally:
        launcher.kill()
        launcher.communicate()
    truth = {int(tid): frames for tid, frames in json.loads(truth_path.read_text()).items()}
    assert not set(truth) & set(inside), "the ids inside and outside should differ"
    found = document_python(document)
    for tid, frames in found.items():
        assert frames == [tuple(frame) for frame in truth[inside[tid]]], f"thread {tid}"


def _id_inside(pid: int, tid: int) -> int:
    """The id thread ``tid`` has in its own pid namespace (the last of its NSpid line)."""
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return int(status.split("NSpid:")[1].splitlines()[0].split()[-1])


def test_a_process_without_python_says_so_in_the_report(run_program) -> None:  # type: ignore[no-untyped-def]
    program = run_program("threads-O2")
    document = json.loads(command("pid", str(program.pid), "--python", "--json").stdout)
    assert "python: no CPython interpreter found" in document["problems"]
    assert all(not found for found in document_python(document).values())


# -- cores ----------------------------------------------------------------------------


def _core_python(core: Path, python: Python) -> tuple[list[PythonThread], Backtrace, list[str]]:
    problems: list[str] = []
    sysroot = None if python.root is None else str(python.root)
    with ElfCore.open(str(core), sysroot=sysroot) as space:
        debug_dirs = ("/usr/lib/debug",) if python.debug else ()
        modules = ModuleMap(space, debug_dirs=debug_dirs)
        threads = _python_stacks(space, modules, problems)
        backtrace = Backtracer(BacktraceOptions()).backtrace(space, {}, modules=modules)
    return threads, backtrace, problems


def _python_stacks(space: ElfCore, modules: ModuleMap, problems: list[str]) -> list[PythonThread]:
    """The Python stacks of a core: the interpreter found, walked and described."""
    try:
        interpreter = find_interpreter(space, modules.modules, problems)
    except LiveUnwindError as error:
        problems.append(f"python: {error}")
        return []
    if interpreter is None:
        return []
    collected = collect(Memory(space.read_frozen, space.read_frozen_many), interpreter)
    problems.extend(collected.problems)
    return describe(collected)


def _assert_placed(backtrace: Backtrace, threads: list[PythonThread], truth: Truth) -> None:
    placed = place_all(backtrace, threads)
    for tid, frames in truth.items():
        assert placed[tid].unplaced == [], f"thread {tid}"
        assert [(f.function, f.file, f.line) for f in placed[tid].python_frames] == frames


def test_gcore_of_the_parked_program(parked: Parked, tmp_path: Path) -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed")
    if parked.python.root is not None:
        # Seen with the host's gdb 13 and sid's glibc: the threads other than the
        # main one are written with zeroed stacks (their native backtraces end at
        # frame 0 too); the kernel's core of the same program is tested below.
        pytest.skip("gdb's gcore of a process in the sid chroot loses its threads' stacks")
    core = tmp_path / "core"
    gdb_gcore(parked.pid, core)
    threads, backtrace, problems = _core_python(core, parked.python)
    assert problems == []
    assert_equal_to_truth(threads, parked.truth)
    _assert_placed(backtrace, threads, parked.truth)


@pytest.mark.parametrize("python", PYTHONS, ids=repr)
def test_kernel_core_of_the_program_aborting(python: Python) -> None:
    available(python)
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores to the working folder ({pattern})")
    folder = INSIDE / f"abort-{python.name}-{os.getpid()}"
    program = Parked(python, folder, abort=True)
    try:
        assert program.process.returncode < 0
        cores = [p for p in python.host_path(folder).glob("core*") if p.is_file()]
        assert len(cores) == 1, cores
        threads, backtrace, problems = _core_python(cores[0], python)
        assert problems == []
        # The reporter thread that aborted is in the core too; the truth leaves it out.
        assert len(threads) == THREADS + 1
        assert_equal_to_truth(threads, program.truth)
        _assert_placed(backtrace, threads, program.truth)
    finally:
        program.stop()
        shutil.rmtree(python.host_path(folder), ignore_errors=True)


@pytest.mark.parametrize("python", PYTHONS, ids=repr)
def test_the_command_on_a_kernel_core(python: Python) -> None:
    """``liveunwind core CORE --python``: the frames the aborting program wrote down."""
    available(python)
    if not python.debug:
        pytest.skip("the same interpreter as 'debian'")
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores to the working folder ({pattern})")
    folder = INSIDE / f"command-{python.name}-{os.getpid()}"
    program = Parked(python, folder, abort=True)
    try:
        (core,) = [p for p in python.host_path(folder).glob("core*") if p.is_file()]
        sysroot = [] if python.root is None else ["--sysroot", str(python.root)]
        document = json.loads(command("core", str(core), *sysroot, "--python", "--json").stdout)
        jsonschema.Draft202012Validator(SCHEMA).validate(document)
        found = document_python(document)
        for tid, frames in program.truth.items():
            assert found[tid] == frames, f"thread {tid}"
        text = parse_text(command("core", str(core), *sysroot, "--python").stdout)
        assert {tid: text[tid] for tid in program.truth} == program.truth
    finally:
        program.stop()
        shutil.rmtree(python.host_path(folder), ignore_errors=True)


# -- line tables: the decoder against co_lines() ---------------------------------------

LINES_DUMP = r"""
import importlib, json, sys, types
def walk(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from walk(const)
out = []
for name in ("threading", "json.decoder", "argparse", "dataclasses"):
    module = importlib.import_module(name)
    with open(module.__file__) as stream:
        code = compile(stream.read(), module.__file__, "exec")
    for each in walk(code):
        out.append([each.co_linetable.hex(), each.co_firstlineno, len(each.co_code),
                    [list(entry) for entry in each.co_lines()]])
json.dump(out, sys.stdout)
"""


@pytest.mark.parametrize("python", PYTHONS, ids=repr)
def test_line_tables_decode_as_co_lines_says(python: Python) -> None:
    available(python)
    if not python.debug:
        pytest.skip("the same interpreter as 'debian'")
    dumped = subprocess.run(
        python.argv("-c", LINES_DUMP), capture_output=True, text=True, check=True
    ).stdout
    codes = json.loads(dumped)
    assert len(codes) > 300
    checked = 0
    for table, firstlineno, code_size, ranges in codes:
        linetable = bytes.fromhex(table)
        for start, end, line in ranges:  # a range's first and last code units
            for offset in {start, end - objects.CODE_UNIT}:
                assert objects.line_for_offset(linetable, firstlineno, offset) == line
                checked += 1
        assert objects.line_for_offset(linetable, firstlineno, code_size) is None
        assert objects.line_for_offset(linetable, firstlineno, -2) == firstlineno
    assert checked > 5000


# -- layouts: the built-in tables against the interpreters' own headers ----------------

PROBE = r"""
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_frame.h"
#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))
int main(void) {
    P("minor", PY_MINOR_VERSION);
#if PY_VERSION_HEX < 0x030D0000
    P("runtime_interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
    P("interp_next", offsetof(PyInterpreterState, next));
    P("interp_id", offsetof(PyInterpreterState, id));
    P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
    P("tstate_next", offsetof(PyThreadState, next));
    P("tstate_interp", offsetof(PyThreadState, interp));
    P("tstate_native_thread_id", offsetof(PyThreadState, native_thread_id));
    P("tstate_datastack", offsetof(PyThreadState, datastack_chunk));
    P("tstate_frame", offsetof(PyThreadState, cframe));
    P("tstate_root_cframe", offsetof(PyThreadState, root_cframe));
    P("cframe_current", offsetof(_PyCFrame, current_frame));
    P("cframe_previous", offsetof(_PyCFrame, previous));
    P("frame_code", offsetof(_PyInterpreterFrame, f_code));
    P("frame_previous", offsetof(_PyInterpreterFrame, previous));
    P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
    P("frame_owner", offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX < 0x030C0000
    P("frame_is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
    P("code_filename", offsetof(PyCodeObject, co_filename));
    P("code_name", offsetof(PyCodeObject, co_name));
    P("code_qualname", offsetof(PyCodeObject, co_qualname));
    P("code_linetable", offsetof(PyCodeObject, co_linetable));
    P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("code_firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
    P("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
    P("ascii_size", sizeof(PyASCIIObject));
    P("ascii_length", offsetof(PyASCIIObject, length));
    P("ascii_state", offsetof(PyASCIIObject, state));
    P("compact_size", sizeof(PyCompactUnicodeObject));
    P("bytes_size", offsetof(PyBytesObject, ob_base.ob_size));
    P("bytes_sval", offsetof(PyBytesObject, ob_sval));
    P("frame_localsplus", offsetof(_PyInterpreterFrame, localsplus));
    P("code_flags", offsetof(PyCodeObject, co_flags));
    P("code_localsplusnames", offsetof(PyCodeObject, co_localsplusnames));
    P("code_localspluskinds", offsetof(PyCodeObject, co_localspluskinds));
    P("tuple_size", offsetof(PyTupleObject, ob_base.ob_size));
    P("tuple_items", offsetof(PyTupleObject, ob_item));
    P("float_value", offsetof(PyFloatObject, ob_fval));
#if PY_VERSION_HEX < 0x030C0000
    P("long_size", offsetof(PyLongObject, ob_base.ob_size));
    P("long_digits", offsetof(PyLongObject, ob_digit));
#else
    P("long_size", offsetof(PyLongObject, long_value.lv_tag));
    P("long_digits", offsetof(PyLongObject, long_value.ob_digit));
#endif
    P("type_name", offsetof(PyTypeObject, tp_name));
#else
#define D(f) printf("%s %zu\n", #f, offsetof(_Py_DebugOffsets, f))
    D(version); D(free_threaded); D(runtime_state.interpreters_head);
    D(interpreter_state.next); D(interpreter_state.threads_head); D(interpreter_state.id);
    D(thread_state.next); D(thread_state.interp); D(thread_state.current_frame);
    D(thread_state.native_thread_id); D(thread_state.datastack_chunk);
    D(interpreter_frame.previous); D(interpreter_frame.executable);
    D(interpreter_frame.instr_ptr); D(interpreter_frame.owner);
    D(code_object.filename); D(code_object.name); D(code_object.qualname);
    D(code_object.linetable); D(code_object.firstlineno); D(code_object.co_code_adaptive);
    D(pyobject.ob_type); D(bytes_object.ob_size); D(bytes_object.ob_sval);
    D(unicode_object.state); D(unicode_object.length); D(unicode_object.asciiobject_size);
    D(interpreter_frame.localsplus); D(code_object.argcount);
    D(code_object.localsplusnames); D(code_object.localspluskinds); D(type_object.tp_name);
    D(tuple_object.ob_item); D(tuple_object.ob_size); D(float_object.ob_fval);
    D(long_object.lv_tag); D(long_object.ob_digit);
    P("datastack_top_follows_chunk",
      offsetof(PyThreadState, datastack_top) - offsetof(PyThreadState, datastack_chunk));
    P("code_flags_precede_argcount",
      offsetof(PyCodeObject, co_argcount) - offsetof(PyCodeObject, co_flags));
#endif
    return 0;
}
"""


@pytest.mark.parametrize("python", PYTHONS, ids=repr)
def test_layouts_match_offsetof_from_the_interpreters_headers(python: Python) -> None:
    available(python)
    if not python.debug:
        pytest.skip("the same interpreter as 'debian'")
    include = subprocess.run(
        python.argv("-c", "import sysconfig; print(sysconfig.get_path('include'))"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not python.host_path(Path(include) / "internal/pycore_frame.h").exists():
        pytest.skip(f"{python}: no internal headers in {include} (python3-dev installs them)")
    folder = INSIDE / f"probe-{python.name}-{os.getpid()}"
    host = python.host_path(folder)
    host.mkdir(parents=True, exist_ok=True)
    try:
        (host / "probe.c").write_text(PROBE)
        compiler = ["gcc", f"-I{include}", "-o", str(folder / "probe"), str(folder / "probe.c")]
        compiler = compiler if python.root is None else ["chroot", str(python.root), *compiler]
        if shutil.which("gcc") is None or subprocess.run(compiler, capture_output=True).returncode:
            pytest.skip(f"{python}: cannot compile against {include}")
        run = [str(folder / "probe")]
        run = run if python.root is None else ["chroot", str(python.root), *run]
        output = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(host, ignore_errors=True)
    facts = {name: int(value) for name, value in (line.split() for line in output.splitlines())}
    minor = (3, facts.pop("minor"))
    if minor in layouts.BUILT_IN_LAYOUTS:
        layout = layouts.BUILT_IN_LAYOUTS[minor]
        assert {name: getattr(layout, name) for name in facts} == facts
    else:
        assert facts.pop("datastack_top_follows_chunk") == 8
        assert facts.pop("code_flags_precede_argcount") == 4
        positions = layouts.debug_record_positions(minor)
        assert positions, f"CPython {minor}: no _Py_DebugOffsets record layout known"
        assert {name: positions[name] for name in facts} == facts


# -- refusals -------------------------------------------------------------------------


def test_python_older_than_3_11_is_refused_with_a_note(tmp_path: Path) -> None:
    older = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3")))
    if not older:
        pytest.skip("no CPython 3.10 installed (pyenv)")
    process = subprocess.Popen(
        [older[0], "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        problems: list[str] = []
        live = PtraceProcess(process.pid)
        assert find_interpreter(live, ModuleMap(live).modules, problems) is None
        assert any("older than 3.11" in problem for problem in problems), problems
    finally:
        process.kill()
        process.wait()


def test_a_process_without_python_says_so(run_program) -> None:  # type: ignore[no-untyped-def]
    program = run_program("threads-O2")
    problems: list[str] = []
    process = PtraceProcess(program.pid)
    assert find_interpreter(process, ModuleMap(process).modules, problems) is None
    assert problems == ["python: no CPython interpreter found"]


def test_a_layout_that_does_not_match_shows_no_frame(parked: Parked, live: LiveResult) -> None:
    """The other version's layout: every frame is refused, none shown wrong."""
    built_in = layouts.BUILT_IN_LAYOUTS
    wrong = built_in[(3, 12)] if live.interpreter.layout.minor != (3, 12) else built_in[(3, 11)]
    interpreter = Interpreter(
        live.interpreter.module,
        live.interpreter.runtime,
        live.interpreter.version,
        wrong,
        live.interpreter.types,
    )
    process = PtraceProcess(parked.pid)
    with process:
        collected = collect(Memory(process.read), interpreter)
    assert all(thread.frames == [] for thread in describe(collected))
    assert any("does not match" in problem for problem in collected.problems), collected.problems


def test_a_real_debug_offsets_record_from_a_binary(parked: Parked, live: LiveResult) -> None:
    """3.13+: the record the interpreter publishes gives the offsets its own headers have."""
    if live.interpreter.layout.source != "_Py_DebugOffsets":
        pytest.skip(f"CPython {live.interpreter.version_text} has no _Py_DebugOffsets")
    minor = live.interpreter.layout.minor
    size = layouts.debug_offsets_size(minor)
    assert size is not None
    data = live.snapshot.read(live.interpreter.runtime, size)
    assert data[:8] == layouts.DEBUG_COOKIE
    layout = layouts.layout_from_debug_offsets(data, live.interpreter.version)
    assert layout.tstate_interp == live.interpreter.layout.tstate_interp


# -- what the walk asks of targets and files ------------------------------------------


def test_read_frozen_many_fetches_what_the_stacks_lack_in_one_call(
    run_program,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While stopped: stack ranges from the copy, the rest in one process_vm_readv, kept."""
    from liveunwind.targets.live import snapshot as snapshot_module
    from liveunwind.targets.live import syscalls

    program = run_program("threads-O2")
    calls: list[list[tuple[int, int]]] = []
    real = syscalls.read_remote

    def counting(pid: int, ranges: list[tuple[int, int]]) -> list[bytes | None]:
        calls.append(list(ranges))
        return real(pid, ranges)

    monkeypatch.setattr(snapshot_module.syscalls, "read_remote", counting)
    process = PtraceProcess(program.pid)
    with process:
        snapshot = Snapshot.capture(process)
        calls.clear()
        sp = snapshot.threads()[0].registers[snapshot.arch.sp]
        heap = [m for m in snapshot.mappings() if m.readable and m.writable and not m.is_file]
        data = next(m for m in snapshot.mappings() if m.is_file and m.readable)
        ranges = [
            (sp, 64),  # in the stack copy
            (data.start, 16),
            (heap[0].start + 8, 32),
            (8, 16),  # nothing mapped there
            (data.start, snapshot_module.MAX_FROZEN_RANGE + 1),  # too large to ask for
            ((1 << 64) - 8, 16),  # past the end of the address space
        ]
        stopped = snapshot.read_frozen_many(ranges)
        assert calls == [[ranges[1], ranges[2], ranges[3]]]
        calls.clear()
        assert stopped[0] == snapshot.read(sp, 64)
        assert stopped[1] == process.read(data.start, 16)
        assert stopped[3:] == [None, None, None]
    calls.clear()
    assert snapshot.read_frozen_many(ranges) == stopped  # afterwards: the copy, nothing read
    assert calls == []
    with pytest.raises(MemoryReadError):
        snapshot.read_frozen(data.start + 64, 8)  # never read while stopped


def test_a_planned_read_made_before_the_stop_reads_what_read_frozen_many_reads(
    run_program,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PlannedRead: built while the process runs, one system call in the stop, kept alike.

    A range that cannot be read is None, and the ranges after it in the
    batch are read all the same; the buffers are handed over, so it runs once.
    """
    from liveunwind.targets.live import syscalls

    program = run_program("threads-O2")
    process = PtraceProcess(program.pid)
    heap = [m for m in process.mappings() if m.readable and m.writable and not m.is_file]
    data = next(m for m in process.mappings() if m.is_file and m.readable)
    ranges = [(data.start, 16), (data.start + 64, 24), (8, 16), (heap[0].start + 8, 32)]
    planned = syscalls.PlannedRead(ranges)
    calls: list[int] = []
    real = syscalls._process_vm_readv

    def counting(*arguments):  # type: ignore[no-untyped-def]
        calls.append(arguments[2])
        return real(*arguments)

    monkeypatch.setattr(syscalls, "_process_vm_readv", counting)
    with process:
        snapshot = Snapshot.capture(process)
        calls.clear()
        stopped = snapshot.read_planned(planned)
        assert calls[0] == len(ranges)  # the whole plan in one call, the rest after the hole
        assert sum(calls) == len(ranges) + 1 and len(calls) == 2
        assert list(stopped) == snapshot.read_frozen_many(ranges)
        assert stopped[2] is None and all(stopped[index] for index in (0, 1, 3))
        with pytest.raises(RuntimeError):
            planned.run(program.pid)
    calls.clear()
    assert [snapshot.read_frozen(*range_) for range_ in (ranges[0], ranges[1], ranges[3])] == [
        bytes(stopped[0]),  # type: ignore[arg-type]
        bytes(stopped[1]),  # type: ignore[arg-type]
        bytes(stopped[3]),  # type: ignore[arg-type]
    ]
    assert calls == []  # afterwards: the copy


def test_find_symbol_copies_no_symbol_table() -> None:
    """The largest interpreter here: looking a name up allocates almost nothing."""
    import mmap
    import tracemalloc

    from liveunwind.formats.elf import ElfImage

    candidates = [
        SID_ROOT / "usr/bin/python3.14d",
        Path(os.path.realpath("/usr/bin/python3")),
    ]
    path = next((candidate for candidate in candidates if candidate.exists()), None)
    if path is None:
        pytest.skip("no CPython binary here")
    with open(path, "rb") as stream:
        image = ElfImage(mmap.mmap(stream.fileno(), 0, prot=mmap.PROT_READ), origin=str(path))
    readelf = subprocess.run(
        ["readelf", "-sW", str(path)], capture_output=True, text=True, check=True
    ).stdout
    expected = {
        int(fields[1], 16)
        for fields in (line.split() for line in readelf.splitlines())
        if len(fields) == 8 and fields[7] == "_PyRuntime"
    }
    assert image.section_headers  # parsed before measuring: what is measured is the lookup
    tracemalloc.start()
    try:
        for name in ("_PyRuntime", "_U_dyn_info_list", "__jit_debug_descriptor"):
            found = image.find_symbol(name)
            if name == "_PyRuntime":
                assert found is not None and found.value in expected
            else:
                assert found is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10, f"{peak} bytes allocated looking up three names in {path}"


# -- costs nothing without --python ----------------------------------------------------


def test_a_plain_backtrace_imports_none_of_this(run_program) -> None:  # type: ignore[no-untyped-def]
    program = run_program("threads-O2")
    code = (
        "import sys, liveunwind\n"
        f"liveunwind.attach({program.pid})\n"
        "print([m for m in sys.modules if m.endswith(('cpython', '.python'))])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.stdout.strip() == "[]"
