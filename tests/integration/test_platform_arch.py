"""The suite runs on the machine it claims to: the arch of the platform docker/ set up."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

import liveunwind
from liveunwind.arch import host_arch
from tests.support.platform import MACHINES, UNDER_QEMU_USER

pytestmark = pytest.mark.integration

#: ELF e_machine by ``uname -m``.
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}


def elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(header[18:20], "little")


def test_machine_arch_is_the_platforms(platform_name: str, testprogs_build: Path) -> None:
    """uname, the interpreter, liveunwind's host arch and the test programs are all PLATFORM's."""
    machine = MACHINES[platform_name]
    assert platform.machine() == machine
    assert host_arch().name == machine
    assert elf_machine(Path(sys.executable).resolve()) == ELF_MACHINES[machine]
    assert elf_machine(testprogs_build / "threads-O2") == ELF_MACHINES[machine]
    # The installed package, not a checkout beside the tests.
    assert "site-packages" in str(Path(liveunwind.__file__).resolve())
    cpu = Path("/proc/cpuinfo").read_text()
    if platform_name == "arm64-vm":
        # A real arm64 kernel (QEMU system emulation): pointer authentication is on.
        assert "paca" in cpu.split(), "the VM's CPU has no pointer authentication (-cpu max)"
    elif UNDER_QEMU_USER:
        # QEMU 7.2 user mode passes the x86_64 host's /proc/cpuinfo through.
        assert "flags" in cpu and "Features" not in cpu, "not under QEMU user mode on x86_64"
