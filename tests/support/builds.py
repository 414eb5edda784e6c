"""The test program families under testprogs/, and the one way they are built.

The policy: a family this machine cannot build — a tool it needs is not
installed, or its programs are written for another machine — makes the tests
that need it skip, saying which.  Once the tools are there, a failed build is
a failure: these are our own programs, and a compiler that rejects them is
something to fix, not to skip past.

Each family has one session fixture in tests/conftest.py (``<family>_build``);
code outside a fixture (the fuzz targets) calls :func:`build` itself.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.paths import TESTPROGS


@dataclass(frozen=True)
class Family:
    """One folder of test programs with its Makefile, and what building it takes."""

    folder: Path
    tools: tuple[str, ...]
    """Programs ``make`` runs for every target."""
    machine: str | None = None
    """The one machine (``uname -m``) the programs are written for, if they are not portable."""
    files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per make target: files besides the tools it needs (headers of a -dev package)."""
    target_tools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per make target: the tools it needs instead of ``tools`` (a family of several compilers)."""

    @property
    def name(self) -> str:
        return str(self.folder.relative_to(TESTPROGS.parent))

    def cannot_build(self, target: str | None) -> str | None:
        """Why this machine cannot build ``target`` (None: the whole family), or None if it can."""
        if self.machine is not None and platform.machine() != self.machine:
            return f"its programs are written for {self.machine}, this is {platform.machine()}"
        if target is None:  # the whole family: every tool, every file
            tools = {"make", *self.tools}
            files = {path for paths in self.files.values() for path in paths}
        else:
            tools = {"make", *self.target_tools.get(target, self.tools)}
            files = set(self.files.get(target, ()))
        missing = sorted(tool for tool in tools if shutil.which(tool) is None)
        missing += sorted(path for path in files if not Path(path).exists())
        return f"{', '.join(missing)} not installed" if missing else None


_MULTIARCH = f"{platform.machine()}-linux-gnu"
_LIBUNWIND = "/usr/include/x86_64-linux-gnu/libunwind-dynamic.h"

FAMILIES = {
    # threads, recurse, sighandler, realign, plt, cxxthrow, sframe, the hostile
    # ones (vforker, churn, deepstacks), profiled; ``static``: anonexec-static
    "testprogs": Family(
        TESTPROGS, ("gcc", "g++"), files={"static": (f"/usr/lib/{_MULTIARCH}/libc.a",)}
    ),
    # crash: kernel and QEMU cores; build-aarch64/ too when the cross compiler exists
    "crash": Family(TESTPROGS / "crash", ("gcc",)),
    # remote: the GDB-stub targets and libchain.so; build-aarch64/ as for crash
    "remote": Family(TESTPROGS / "remote", ("gcc",)),
    # fallback: frame pointers, scanning, corrupt stacks
    "fallback": Family(TESTPROGS / "fallback", ("gcc", "objcopy")),
    # lines: one program in every DWARF shape --lines reads
    "lines": Family(TESTPROGS / "lines", ("gcc", "objcopy")),
    # jit: code generated at run time, x86_64 only; jit-dynamic and jit-table link libunwind
    "jit": Family(
        TESTPROGS / "jit",
        ("gcc",),
        machine="x86_64",
        files={"build/jit-dynamic": (_LIBUNWIND,), "build/jit-table": (_LIBUNWIND,)},
    ),
    # macho: Mach-O binaries for compact unwind, built without an Apple SDK
    "macho": Family(TESTPROGS / "macho", ("clang-16", "clang++-16", "ld64.lld-16")),
    # riscv64: the host programs built for riscv64 (run under qemu-riscv64), and sigframe
    "riscv64": Family(
        TESTPROGS / "riscv64",
        ("riscv64-linux-gnu-gcc",),
        files={"all": ("/usr/riscv64-linux-gnu/lib/libc.so.6",)},
    ),
    # go: goroutines, built by the Go toolchain
    "go": Family(TESTPROGS / "go", ("go",)),
    # lld: programs linked by lld, one compiler each
    "lld": Family(
        TESTPROGS / "lld",
        ("clang++-16", "clang-16", "ld.lld-16", "rustc"),
        target_tools={
            "build/lld-cxx": ("clang++-16", "ld.lld-16"),
            "build/lld-rust": ("rustc", "clang-16", "ld.lld-16"),
        },
    ),
}


def build(family: str, target: str | None = None) -> Path:
    """Build one family of test programs (or one make ``target`` of it); return its build/.

    Skips, saying why, where this machine cannot build it; fails with make's
    output where the build itself fails.
    """
    what = FAMILIES[family]
    label = what.name if target is None else f"{what.name}/{target}"
    reason = what.cannot_build(target)
    if reason is not None:
        pytest.skip(f"cannot build {label} here: {reason}")
    command = ["make", "-C", str(what.folder), "-j2", *([target] if target else [])]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(
            f"building {label} failed (our own test program: a failure, not a skip):\n"
            f"{result.stdout}\n{result.stderr}",
            pytrace=False,
        )
    return what.folder / "build"
