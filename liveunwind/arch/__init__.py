"""Architecture descriptions: register numbering and the few facts the stepper needs.

Registers are keyed by DWARF register number everywhere in liveunwind, so the
rules decoded from unwind tables apply to them directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from liveunwind.errors import UsageError

#: Reads ``size`` bytes of target memory at an address (raises MemoryReadError).
ReadMemory = Callable[[int, int], bytes]


@dataclass(frozen=True)
class Arch:
    """What the stepper and the targets need to know about one architecture."""

    name: str
    elf_machine: int
    #: DWARF numbers of the program counter, stack pointer and frame pointer.
    pc: int
    sp: int
    fp: int
    #: The DWARF return-address column of a typical CIE.
    return_address: int
    register_names: dict[int, str]
    #: Bytes below the stack pointer a leaf function may use without moving it.
    red_zone: int
    #: Machine code of the kernel's sigreturn trampoline (the bytes at its pc).
    sigreturn_code: bytes
    #: Recovers the interrupted registers from the signal frame at ``sp``.
    signal_frame_reader: Callable[[ReadMemory, int], dict[int, int]] = field(repr=False)
    #: Clears pointer-authentication bits from a code address.
    strip_pointer_auth: Callable[[int], int] = field(repr=False, default=lambda value: value)
    word_size: int = 8

    def register_name(self, number: int) -> str:
        return self.register_names.get(number, f"r{number}")

    def register_number(self, name: str) -> int:
        for number, known in self.register_names.items():
            if known == name:
                return number
        raise KeyError(name)


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
