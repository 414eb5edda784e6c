"""A library that changes under liveunwind costs a problem line, never the process (SIGBUS).

testprogs/dlcopy opens a copy of libdlcopy.so and parks a thread in it; the
tests change the copy — truncate it after its code, rewrite it in place,
replace it by a FIFO or by a symlink — between two backtraces of one
session, before a fresh ``liveunwind pid``, and after a kernel core was
written (whose NT_FILE note names the copy).  A reader that mmapped the file
dies of SIGBUS when it reads a page the truncation took away: the session
here reads the library's tables and symbols for a thread that entered the
library only after the copy was cut.  The files' unit side (FileContents,
ElfImage over a file cut short) is tests/unit/test_hostile_files.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.cores import kernel_writes_cores_here, unlimited_core
from tests.support.hostile import assert_untraced, states
from tests.support.paths import ROOT
from tests.support.programs import RunningProgram, RunProgram
from tests.support.waits import wait_until

#: The end of libdlcopy.so's code: the copy is cut here, its unwind tables and symbols (past
#: the half-megabyte of dlc_pad) gone, once every thread of the program is blocked.
CODE_END = 0x2000

#: A session of liveunwind, in a process of its own (SIGBUS would kill the test otherwise):
#: one backtrace, "first", waits for a line, a second backtrace printed as JSON.  The thread
#: "later" enters the library in between: its frames need the library's tables and symbols
#: at pcs the first backtrace did not look up.
SESSION = """
import json, sys
import liveunwind
session = liveunwind.Session(int(sys.argv[1]))
session.backtrace()
print("first", flush=True)
sys.stdin.readline()
backtrace = session.backtrace()
print(json.dumps({
    "problems": backtrace.problems,
    "threads": {
        t.name: [[f.function, f.method.value] for f in t.frames] for t in backtrace.threads
    },
}))
"""

PLAIN = ["clock_nanosleep", "__nanosleep", "plain_inner", "plain_outer", "start_thread"]


@pytest.fixture
def library_copy(testprogs_build: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "libcopy.so"
    shutil.copy(testprogs_build / "libdlcopy.so", copy)
    return copy


def _functions(frames: list[list[str]]) -> list[str]:
    return [function for function, _method in frames]


def _start_later(program: RunningProgram) -> None:
    """Sends SIGUSR1: the program starts "later", which enters the library; waits till it sleeps."""
    os.kill(program.pid, signal.SIGUSR1)
    wait_until(
        lambda: ("later", "S") in program.thread_states().values(),
        what='the thread "later" asleep in the library',
    )


def _session_across(program: RunningProgram, change: object) -> dict:
    """Runs a session: one backtrace, "later" started, ``change()``, a second backtrace."""
    session = subprocess.Popen(
        [sys.executable, "-c", SESSION, str(program.pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert session.stdout is not None and session.stdin is not None
        assert session.stdout.readline() == "first\n", (
            session.stderr.read() if session.stderr else ""
        )
        _start_later(program)
        change()  # type: ignore[operator]
        out, err = session.communicate("go\n", timeout=60)
    finally:
        session.kill()
        session.wait()
    assert session.returncode == 0, f"the session died ({session.returncode}): {err}"
    assert_untraced(program.pid)
    return json.loads(out)


def test_a_library_cut_short_during_a_session_is_a_problem_not_sigbus(
    run_program: RunProgram, library_copy: Path
) -> None:
    program = run_program("dlcopy", str(library_copy))
    result = _session_across(program, lambda: os.truncate(library_copy, CODE_END))
    assert any(
        str(library_copy) in problem and "cut short" in problem for problem in result["problems"]
    ), result["problems"]
    threads = result["threads"]
    assert _functions(threads["plain"])[: len(PLAIN)] == PLAIN
    # Without its tables and symbols the library's frames are not named from its file.
    assert "dlc_later" not in _functions(threads["later"])


def test_a_library_rewritten_in_place_during_a_session_is_read_again(
    run_program: RunProgram, library_copy: Path
) -> None:
    program = run_program("dlcopy", str(library_copy))

    def rewrite() -> None:
        # The same bytes written over themselves: the size stays, only the mtime tells.
        data = library_copy.read_bytes()
        with open(library_copy, "r+b") as stream:
            stream.write(data)
        os.utime(library_copy, ns=(1, 1))

    result = _session_across(program, rewrite)
    assert any(
        str(library_copy) in problem and "written to" in problem and "read again" in problem
        for problem in result["problems"]
    ), result["problems"]
    threads = result["threads"]
    assert _functions(threads["later"])[2:4] == ["dlc_block", "dlc_later"]
    assert _functions(threads["inlib"])[2:5] == ["dlc_block", "dlc_middle", "dlc_enter"]
    assert _functions(threads["plain"])[: len(PLAIN)] == PLAIN


def _replace_by_fifo(copy: Path) -> None:
    copy.unlink()
    os.mkfifo(copy)


def _replace_by_symlink(copy: Path, testprogs_build: Path) -> None:
    copy.unlink()
    copy.symlink_to(testprogs_build / "libtpshared.so")


@pytest.mark.parametrize("replacement", ["fifo", "symlink"])
def test_a_library_replaced_is_read_through_the_kernels_handle(
    run_program: RunProgram, library_copy: Path, testprogs_build: Path, replacement: str
) -> None:
    """During a session and in a fresh run, the mapped file is read, never the FIFO or the link."""
    program = run_program("dlcopy", str(library_copy))
    if replacement == "fifo":
        result = _session_across(program, lambda: _replace_by_fifo(library_copy))
    else:
        result = _session_across(
            program, lambda: _replace_by_symlink(library_copy, testprogs_build)
        )
    assert _functions(result["threads"]["later"])[2:4] == ["dlc_block", "dlc_later"]
    # A fresh run opens the path again: it names something else now, which is said.
    run = run_cli("pid", str(program.pid), "--json", timeout=60)
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    what = "a FIFO" if replacement == "fifo" else "another file"
    assert any(
        f"is {what} now" in problem and "map_files" in problem for problem in document["problems"]
    ), document["problems"]
    frames = {
        thread["name"]: [f["function"] for f in thread["frames"]] for thread in document["threads"]
    }
    assert frames["inlib"][2:5] == ["dlc_block", "dlc_middle", "dlc_enter"]
    assert frames["plain"][: len(PLAIN)] == PLAIN
    assert {state for state, _tracer in states(program.pid).values()} == {"S"}
    assert_untraced(program.pid)


def test_a_fresh_run_on_a_library_cut_short_says_so_and_prints_the_rest(
    run_program: RunProgram, library_copy: Path
) -> None:
    program = run_program("dlcopy", str(library_copy))
    os.truncate(library_copy, CODE_END)
    run = run_cli("pid", str(program.pid), timeout=60)
    assert run.returncode in (0, 1), run.stderr
    assert "Traceback" not in run.stderr
    assert f"note: {library_copy}: is {CODE_END} bytes, shorter than" in run.stdout, run.stdout
    plain = run.stdout.split('"plain"')[1].split("end of stack")[0]
    assert all(function in plain for function in PLAIN), run.stdout
    # Exit 1 exactly when a walk ended early (docs/cli.md).
    assert (run.returncode == 1) == (
        "(complete)" not in run.stdout.split('"inlib"')[1].split("\n\n")[0]
    )
    assert_untraced(program.pid)


@pytest.mark.parametrize("change", ["truncate", "rewrite", "fifo", "symlink"])
def test_a_core_whose_library_changed_since_says_so(
    testprogs_build: Path, library_copy: Path, tmp_path: Path, change: str
) -> None:
    """The core's NT_FILE names the copy; the copy is changed after the core was written."""
    reason = kernel_writes_cores_here()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path / "core"
    folder.mkdir()
    program = RunningProgram(
        testprogs_build / "dlcopy", [str(library_copy)], cwd=folder, preexec_fn=unlimited_core
    )
    try:
        program.wait_ready((), 10.0)
        os.kill(program.pid, signal.SIGABRT)
        program.popen.wait(timeout=60)
    finally:
        program.stop()
    cores = [path for path in folder.iterdir() if path.name.startswith("core")]
    assert len(cores) == 1, cores
    if change == "truncate":
        os.truncate(library_copy, CODE_END)
        expected = "cut short"
    elif change == "rewrite":  # another build in its place: its build-id differs
        shutil.copy(testprogs_build / "libtpshared.so", library_copy)
        expected = "build-id"
    elif change == "fifo":
        _replace_by_fifo(library_copy)
        expected = "FIFO"
    else:
        _replace_by_symlink(library_copy, testprogs_build)
        expected = "build-id"
    run = run_cli("core", str(cores[0]), "--json", timeout=60)
    assert run.returncode in (0, 1), run.stderr
    document = json.loads(run.stdout)
    assert any(
        str(library_copy) in problem and expected in problem for problem in document["problems"]
    ), document["problems"]
    # A kernel core names no thread but the process: the rest are told by their frames.
    walks = [[f["function"] for f in thread["frames"]] for thread in document["threads"]]
    assert [walk for walk in walks if "plain_inner" in walk] == [[*PLAIN, "__clone3"]], walks
    assert next(walk for walk in walks if "main" in walk)[:2] == ["pause", "main"], walks
