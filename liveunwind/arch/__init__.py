"""The architectures liveunwind unwinds, and how each is found from what a file or stub says.

Registers are keyed by DWARF register number everywhere in liveunwind, so the
rules decoded from unwind tables apply to them directly.  Everything that
differs between architectures is asked of an :class:`Arch`; adding one is a
folder beside ``x86_64/`` that builds its Arch, and one entry in
:data:`ARCHITECTURES`.
"""

from __future__ import annotations

from liveunwind.arch.aarch64 import AARCH64
from liveunwind.arch.base import WORD_MASK, Arch, ReadMemory
from liveunwind.arch.riscv64 import RISCV64
from liveunwind.arch.x86_64 import X86_64
from liveunwind.errors import UsageError

__all__ = [
    "ARCHITECTURES",
    "WORD_MASK",
    "Arch",
    "ReadMemory",
    "arch_by_elf_machine",
    "arch_by_gdb_architecture",
    "arch_by_macho_cpu_type",
    "arch_by_name",
    "arch_by_sframe_abi",
    "host_arch",
    "supported",
]

#: Every architecture liveunwind unwinds, in the order messages list them.
ARCHITECTURES: tuple[Arch, ...] = (X86_64, AARCH64, RISCV64)

_BY_NAME = {name: arch for arch in ARCHITECTURES for name in (arch.name, *arch.aliases)}
_BY_ELF_MACHINE = {arch.elf_machine: arch for arch in ARCHITECTURES}
_BY_MACHO_CPU_TYPE = {arch.macho.cpu_type: arch for arch in ARCHITECTURES if arch.macho}
_BY_GDB_ARCHITECTURE = {name: arch for arch in ARCHITECTURES for name in arch.gdb.architectures}
_BY_SFRAME_ABI = {abi: arch for arch in ARCHITECTURES for abi in arch.sframe_abis}


def arch_by_name(name: str) -> Arch:
    """The architecture called ``name`` (``x86_64``, ``amd64``, ``aarch64``, ``arm64``…)."""
    arch = _BY_NAME.get(name)
    if arch is None:
        raise UsageError(f"unsupported architecture: {name}")
    return arch


def arch_by_elf_machine(machine: int) -> Arch:
    """The architecture of an ELF ``e_machine`` value."""
    arch = _BY_ELF_MACHINE.get(machine)
    if arch is None:
        raise UsageError(f"unsupported ELF machine {machine}")
    return arch


def arch_by_macho_cpu_type(cpu_type: int) -> Arch | None:
    """The architecture of a Mach-O ``cputype``, or None if liveunwind has none."""
    return _BY_MACHO_CPU_TYPE.get(cpu_type)


def arch_by_gdb_architecture(name: str) -> Arch | None:
    """The architecture a GDB target description's ``<architecture>`` names, or None."""
    return _BY_GDB_ARCHITECTURE.get(name)


def arch_by_sframe_abi(abi: int) -> Arch | None:
    """The architecture of an SFrame header's ABI/arch id, or None."""
    return _BY_SFRAME_ABI.get(abi)


def host_arch() -> Arch:
    """The architecture liveunwind runs on (that of every live target)."""
    import os

    return arch_by_name(os.uname().machine)


def supported() -> str:
    """The architectures' names for a message: ``x86_64, aarch64 and riscv64``."""
    *others, last = [arch.name for arch in ARCHITECTURES]
    return f"{', '.join(others)} and {last}" if others else last
