"""``liveunwind pid --cgroup PATH``: the processes of a real cgroup v2 this test makes.

The test makes a cgroup (and one below it) in the cgroup v2 hierarchy,
moves copies of testprogs' threads-O2 into them through cgroup.procs, and
removes both after.  Every process of the cgroup is listed (the pids the
test put there, none other), each with gdb's frames; one that exits while
liveunwind holds another is a line of the report; a cgroup that does not
exist, is empty or is not a cgroup is one line.  Containers are in
test_containers.py; the choice of processes without one in
unit/test_cli_parse.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveunwind.targets.live.cgroups import MAX_DEPTH
from tests.support.assertions import assert_one_line_error
from tests.support.cli import run_cli
from tests.support.hostile import assert_untraced, states
from tests.support.paths import ROOT
from tests.support.processes import assert_frames_are_gdbs, assert_running_untraced
from tests.support.programs import RunningProgram, start_command, start_program
from tests.support.schema import VALIDATOR
from tests.support.waits import wait_until


def _cgroup2_mount() -> Path:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on hybrid hosts)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if " - cgroup2 " in line:
            return Path(line.split()[4])
    pytest.skip("no cgroup v2 hierarchy mounted here")


class Cgroup:
    """A cgroup v2 made for one test, with one cgroup below it; removed when its processes end."""

    def __init__(self) -> None:
        self.mount = _cgroup2_mount()
        self.path = self.mount / f"liveunwind-test-{uuid.uuid4().hex[:10]}"
        self.inner = self.path / "inner"
        try:
            self.path.mkdir()
            self.inner.mkdir()
        except OSError as error:
            self.remove()
            pytest.skip(f"cannot make a cgroup under {self.mount}: {error.strerror}")

    def add(self, pid: int, *, inner: bool = False) -> None:
        ((self.inner if inner else self.path) / "cgroup.procs").write_text(f"{pid}\n")

    def as_proc_writes_it(self) -> str:
        """The cgroup's path as /proc/PID/cgroup writes it (``0::/liveunwind-test-…``)."""
        return "/" + str(self.path.relative_to(self.mount))

    def remove(self) -> None:
        """rmdir once empty (the kernel refuses while a process, even exiting, is in it)."""
        for directory in (self.inner, self.path):
            if directory.exists():
                wait_until(lambda d=directory: _rmdir(d), 30, f"{directory} removed")


def _rmdir(directory: Path) -> bool:
    try:
        directory.rmdir()
    except OSError:
        return False
    return True


@pytest.fixture
def program_copy(testprogs_build: Path, tmp_path: Path) -> Path:
    """threads-O2 under a name no other process has (comm is its first 15 bytes)."""
    copy = tmp_path / f"lu{uuid.uuid4().hex[:10]}"
    shutil.copy2(testprogs_build / "threads-O2", copy)
    return copy


@pytest.fixture
def cgroup() -> Iterator[Cgroup]:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a cgroup and move processes into it")
    made = Cgroup()
    yield made
    made.remove()


@pytest.fixture
def placed(cgroup: Cgroup, program_copy: Path) -> Iterator[tuple[list[int], int, int]]:
    """Two copies in the cgroup, one in the cgroup below it, one outside both.

    Yields (the pids in the cgroup or below it, sorted; the inner one; the outside one).
    """
    started: list[RunningProgram] = []
    try:
        for _ in range(4):
            started.append(start_program(program_copy.parent, program_copy.name))
        first, second, below, outside = started
        cgroup.add(first.pid)
        cgroup.add(second.pid)
        cgroup.add(below.pid, inner=True)
        yield sorted([first.pid, second.pid, below.pid]), below.pid, outside.pid
    finally:
        for program in started:
            program.stop()


def test_every_process_of_the_cgroup_and_below_with_gdbs_frames(
    cgroup: Cgroup, placed: tuple[list[int], int, int], program_copy: Path, gdb: str
) -> None:
    inside, _, outside = placed
    result = run_cli("pid", "--cgroup", str(cgroup.path), "--json", "--verbose")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    assert [entry["pid"] for entry in document["processes"]] == inside
    assert outside not in inside
    assert f"3 processes of cgroup {cgroup.path} (and 1 cgroups below it)" in result.stderr
    for entry in document["processes"]:
        assert entry["name"] == program_copy.name
        assert_frames_are_gdbs(entry, gdb)
    assert_running_untraced([*inside, outside])


def test_the_path_proc_writes_and_the_cgroup_below_collapsed(
    cgroup: Cgroup, placed: tuple[list[int], int, int], program_copy: Path
) -> None:
    """The form /proc/PID/cgroup writes is taken too; --collapsed sums the processes by name."""
    inside, below, _ = placed
    proc_path = cgroup.as_proc_writes_it()
    assert f"0::{proc_path}\n" in Path(f"/proc/{inside[0]}/cgroup").read_text()
    summed = run_cli("pid", "--cgroup", proc_path, "--collapsed")
    assert summed.returncode == 0, summed.stderr
    deep = [line for line in summed.stdout.splitlines() if "chain_30" in line]
    assert len(deep) == 1 and deep[0].startswith(f"{program_copy.name};deep;")
    assert deep[0].endswith(" 3")
    text = run_cli("pid", "--cgroup", f"{proc_path}/inner")
    assert text.returncode == 0, text.stderr
    headers = [line for line in text.stdout.splitlines() if line.startswith("Process ")]
    assert headers == [f'Process {below} "{program_copy.name}":']
    assert_running_untraced(inside)


