"""Attaching inside a container, with and without CAP_SYS_PTRACE.

A process of another user (here uid 65534, as an application in a container
often runs) may only be traced with CAP_SYS_PTRACE, which Docker grants only
with ``--cap-add=SYS_PTRACE``. docker/run-integration runs the x86_64 suite
in a container started with it and runs this module again in one started
without it: with it the backtrace works, without it the command fails with
one line that says how to start the container.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.assertions import assert_one_line_error
from tests.support.platform import require_ptrace, run_liveunwind, start_parked
from tests.support.programs import RunningProgram

pytestmark = pytest.mark.integration

NOBODY = 65534
CAP_SYS_PTRACE = 19


def has_cap_sys_ptrace() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    return False


def start_as_nobody(testprogs_build: Path) -> RunningProgram:
    return start_parked(testprogs_build / "threads-O2", user=NOBODY, group=NOBODY, extra_groups=[])


def test_with_cap_sys_ptrace_another_users_process_is_traced(
    platform_name: str, testprogs_build: Path
) -> None:
    if not has_cap_sys_ptrace():
        pytest.skip("this container has no CAP_SYS_PTRACE (the run without --cap-add=SYS_PTRACE)")
    require_ptrace()
    with start_as_nobody(testprogs_build) as program:
        result = run_liveunwind("pid", str(program.pid))
    assert result.returncode == 0, result.stderr
    assert "chain_30" in result.stdout


def test_without_cap_sys_ptrace_the_error_names_cap_add(
    platform_name: str, testprogs_build: Path
) -> None:
    if has_cap_sys_ptrace():
        pytest.skip(
            "this process has CAP_SYS_PTRACE; docker/run-integration runs this test again "
            "in a container started without --cap-add=SYS_PTRACE"
        )
    with start_as_nobody(testprogs_build) as program:
        result = run_liveunwind("pid", str(program.pid))
    assert_one_line_error(result, 2, "permission denied", "--cap-add=SYS_PTRACE")
