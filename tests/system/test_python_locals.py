"""``--python --locals``: each Python frame's variables against the interpreter's own ``f_locals``.

python_parked.py writes, besides its frames, every frame's ``f_locals``
(tests/support/pythons.py loads it as ``Parked.locals_truth``); its thread
``locals`` parks in a function with a variable of every simple type, a
string longer than ``--locals`` shows, a cell and objects of other types.
Each interpreter of tests/support/pythons.py, live and in a kernel core.
The decoding of values from bytes is tested in tests/unit/test_python_locals.py.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.cpython import values
from tests.support.cli import json_document
from tests.support.paths import ROOT
from tests.support.pythons import INSIDE, PYTHONS, Parked, Python, available

#: The variables of python_parked.py's park_with_locals, in f_locals' order.
PARKED_LOCALS = [
    "count",
    "name",
    "rest",
    "options",
    "big",
    "negative",
    "zero",
    "ratio",
    "text",
    "data",
    "nothing",
    "yes",
    "items",
    "holder",
    "reads_a_cell",
    "short",
]


@pytest.fixture(scope="module", params=PYTHONS, ids=repr)
def parked(request: pytest.FixtureRequest) -> Iterator[Parked]:
    python: Python = request.param
    available(python)
    if not python.debug:
        pytest.skip("the same interpreter as 'debian'")
    folder = INSIDE / f"locals-{python.name}-{os.getpid()}"
    program = Parked(python, folder)
    yield program
    program.stop()
    shutil.rmtree(python.host_path(folder), ignore_errors=True)


def liveunwind(*args: str) -> dict:  # type: ignore[type-arg]
    return json_document(*args, "--locals")


def assert_value(ours: object, kind: str, type_name: str, truth: object, where: str) -> None:
    """One variable: ours as JSON against the interpreter's [kind, type name, repr or id]."""
    if kind == "object":
        assert isinstance(ours, dict), where
        assert ours["address"] == truth, where
        assert ours["type"].rsplit(".", 1)[-1] == type_name, where
        return
    assert isinstance(truth, str)
    expected = ast.literal_eval(truth)
    if isinstance(ours, dict):  # bytes, or a value cut short
        assert ours["type"] == type_name, where
        shown = ast.literal_eval(ours["repr"])
        if ours["truncated"]:
            assert len(shown) == values.MAX_TEXT and expected.startswith(shown), where
        else:
            assert shown == expected and type(shown) is type(expected), where
        return
    assert ours == expected and type(ours).__name__ == type_name, where


def assert_locals_are_f_locals(document: dict, parked: Parked) -> None:  # type: ignore[type-arg]
    threads = {thread["tid"]: thread for thread in document["threads"]}
    for tid, frames in parked.locals_truth.items():
        thread = threads[tid]
        ours = [place for frame in thread["frames"] for place in frame["python"]]
        ours += thread["python_unplaced"]
        assert len(ours) == len(frames), f"thread {tid}"
        for place, truth in zip(ours, frames):
            where = f"thread {tid}, {place['function']}"
            if truth is None:  # module code: its variables are its namespace, not read
                assert "locals" not in place, where
                continue
            assert list(place["locals"]) == list(truth), where
            for name, (kind, type_name, shown) in truth.items():
                assert_value(place["locals"][name], kind, type_name, shown, f"{where}: {name}")
    parked_frame = next(
        place
        for thread in document["threads"]
        for frame in thread["frames"]
        for place in frame["python"]
        if place["function"] == "park_with_locals"
    )
    assert list(parked_frame["locals"]) == PARKED_LOCALS
    assert parked_frame["locals"]["text"]["truncated"] is True


def test_a_live_process_has_the_locals_the_interpreter_reports(parked: Parked) -> None:
    document = liveunwind("pid", str(parked.pid), "--stack-cap", str(64 << 20))
    assert document["problems"] == []
    assert_locals_are_f_locals(document, parked)


def test_the_text_report_shows_each_variable_under_its_frame(parked: Parked) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", "pid", str(parked.pid), "--locals"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    lines = [line.strip() for line in result.stdout.splitlines()]
    at = next(index for index, line in enumerate(lines) if "park_with_locals" in line)
    shown = dict(line.split(" = ", 1) for line in lines[at + 1 : at + 1 + len(PARKED_LOCALS)])
    assert list(shown) == PARKED_LOCALS
    assert shown["big"] == repr(7**90) and shown["data"] == repr(b"\x00\xffbytes")
    assert shown["short"] == "'short'" and shown["text"].endswith("…")
    assert shown["holder"].startswith("<Holder object at 0x")


@pytest.mark.parametrize("python", PYTHONS, ids=repr)
def test_a_kernel_core_has_the_locals_the_interpreter_reported(python: Python) -> None:
    available(python)
    if not python.debug:
        pytest.skip("the same interpreter as 'debian'")
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores to the working folder ({pattern})")
    folder = INSIDE / f"locals-core-{python.name}-{os.getpid()}"
    program = Parked(python, folder, abort=True)
    try:
        (core,) = [p for p in python.host_path(folder).glob("core*") if p.is_file()]
        sysroot = [] if python.root is None else ["--sysroot", str(python.root)]
        document = liveunwind("core", str(core), *sysroot)
        assert_locals_are_f_locals(document, program)
    finally:
        program.stop()
        shutil.rmtree(python.host_path(folder), ignore_errors=True)