def test_a_process_exiting_mid_run_is_a_line_and_the_rest_print(
    cgroup: Cgroup, testprogs_build: Path, program_copy: Path, gdb: str
) -> None:
    """vforker (whose main thread cannot stop) holds the run 500 ms; meanwhile a copy exits.

    The cgroup's processes are taken by pid: vforker and its vfork child
    first, then the copies started after it.  The copy killed while
    vforker is held was listed but is gone at its turn.
    """
    vforker = start_command([str(testprogs_build / "vforker"), "30"])
    programs = [start_program(program_copy.parent, program_copy.name) for _ in range(3)]
    try:
        wait_until(lambda: states(vforker.pid)[vforker.pid][0] == "D", what="vfork")
        cgroup.add(vforker.pid)
        for program in programs:
            cgroup.add(program.pid)
        exiting, *fine = programs
        assert exiting.pid > vforker.pid, "pids wrapped: the exiting copy comes first"
        run = subprocess.Popen(
            [sys.executable, "-m", "liveunwind", "pid", "--cgroup", str(cgroup.path), "--json"],
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
        exiting.stop()
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 2, stderr
        assert "Traceback" not in stderr
        document = json.loads(stdout)
        VALIDATOR.validate(document)
        entries = {entry["pid"]: entry for entry in document["processes"]}
        assert {vforker.pid, exiting.pid, *(p.pid for p in fine)} <= set(entries)
        assert entries[exiting.pid]["backtrace"] is None
        assert any(word in entries[exiting.pid]["error"] for word in ("exited", "no process"))
        for program in fine:
            assert_frames_are_gdbs(entries[program.pid], gdb)
        assert_running_untraced([program.pid for program in fine])
        assert_untraced(vforker.pid)
    finally:
        vforker.stop()
        for program in programs:
            program.stop()


def test_no_such_cgroup_an_empty_one_and_not_a_cgroup_are_one_line(cgroup: Cgroup) -> None:
    absent = cgroup.path / "absent"
    assert_one_line_error(run_cli("pid", "--cgroup", str(absent)), 2, "no such cgroup")
    relative = f"{cgroup.as_proc_writes_it()}/absent"
    assert_one_line_error(run_cli("pid", "--cgroup", relative), 2, str(absent))
    assert_one_line_error(run_cli("pid", "--cgroup", str(cgroup.inner)), 2, "no process matches")
    assert_one_line_error(run_cli("pid", "--cgroup", ""), 64, "empty path")
    assert_one_line_error(run_cli("pid", "--cgroup", "/x" * 3000), 64, "too long")
    both = run_cli("pid", "--cgroup", str(cgroup.path), "--container", "1")
    assert_one_line_error(both, 64, "not both")
    # A file system mounted over a directory of the hierarchy: its path is a cgroup's, its files
    # are not.
    if shutil.which("mount") is None:
        return
    subprocess.run(["mount", "-t", "tmpfs", "none", str(cgroup.inner)], check=True)
    try:
        (cgroup.inner / "cgroup.procs").write_text(f"{os.getpid()}\n")
        not_cgroup = run_cli("pid", "--cgroup", str(cgroup.inner))
        assert_one_line_error(not_cgroup, 64, "not on a cgroup file system")
    finally:
        subprocess.run(["umount", str(cgroup.inner)], check=True)


def test_a_wide_cgroup_with_few_descriptors_and_one_too_deep(
    cgroup: Cgroup, placed: tuple[list[int], int, int]
) -> None:
    """200 cgroups side by side are walked with 64 descriptors; 65 levels down is refused.

    The walk holds one descriptor per level, not one per cgroup found; a
    cgroup deeper than MAX_DEPTH fails the run in one line (exit 64),
    rather than leaving its processes out.
    """
    inside, _, _ = placed
    side = [cgroup.inner / f"side{n}" for n in range(200)]
    chain = [cgroup.path / "/".join(["d"] * depth) for depth in range(1, MAX_DEPTH + 2)]
    try:
        for directory in side:
            directory.mkdir()
        command = [sys.executable, "-m", "liveunwind", "pid", "--cgroup", str(cgroup.path)]
        wide = subprocess.run(
            ["prlimit", "--nofile=64", *command, "--verbose", "--collapsed"],
            capture_output=True,
            text=True,
            cwd="/",
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            timeout=60,
        )
        assert wide.returncode == 0, wide.stderr
        assert f"3 processes of cgroup {cgroup.path} (and 201 cgroups below it)" in wide.stderr
        for directory in chain:
            directory.mkdir()
        deep = run_cli("pid", "--cgroup", str(cgroup.path))
        assert_one_line_error(deep, 64, f"nested deeper than {MAX_DEPTH}")
    finally:
        for directory in [*reversed(chain), *side]:
            if directory.exists():
                directory.rmdir()
    assert_running_untraced(inside)
