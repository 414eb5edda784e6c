"""A Python process in a container, seen from the host: its own pid namespace, mount namespace
and root file system (the sid root of tools/sid-rootfs.sh, entered with ``unshare --pid --mount``
and ``chroot``, as a container runtime would).

CPython there knows its threads by their ids in that namespace, and its files by their paths
in that root; liveunwind on the host reads both through ``/proc/PID/root`` and the threads'
``NSpid``.  Live (frames and ``--locals``) and from the kernel's core of it, against what
python_parked.py wrote from inside.  The same program outside a container is tested in
test_python_frames.py and test_python_locals.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import json_document
from tests.support.paths import DATA
from tests.support.pythons import SID_ROOT, START_TIMEOUT, THREADS, Python, available
from tests.support.waits import wait_until

PROGRAM = DATA / "python_parked.py"
#: The sid root's interpreters, each in its own container.
CONTAINED = [
    Python("sid", "/usr/bin/python3", root=SID_ROOT),
    Python("sid-3.15", "/usr/bin/python3.15", root=SID_ROOT),
    Python("sid-3.13t", "/opt/python3.13t/bin/python3.13t", root=SID_ROOT),
]


class Contained:
    """python_parked.py as pid 1 of a pid namespace, in a mount namespace, chrooted."""

    def __init__(self, python: Python, *, abort: bool = False) -> None:
        assert python.root is not None
        self.inside = Path(f"/tmp/liveunwind-container-{python.name}-{os.getpid()}")
        self.host = python.root / self.inside.relative_to("/")
        shutil.rmtree(self.host, ignore_errors=True)
        self.host.mkdir(parents=True)
        shutil.copy(PROGRAM, self.host / PROGRAM.name)
        inner = (
            f"ulimit -c unlimited; cd {self.inside} && exec {python.executable} "
            f"{self.inside / PROGRAM.name} {self.inside / 'truth.json'}{' abort' * abort}"
        )
        self.launcher = subprocess.Popen(
            [
                *("unshare", "--pid", "--mount", "--fork", "--kill-child"),
                *("chroot", str(python.root), "sh", "-c", inner),
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.launcher.stdout is not None
        line = self.launcher.stdout.readline()
        if line != b"ready\n":
            self.stop()
            pytest.skip(f"{python}: no container here: {line!r}")
        children = Path(f"/proc/{self.launcher.pid}/task/{self.launcher.pid}/children")
        self.pid = int(children.read_text().split()[0]) if not abort else 0
        truth = json.loads((self.host / "truth.json").read_text())
        self.truth = {int(tid): [tuple(frame) for frame in frames] for tid, frames in truth.items()}
        self.locals_truth = {
            int(tid): frames
            for tid, frames in json.loads((self.host / "truth.json.locals").read_text()).items()
        }
        if abort:
            self.launcher.wait(timeout=START_TIMEOUT)
        else:
            wait_until(
                lambda: len(os.listdir(f"/proc/{self.pid}/task")) == THREADS,
                START_TIMEOUT,
                f"{python}: the reporter thread of python_parked.py to end",
            )

    def id_inside(self, tid: int) -> int:
        nspid = next(
            line.split()[1:]
            for line in Path(f"/proc/{self.pid}/task/{tid}/status").read_text().splitlines()
            if line.startswith("NSpid:")
        )
        return int(nspid[-1])

    def stop(self) -> None:
        if self.launcher.poll() is None:
            self.launcher.kill()
        self.launcher.communicate()
        shutil.rmtree(self.host, ignore_errors=True)


@pytest.fixture(scope="module", params=CONTAINED, ids=repr)
def contained(request: pytest.FixtureRequest) -> Iterator[Contained]:
    python: Python = request.param
    available(python)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    program = Contained(python)
    yield program
    program.stop()


def liveunwind(*args: str) -> dict:  # type: ignore[type-arg]
    return json_document(*args, "--locals")


def python_of(thread: dict) -> list[dict]:  # type: ignore[type-arg]
    placed = [place for frame in thread["frames"] for place in frame["python"]]
    return [*placed, *thread["python_unplaced"]]


def assert_equal_to_the_truth(document: dict, truth: dict, locals_truth: dict, ids: dict) -> None:  # type: ignore[type-arg]
    """Every thread's Python frames (and their variables' names) as the interpreter said."""
    seen = set()
    for thread in document["threads"]:
        inside = ids[thread["tid"]]
        if inside not in truth:
            continue
        seen.add(inside)
        frames = python_of(thread)
        assert [(f["function"], f["file"], f["line"]) for f in frames] == truth[inside]
        for frame, variables in zip(frames, locals_truth[inside]):
            if variables is None:
                assert "locals" not in frame
            else:
                assert list(frame["locals"]) == list(variables), frame["function"]
    assert seen == set(truth)


def test_a_contained_process_read_from_the_host_has_the_interpreters_frames(
    contained: Contained,
) -> None:
    document = liveunwind("pid", str(contained.pid), "--stack-cap", str(64 << 20))
    assert document["problems"] == []
    ids = {thread["tid"]: contained.id_inside(thread["tid"]) for thread in document["threads"]}
    assert not set(contained.truth) & set(ids), "the ids inside and outside should differ"
    assert_equal_to_the_truth(document, contained.truth, contained.locals_truth, ids)


@pytest.mark.parametrize("python", CONTAINED, ids=repr)
def test_the_kernel_core_of_a_contained_process(python: Python) -> None:
    available(python)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores to the working folder ({pattern})")
    program = Contained(python, abort=True)
    try:
        (core,) = [path for path in program.host.glob("core*") if path.is_file()]
        assert python.root is not None
        document = liveunwind("core", str(core), "--sysroot", str(python.root))
        # The kernel writes the ids the process has in its own namespace.
        ids = {thread["tid"]: thread["tid"] for thread in document["threads"]}
        assert_equal_to_the_truth(document, program.truth, program.locals_truth, ids)
    finally:
        program.stop()
