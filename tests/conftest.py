"""Fixtures of every test that builds or runs programs: tests/system, tests/fuzz, tests/integration.

One build fixture per family of test programs under testprogs/, all with the
policy of tests/support/builds.py: skipped, saying why, where this machine
cannot build the family; failed where the build itself fails.  Programs are
started with tests/support/programs.py: every thread parked before a test
looks at them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.support.builds import FAMILIES, build
from tests.support.programs import READY_TIMEOUT, RunningProgram, RunProgram, start_program

# -- no network unless a test asks --------------------------------------------------------


@pytest.fixture(autouse=True, scope="session")
def _no_debuginfod_servers() -> Iterator[None]:
    """Takes away a DEBUGINFOD_URLS this machine's profile set (Debian's points at
    debuginfod.debian.net): a plain backtrace of a stripped library would ask it.
    The debuginfod tests set their own servers."""
    urls = os.environ.pop("DEBUGINFOD_URLS", None)
    yield
    if urls is not None:
        os.environ["DEBUGINFOD_URLS"] = urls


# -- the test program families --------------------------------------------------------------


@pytest.fixture(scope="session")
def testprogs_build() -> Path:
    """testprogs/build: threads, recurse, sighandler, realign, plt, cxxthrow, sframe, vforker…"""
    return build("testprogs")


@pytest.fixture(scope="session")
def crash_build() -> Path:
    """testprogs/crash (the folder): build/, and build-aarch64/ with the cross compiler."""
    return build("crash").parent


@pytest.fixture(scope="session")
def remote_build() -> Path:
    """testprogs/remote (the folder): build/, and build-aarch64/ with the cross compiler."""
    return build("remote").parent


@pytest.fixture(scope="session")
def fallback_build() -> Path:
    """testprogs/fallback/build: programs without unwind tables, corrupt stacks."""
    return build("fallback")


@pytest.fixture(scope="session")
def lines_build() -> Path:
    """testprogs/lines/build: the --lines program in every DWARF shape."""
    return build("lines")


@pytest.fixture(scope="session")
def jit_build() -> Path:
    """testprogs/jit/build: code generated at run time (x86_64, libunwind-dev)."""
    return build("jit")


@pytest.fixture(scope="session")
def macho_build() -> Path:
    """testprogs/macho/build: chain-x86_64 and chain-arm64, Mach-O (clang-16, lld-16)."""
    return build("macho")


@pytest.fixture(scope="session")
def riscv64_build() -> Path:
    """testprogs/riscv64/build: threads, sighandler, recurse, deepstacks, remote, crash."""
    return build("riscv64")


@pytest.fixture(scope="session")
def go_build() -> Path:
    """testprogs/go/build: goroutines, built by the Go toolchain."""
    return build("go")


@pytest.fixture(scope="session")
def lld_build() -> Path:
    """testprogs/lld/build, where each test builds the one program it needs.

    The family mixes compilers (clang++-16, rustc): ``build("lld", "build/NAME")``
    skips only the tests of a program whose compiler is missing.
    """
    return FAMILIES["lld"].folder / "build"


# -- running them ---------------------------------------------------------------------------


@pytest.fixture
def run_program(testprogs_build: Path) -> Iterator[RunProgram]:
    """Start test programs by name; each is killed and reaped when the test ends.

    ``run_program("threads-O2", "spin", busy={"spinner"})`` returns a
    RunningProgram once "ready" was printed and every thread sleeps (threads
    named in ``busy`` may run instead).
    """
    started: list[RunningProgram] = []

    def run(
        name: str, *args: str | int, busy: Iterable[str] = (), timeout: float = READY_TIMEOUT
    ) -> RunningProgram:
        program = start_program(testprogs_build, name, *args, busy=busy, timeout=timeout)
        started.append(program)
        return program

    yield run
    for program in started:
        program.stop()


# -- the oracles ----------------------------------------------------------------------------


def _ptrace_blocked() -> bool:
    """Tell whether Yama forbids every ptrace attach (scope 3): no tracer can work."""
    try:
        return Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip() == "3"
    except FileNotFoundError:
        return False


def _require_tool(name: str) -> str:
    """Path of an oracle tool, or skip the test with the reason."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    if _ptrace_blocked():
        pytest.skip("ptrace attach is disabled (kernel.yama.ptrace_scope = 3)")
    return path


@pytest.fixture(scope="session")
def gdb() -> str:
    """Path of gdb, for the gdb oracle; skips the test if it is missing."""
    return _require_tool("gdb")


@pytest.fixture(scope="session")
def eu_stack() -> str:
    """Path of eu-stack (elfutils), for the eu-stack oracle; skips if missing."""
    return _require_tool("eu-stack")
