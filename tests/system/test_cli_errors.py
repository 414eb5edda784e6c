"""The command's one-line failures say what is true on this machine and name the way out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from liveunwind.targets.live import procfs
from tests.support.assertions import assert_one_line_error
from tests.support.cli import run_cli
from tests.support.macho import BUILD, TOOLS, make_core
from tests.support.paths import ROOT
from tests.support.programs import start_sleeper
from tests.support.waits import wait_until

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


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the advice is for root without it")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_root_without_cap_sys_ptrace_is_told_the_docker_option() -> None:
    # Root in a container started without --cap-add=SYS_PTRACE: the capability
    # is out of its bounding set, so exec leaves it out of the effective set,
    # and another user's process is refused.
    target = subprocess.Popen(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "600"]
    )
    try:
        wait_for_exec(target.pid, "sleep")
        command = [sys.executable, "-m", "liveunwind", "pid", str(target.pid)]
        result = subprocess.run(
            ["setpriv", "--bounding-set=-sys_ptrace", *command],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
    finally:
        target.kill()
        target.wait()
    assert_one_line_error(
        result, 2, "permission denied", "lacks CAP_SYS_PTRACE", "docker run --cap-add=SYS_PTRACE"
    )


def wait_for_exec(pid: int, name: str, timeout: float = 10.0) -> None:
    """Until ``pid`` runs ``name``: setpriv has changed user and exec'ed it."""
    wait_until(lambda: procfs.process_stat(pid).name == name, timeout, f"{pid} to become {name}")


def test_stack_cap_zero_is_a_usage_error() -> None:
    # The session read 0 as "use the default", so it never meant what it said.
    assert_one_line_error(run_cli("pid", "1", "--stack-cap", "0"), 64, "--stack-cap", "at least 1")


def run_without_site_packages(*args: str) -> subprocess.CompletedProcess[str]:
    """Python with no third-party package (``-S``): lief, among others, not there."""
    return subprocess.run(
        [sys.executable, "-S", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


needs_macho_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS), reason="needs clang-16, lld-16, llvm-16"
)


@pytest.fixture(scope="module")
def mach_o_binary(macho_build: Path) -> Path:
    return macho_build / "chain-x86_64"


@needs_macho_tools
def test_mach_o_needs_no_third_party_package(mach_o_binary: Path, tmp_path: Path) -> None:
    """Mach-O cores and files are read without lief (formats/macho.py), as with it."""
    premise = run_without_site_packages("-c", "import lief")
    assert "No module named 'lief'" in premise.stderr
    core, _ = make_core(mach_o_binary, tmp_path, "--no-image-infos")
    command = ("-m", "liveunwind", "core", str(core), "--search-path", str(BUILD))
    bare = run_without_site_packages(*command)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == run_cli(*command[2:]).stdout and "leaf_stop" in bare.stdout
    info = run_without_site_packages("-m", "liveunwind", "unwind-info", str(mach_o_binary))
    assert info.returncode == 0 and "__unwind_info" in info.stdout, info.stderr
