"""``--python`` with subinterpreters: a thread inside one shows its frames there, then the main's.

tests/data/python_subinterpreters.py parks a thread in code it runs in a
subinterpreter; the subinterpreter writes that thread's frames (and its
own id), the main interpreter the frames of its threads — the parked one's
included: the call that entered the subinterpreter.  On each interpreter
of tests/support/pythons.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import DATA, ROOT
from tests.support.pythons import INSIDE, PYTHONS, Python, Started, available
from tests.support.schema import VALIDATOR
from tests.support.waits import wait_until

PROGRAM = DATA / "python_subinterpreters.py"

Frames = list[tuple[str, str, int, int]]


class Running(Started):
    """python_subinterpreters.py, ready, and what each interpreter wrote of its threads."""

    def __init__(self, python: Python, folder: Path) -> None:
        super().__init__(python, PROGRAM, folder)
        #: Native thread id → its frames, innermost first, each with its interpreter's id.
        self.truth: dict[int, Frames] = {}
        for suffix in (".sub", ""):  # the subinterpreter's frames are the innermost
            written = json.loads(self.truth_file(suffix).read_text())
            for tid, frames in written["threads"].items():
                self.truth.setdefault(int(tid), []).extend(
                    (function, file, line, written["id"]) for function, file, line in frames
                )
        self.subinterpreter = json.loads(self.truth_file(".sub").read_text())["id"]


@pytest.fixture(scope="module", params=PYTHONS, ids=repr)
def running(request: pytest.FixtureRequest) -> Iterator[Running]:
    python: Python = request.param
    available(python)
    if not python.debug:
        pytest.skip("the same interpreter as 'debian'")
    folder = INSIDE / f"subinterpreters-{python.name}-{os.getpid()}"
    program = Running(python, folder)
    wait_until(
        lambda: len(os.listdir(f"/proc/{program.process.pid}/task")) == 2,
        30,
        f"{python}: python_subinterpreters.py to have its two threads",
    )
    yield program
    program.stop()


def test_a_thread_in_a_subinterpreter_shows_both_interpreters_frames(running: Running) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", "pid", str(running.pid), "--python", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    assert document["problems"] == []
    found = {
        thread["tid"]: [
            (place["function"], place["file"], place["line"], place["interpreter"])
            for frame in thread["frames"]
            for place in frame["python"]
        ]
        for thread in document["threads"]
        if not thread["python_unplaced"]
    }
    assert running.subinterpreter != 0
    for tid, frames in running.truth.items():
        assert found[tid] == frames, f"thread {tid}"
    inside = [tid for tid, frames in running.truth.items() if frames[0][3] != 0]
    assert len(inside) == 1


def test_the_text_report_names_the_subinterpreter(running: Running) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", "pid", str(running.pid), "--python"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert f"[py interp {running.subinterpreter}] deepest_in_subinterpreter" in result.stdout
