"""``--tasks``: asyncio tasks and their await chains against the interpreter's own view.

tests/data/python_tasks.py parks tasks in two event loops and writes, from
inside, every task's name, the thread running it and its coroutines
through ``cr_await``; ``python -m asyncio ps PID`` (3.14+) is the second
oracle, from outside.  Live and in a kernel core, on every interpreter of
tests/support/pythons.py that publishes where its tasks are (3.14+); an
older one says it cannot.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.cpython import layouts
from tests.support.cli import json_document
from tests.support.paths import DATA
from tests.support.pythons import INSIDE, PYTHONS, Python, Started, available

PROGRAM = DATA / "python_tasks.py"

Task = tuple[str, "int | None", tuple[tuple[str, str, int], ...]]


def version_of(python: Python) -> tuple[int, int]:
    output = subprocess.run(
        python.argv("-c", "import sys; print(sys.version_info[0], sys.version_info[1])"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(output[0]), int(output[1])


def with_tasks(python: Python) -> None:
    available(python)
    if not python.debug:
        pytest.skip("the same interpreter as 'debian'")
    if version_of(python) < (3, 14):
        pytest.skip(f"{python}: asyncio publishes where its tasks are from 3.14 on")


@pytest.fixture(scope="module", params=PYTHONS, ids=repr)
def running(request: pytest.FixtureRequest) -> Iterator[Started]:
    python: Python = request.param
    with_tasks(python)
    program = Started(python, PROGRAM, INSIDE / f"tasks-{python.name}-{os.getpid()}")
    yield program
    program.stop()


def liveunwind(*args: str) -> dict:  # type: ignore[type-arg]
    return json_document(*args, "--tasks")


def truth_of(program: Started) -> set[Task]:
    return {
        (task["name"], task["thread"], tuple(tuple(frame) for frame in task["frames"]))
        for task in json.loads(program.truth_file().read_text())
    }


def tasks_of(document: dict) -> set[Task]:  # type: ignore[type-arg]
    return {
        (
            task["name"],
            task["thread"],
            tuple((frame["function"], frame["file"], frame["line"]) for frame in task["frames"]),
        )
        for task in document["tasks"]
    }


def test_every_task_has_the_await_chain_the_interpreter_gives(running: Started) -> None:
    document = liveunwind("pid", str(running.pid))
    assert document["problems"] == []
    truth = truth_of(running)
    assert len(truth) == 7
    assert tasks_of(document) == truth
    blocker = next(task for task in document["tasks"] if task["name"] == "blocker")
    threads = {thread["tid"]: thread["name"] for thread in document["threads"]}
    assert threads[blocker["thread"]] == "second"


def test_asyncio_ps_from_outside_lists_the_same_tasks_and_coroutines(running: Started) -> None:
    """``python -m asyncio ps PID``: CPython's own remote reader (it reads /proc/PID/maps, so
    an interpreter's root gets a /proc for as long as it runs)."""
    python = running.python
    proc = None if python.root is None else python.root / "proc"
    mounted = proc is not None and subprocess.run(["mountpoint", "-q", str(proc)]).returncode != 0
    if mounted:
        subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
    try:
        table = subprocess.run(
            python.argv("-m", "asyncio", "ps", str(running.pid)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        if mounted:
            subprocess.run(["umount", str(proc)], check=True)
    assert table.returncode == 0, table.stderr
    rows = {}
    for line in table.stdout.splitlines()[2:]:
        fields = line.split()
        if len(fields) >= 3 and fields[1].startswith("0x"):
            rest = line.split(fields[2], 1)[1]
            rows[int(fields[1], 16)] = (fields[2], rest.strip().split("  ")[0])
    document = liveunwind("pid", str(running.pid))
    ours = {
        task["address"]: (task["name"], " -> ".join(frame["function"] for frame in task["frames"]))
        for task in document["tasks"]
    }
    # It lists the tasks of a thread whose loop is waiting, not of one a task blocks.
    assert len(rows) >= 4
    assert {address: ours[address] for address in rows} == rows


@pytest.mark.parametrize("python", PYTHONS, ids=repr)
def test_a_kernel_core_has_the_tasks_the_interpreter_reported(python: Python) -> None:
    with_tasks(python)
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores to the working folder ({pattern})")
    program = Started(
        python, PROGRAM, INSIDE / f"tasks-core-{python.name}-{os.getpid()}", abort=True
    )
    try:
        sysroot = [] if python.root is None else ["--sysroot", str(python.root)]
        document = liveunwind("core", str(program.core), *sysroot)
        assert tasks_of(document) == truth_of(program)
    finally:
        program.stop()


def test_before_3_14_the_report_says_why_there_are_no_tasks(run_program) -> None:  # type: ignore[no-untyped-def]
    python = Python("debian", "/usr/bin/python3")
    available(python)
    if version_of(python) >= (3, 14):
        pytest.skip("this machine's python3 publishes its tasks")
    process = subprocess.Popen(
        [
            python.executable,
            "-c",
            "import asyncio, time; print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        document = liveunwind("pid", str(process.pid))
        assert document["tasks"] == []
        assert any("_AsyncioDebug" in problem for problem in document["problems"])
    finally:
        process.kill()
        process.wait()


def test_the_asyncio_record_is_refused_when_an_offset_lies_outside_its_object() -> None:
    size = layouts.asyncio_record_size()
    good = b"".join(
        (64 if index in (0, 7, 9) else 8).to_bytes(8, "little") for index in range(size // 8)
    )
    assert layouts.asyncio_layout(good).task_coro == 8
    bad = bytearray(good)
    bad[8 * 5 : 8 * 6] = (64).to_bytes(8, "little")  # task_coro at the task object's size
    with pytest.raises(Exception, match="lies outside"):
        layouts.asyncio_layout(bytes(bad))
