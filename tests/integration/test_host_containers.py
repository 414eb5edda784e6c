"""From the host, a program running in a container: its files are read through /proc/PID/root.

Run by docker/run-integration on the host (not in a container), against the
x86_64 image it built (``LIVEUNWIND_TEST_IMAGE``). The program's paths in
/proc/PID/maps are the container's (/work/testprogs/...), which do not exist
on the host; liveunwind must open them inside the container's root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import liveunwind
from tests.support.assertions import assert_matches_gdb
from tests.support.oracles import gdb_backtraces
from tests.support.platform import backtrace_json, contains_chain, functions, thread_named

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("LIVEUNWIND_TEST_IMAGE", "")
PROGRAM = "/work/testprogs/build/threads-O2"


def docker(*args: str, timeout: float = 120.0) -> str:
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"docker {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


def sleeping(pid: int) -> bool:
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks]
    return len(states) == 9 and set(states) == {"S"}


@pytest.fixture
def container_pid() -> Iterator[int]:
    """threads-O2 as the init process of a container of the x86_64 image; its pid on the host."""
    if not IMAGE:
        pytest.skip(
            "LIVEUNWIND_TEST_IMAGE is not set: docker/run-integration runs this on the host"
        )
    if shutil.which("docker") is None:
        pytest.skip("needs docker on the host (this test looks into a container from outside)")
    name = f"liveunwind-target-{os.getpid()}"
    docker("run", "-d", "--rm", "--network=none", "--name", name, IMAGE, PROGRAM)
    try:
        pid = int(docker("inspect", "-f", "{{.State.Pid}}", name))
        deadline = time.monotonic() + 60
        while not ("ready" in docker("logs", name) and sleeping(pid)):
            assert time.monotonic() < deadline, "the program in the container never got ready"
            time.sleep(0.05)
        yield pid
    finally:
        docker("rm", "-f", name)


def test_program_in_a_container_seen_from_the_host(container_pid: int, gdb: str) -> None:
    assert not Path(PROGRAM).exists(), f"{PROGRAM} exists on the host too: the test proves nothing"
    assert os.readlink(f"/proc/{container_pid}/exe") == PROGRAM
    document = backtrace_json("pid", str(container_pid))
    assert document["complete"] is True
    deep = thread_named(document, "deep")
    assert contains_chain(functions(deep), [f"chain_{n:02d}" for n in range(30, 0, -1)])
    # Modules are named by the container's paths.
    assert any(frame["module"] == PROGRAM for frame in deep["frames"])
    # gdb finds the container's files only when told where its root is.
    root = f"/proc/{container_pid}/root"
    oracle = gdb_backtraces(
        container_pid, gdb=gdb, sysroot=root, executable=f"/proc/{container_pid}/exe"
    )
    assert_matches_gdb(liveunwind.attach(container_pid), oracle)
