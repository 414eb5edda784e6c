"""The architectures liveunwind unwinds, and how each is found from what a file or stub says.

Registers are keyed by DWARF register number everywhere in liveunwind, so the
rules decoded from unwind tables apply to them directly.  Everything that
differs between architectures is asked of an :class:`Arch`; adding one is a
folder beside ``x86_64/`` that builds its Arch, and one entry in
``_ENTRIES`` naming what files, stubs and tables call it.
"""

from __future__ import annotations

import sys

from liveunwind.arch.base import WORD_MASK, Arch, ReadMemory
from liveunwind.errors import UsageError

__all__ = [
    "WORD_MASK",
    "Arch",
    "ReadMemory",
    "arch_by_elf_machine",
    "arch_by_gdb_architecture",
    "arch_by_macho_cpu_type",
    "arch_by_name",
    "arch_by_sframe_abi",
    "architectures",
    "host_arch",
    "supported",
]


class _Entry:
    """One architecture before its folder is loaded: the names files, stubs and tables give it.

    Its Arch (``liveunwind.arch.<name>``, an attribute named ``<name>`` in
    capitals) says the same; tests/unit/test_arch_confined.py checks that
    they agree.  The folders are loaded when first asked for: a backtrace
    needs one architecture, and loading all three cost 3.0 ms of a 34 ms
    cold ``liveunwind pid`` (1.0 ms for the one it needs; -X importtime).
    """

    __slots__ = (
        "aliases",
        "elf_machine",
        "gdb_architectures",
        "macho_cpu_type",
        "name",
        "sframe_abis",
    )

    def __init__(
        self,
        name: str,
        *,
        elf_machine: int,
        gdb_architectures: tuple[str, ...],
        aliases: tuple[str, ...] = (),
        sframe_abis: tuple[int, ...] = (),
        macho_cpu_type: int | None = None,
    ) -> None:
        self.name = name
        self.aliases = aliases
        self.elf_machine = elf_machine
        self.gdb_architectures = gdb_architectures
        self.sframe_abis = sframe_abis
        self.macho_cpu_type = macho_cpu_type


#: Every architecture liveunwind unwinds, in the order messages list them.
_ENTRIES = (
    _Entry(
        "x86_64",
        aliases=("amd64",),
        elf_machine=62,
        gdb_architectures=("i386:x86-64",),
        sframe_abis=(3,),
        macho_cpu_type=0x01000007,
    ),
    _Entry(
        "aarch64",
        aliases=("arm64",),
        elf_machine=183,
        gdb_architectures=("aarch64",),
        sframe_abis=(1, 2),
        macho_cpu_type=0x0100000C,
    ),
    _Entry("riscv64", elf_machine=243, gdb_architectures=("riscv:rv64",)),
)

_BY_NAME = {name: entry for entry in _ENTRIES for name in (entry.name, *entry.aliases)}
_BY_ELF_MACHINE = {entry.elf_machine: entry for entry in _ENTRIES}
_BY_MACHO_CPU_TYPE = {entry.macho_cpu_type: entry for entry in _ENTRIES if entry.macho_cpu_type}
_BY_GDB_ARCHITECTURE = {name: entry for entry in _ENTRIES for name in entry.gdb_architectures}
_BY_SFRAME_ABI = {abi: entry for entry in _ENTRIES for abi in entry.sframe_abis}
_LOADED: dict[str, Arch] = {}


def _load(entry: _Entry) -> Arch:
    arch = _LOADED.get(entry.name)
    if arch is None:
        # __import__, not importlib.import_module: importing importlib (and warnings) would
        # cost a cold run 0.4 ms.
        name = f"liveunwind.arch.{entry.name}"
        __import__(name)
        arch = getattr(sys.modules[name], entry.name.upper())
        _LOADED[entry.name] = arch
    return arch


def _found(entry: _Entry | None) -> Arch | None:
    return None if entry is None else _load(entry)


def architectures() -> tuple[Arch, ...]:
    """Every architecture liveunwind unwinds (all their folders loaded)."""
    return tuple(_load(entry) for entry in _ENTRIES)


def arch_by_name(name: str) -> Arch:
    """The architecture called ``name`` (``x86_64``, ``amd64``, ``aarch64``, ``arm64``…)."""
    arch = _found(_BY_NAME.get(name))
    if arch is None:
        raise UsageError(f"unsupported architecture: {name}")
    return arch


def arch_by_elf_machine(machine: int) -> Arch:
    """The architecture of an ELF ``e_machine`` value."""
    arch = _found(_BY_ELF_MACHINE.get(machine))
    if arch is None:
        raise UsageError(f"unsupported ELF machine {machine}")
    return arch


def arch_by_macho_cpu_type(cpu_type: int) -> Arch | None:
    """The architecture of a Mach-O ``cputype``, or None if liveunwind has none."""
    return _found(_BY_MACHO_CPU_TYPE.get(cpu_type))


def arch_by_gdb_architecture(name: str) -> Arch | None:
    """The architecture a GDB target description's ``<architecture>`` names, or None."""
    return _found(_BY_GDB_ARCHITECTURE.get(name))


def arch_by_sframe_abi(abi: int) -> Arch | None:
    """The architecture of an SFrame header's ABI/arch id, or None."""
    return _found(_BY_SFRAME_ABI.get(abi))


def host_arch() -> Arch:
    """The architecture liveunwind runs on (that of every live target)."""
    import os

    return arch_by_name(os.uname().machine)


def supported() -> str:
    """The architectures' names for a message: ``x86_64, aarch64 and riscv64``."""
    *others, last = [entry.name for entry in _ENTRIES]
    return f"{', '.join(others)} and {last}" if others else last
