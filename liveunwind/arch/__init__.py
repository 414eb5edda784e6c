"""Architecture descriptions: register numbering and the few facts the stepper needs.

Registers are keyed by DWARF register number everywhere in liveunwind, so the
rules decoded from unwind tables apply to them directly.
"""

from __future__ import annotations

from liveunwind.arch.base import WORD_MASK, Arch, ReadMemory
from liveunwind.errors import UsageError

__all__ = ["WORD_MASK", "Arch", "ReadMemory", "arch_by_elf_machine", "arch_by_name", "host_arch"]


def arch_by_name(name: str) -> Arch:
    """Returns the architecture called ``name`` (``x86_64`` or ``aarch64``)."""
    if name in ("x86_64", "amd64"):
        from liveunwind.arch.x86_64 import X86_64

        return X86_64
    if name in ("aarch64", "arm64"):
        from liveunwind.arch.aarch64 import AARCH64

        return AARCH64
    raise UsageError(f"unsupported architecture: {name}")


def arch_by_elf_machine(machine: int) -> Arch:
    """Returns the architecture of an ELF ``e_machine`` value."""
    names = {62: "x86_64", 183: "aarch64"}
    if machine not in names:
        raise UsageError(f"unsupported ELF machine {machine}")
    return arch_by_name(names[machine])


def host_arch() -> Arch:
    """The architecture liveunwind runs on (that of every live target)."""
    import os

    return arch_by_name(os.uname().machine)
