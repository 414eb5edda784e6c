"""The command's one-line failures say what is true on this machine and name the way out."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.assertions import assert_one_line_error
from tests.test_attach_errors import ROOT, run_cli, start_sleeper

YAMA_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")


def yama_words() -> tuple[list[str], list[str]]:
    """What the permission message must and must not say about Yama here."""
    try:
        scope = YAMA_SCOPE.read_text().strip()
    except OSError:
        return ["Yama is not enabled"], ["check"]
    if scope == "0":
        return ["ptrace_scope is 0: Yama adds no restriction"], ["check"]
    return [f"check kernel.yama.ptrace_scope (now {scope})"], []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process of root")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_permission_error_advises_checking_yama_only_where_it_can_be_the_cause() -> None:
    copy = Path(tempfile.mkdtemp(prefix="liveunwind-nobody-", dir="/tmp"))
    shutil.copytree(ROOT / "liveunwind", copy / "liveunwind")
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755)
    target = start_sleeper()
    try:
        result = run_cli("pid", str(target.pid), user=65534, package_root=copy)
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(copy)
    present, absent = yama_words()
    assert_one_line_error(result, 2, "permission denied", "CAP_SYS_PTRACE", *present)
    for word in absent:
        assert word not in result.stderr


def test_stack_cap_zero_is_a_usage_error() -> None:
    # The session read 0 as "use the default", so it never meant what it said.
    assert_one_line_error(run_cli("pid", "1", "--stack-cap", "0"), 64, "--stack-cap", "at least 1")
