"""``liveunwind pid --container ID-or-PID``: every process of a container, without docker's help.

A real docker container (the engine started if none answers, the image a
small root of threads-O2, /bin/sh and libc imported from this machine,
tests/support/containers.py) runs three copies started by its init and one
``docker exec`` added: by its id, a short id and the pid of any of its
processes, liveunwind lists exactly the processes ``docker top`` lists,
each with gdb's frames (gdb reading the files through /proc/PID/root).  A
pid namespace made with ``unshare --pid`` (no cgroup of its own) is found
by its namespace.  A container that does not exist is one line.  A cgroup
made by hand is test_cgroups.py.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.assertions import assert_one_line_error
from tests.support.cli import run_cli
from tests.support.containers import Container, DockerUnavailable, Engine, small_image
from tests.support.processes import assert_frames_are_gdbs, assert_running_untraced
from tests.support.schema import VALIDATOR
from tests.support.waits import wait_until

THREADS = 9  # of threads-O2


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    try:
        started = Engine(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
    except DockerUnavailable as reason:
        pytest.skip(str(reason))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def container(engine: Engine, testprogs_build: Path) -> Iterator[Container]:
    """Three threads-O2 started by the container's init (itself one), and one docker exec."""
    program = "/prog/threads-O2"
    image = small_image([testprogs_build / "threads-O2"])
    running = Container(image, ["/bin/sh", "-c", f"{program} & {program} & exec {program}"])
    try:
        running.wait_parked(3, THREADS)
        running.exec(program)
        running.wait_parked(4, THREADS)
        yield running
    finally:
        running.stop()


def _listed(result: subprocess.CompletedProcess[str]) -> list[dict]:  # type: ignore[type-arg]
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    return document["processes"]


def test_by_id_every_process_docker_lists_with_gdbs_frames(container: Container, gdb: str) -> None:
    pids = container.pids()
    assert len(pids) == 4 and container.pid in pids
    result = run_cli("pid", "--container", container.id, "--json", "--verbose")
    entries = _listed(result)
    assert [entry["pid"] for entry in entries] == pids
    assert f"4 processes of container {container.id[:12]} by its cgroup " in result.stderr
    for entry in entries:
        assert entry["name"] == "threads-O2"
        assert_frames_are_gdbs(entry, gdb, in_its_root=True)
    assert_running_untraced(pids)


def test_by_short_id_and_by_any_of_its_pids(container: Container) -> None:
    pids = container.pids()
    short = run_cli("pid", "--container", container.id[:12], "--json")
    assert [entry["pid"] for entry in _listed(short)] == pids
    # The process docker exec added: its parent is docker's shim, outside the container.
    (added,) = [pid for pid in pids if _parent(pid) not in pids and pid != container.pid]
    by_pid = run_cli("pid", "--container", str(added), "--json", "--verbose")
    assert [entry["pid"] for entry in _listed(by_pid)] == pids
    assert f"container {container.id[:12]} by its cgroup" in by_pid.stderr
    summed = run_cli("pid", "--container", str(container.pid), "--collapsed")
    assert summed.returncode == 0, summed.stderr
    deep = [line for line in summed.stdout.splitlines() if "chain_30" in line]
    assert len(deep) == 1 and deep[0].startswith("threads-O2;deep;") and deep[0].endswith(" 4")
    assert_running_untraced(pids)


def test_a_pid_namespace_without_a_cgroup_of_its_own(testprogs_build: Path, gdb: str) -> None:
    """``unshare --pid``: the process's cgroup names no container, its pid namespace is the set."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    program = Path("/tmp") / f"lu{uuid.uuid4().hex[:10]}"
    shutil.copy2(testprogs_build / "threads-O2", program)
    launcher = subprocess.Popen(
        [
            *("unshare", "--pid", "--fork", "--kill-child"),
            *("sh", "-c", f"{program} & {program} & exec {program}"),
        ],
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        # The oracle is the process tree: unshare's child (pid 1 inside) and its two children.
        init = _children(launcher.pid, 1)[0]
        pids = sorted([init, *_children(init, 2)])
        for pid in pids:
            wait_until(lambda pid=pid: _parked(pid), 30, f"process {pid} parked")
        result = run_cli("pid", "--container", str(pids[-1]), "--json", "--verbose")
        entries = _listed(result)
        assert [entry["pid"] for entry in entries] == pids
        assert f"3 processes of the pid namespace of process {pids[-1]}" in result.stderr
        for entry in entries:
            assert_frames_are_gdbs(entry, gdb)
        assert_running_untraced(pids)
    finally:
        launcher.kill()
        launcher.wait()
        program.unlink()


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_perf_map_of_a_process_is_named_by_the_pid_it_sees() -> None:
    """Inside a pid namespace the perf map is /tmp/perf-INNER.map (its ``NSpid``), else PID's."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    from liveunwind.targets.live.procfs import perf_map_path

    launcher = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "sh", "-c", "sleep 60 & exec sleep 60"],
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        init = _children(launcher.pid, 1)[0]
        inner = _children(init, 1)[0]
        for pid in (init, inner):
            status = Path(f"/proc/{pid}/status").read_text()
            seen = status.split("NSpid:")[1].splitlines()[0].split()
            assert len(seen) == 2 and int(seen[0]) == pid != int(seen[1])
            assert perf_map_path(pid) == f"/tmp/perf-{seen[1]}.map"
        assert perf_map_path(launcher.pid) == f"/tmp/perf-{launcher.pid}.map"
    finally:
        launcher.kill()
        launcher.wait()


def _children(pid: int, count: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    wait_until(lambda: len(path.read_text().split()) == count, 30, f"{count} children of {pid}")
    return [int(child) for child in path.read_text().split()]


def _parked(pid: int) -> bool:
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks]
    return len(states) == THREADS and set(states) == {"S"}


def test_no_such_container_is_one_line(engine: Engine, testprogs_build: Path) -> None:
    """An id no cgroup names (one made up, one of a container removed), a pid in none."""
    made_up = secrets.token_hex(32)
    result = run_cli("pid", "--container", made_up)
    assert_one_line_error(result, 2, f"--container {made_up}", "no process's cgroup names")
    image = small_image([testprogs_build / "threads-O2"])
    gone = Container(image, ["/prog/threads-O2"])
    gone.wait_parked(1, THREADS)
    gone.stop()
    assert_one_line_error(run_cli("pid", "--container", gone.id[:12]), 2, "no process's cgroup")
    assert_one_line_error(run_cli("pid", "--container", "not-an-id"), 64, "neither a container id")
    with subprocess.Popen(["sleep", "30"]) as ours:  # a child of this test: in no container
        try:
            result = run_cli("pid", "--container", str(ours.pid))
        finally:
            ours.kill()
    assert_one_line_error(result, 2, "is in no container")
