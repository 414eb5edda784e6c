"""Fixtures several system tests share: cores of testprogs/crash (made once), Go's program."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cores import MakeCore, crash, kernel_writes_cores_here
from tests.support.paths import AARCH64_SYSROOT


@pytest.fixture(scope="session")
def kernel_core(crash_build: Path, tmp_path_factory: pytest.TempPathFactory) -> MakeCore:
    """kernel_core(variant, mode) -> a core the kernel wrote of crash-<variant> <mode>."""
    reason = kernel_writes_cores_here()
    if reason is not None:
        pytest.skip(reason)
    made: dict[tuple[str, str], Path] = {}

    def make(variant: str, mode: str) -> Path:
        if (variant, mode) not in made:
            folder = tmp_path_factory.mktemp(f"kernel-{variant}-{mode}")
            exe = crash_build / "build" / variant
            made[variant, mode] = crash(folder, [str(exe), mode], glob="core*")
        return made[variant, mode]

    return make


@pytest.fixture(scope="session")
def qemu_core(crash_build: Path, tmp_path_factory: pytest.TempPathFactory) -> MakeCore:
    """qemu_core(variant, mode) -> the guest core QEMU user mode wrote of an aarch64 crash."""
    for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    made: dict[tuple[str, str], Path] = {}

    def make(variant: str, mode: str) -> Path:
        if (variant, mode) not in made:
            folder = tmp_path_factory.mktemp(f"qemu-{variant}-{mode}")
            # QEMU dies of the guest's signal after writing the guest core; a
            # folder named "core" keeps the kernel from also dumping QEMU itself.
            (folder / "core").mkdir()
            exe = crash_build / "build-aarch64" / variant
            command = ["qemu-aarch64", "-L", str(AARCH64_SYSROOT), str(exe), mode]
            made[variant, mode] = crash(folder, command, glob="qemu_*.core")
        return made[variant, mode]

    return make


@pytest.fixture(scope="session")
def go_program(go_build: Path) -> Path:
    """testprogs/go's one program: goroutines that spin and goroutines parked in the scheduler."""
    return go_build / "goroutines"
