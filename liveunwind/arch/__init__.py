"""Architecture descriptions: register numbering and the few facts the stepper needs.

Registers are keyed by DWARF register number everywhere in liveunwind, so the
rules decoded from unwind tables apply to them directly.
"""

from __future__ import annotations

from collections.abc import Callable

from liveunwind.errors import UsageError

#: Reads ``size`` bytes of target memory at an address (raises MemoryReadError).
ReadMemory = Callable[[int, int], bytes]


def _no_pointer_auth(value: int) -> int:
    return value


class Arch:
    """What the stepper and the targets need to know about one architecture.

    One instance per architecture (``X86_64``, ``AARCH64``), compared by identity.
    """

    __slots__ = (
        "elf_machine",
        "fp",
        "name",
        "pc",
        "red_zone",
        "register_names",
        "return_address",
        "signal_frame_reader",
        "sigreturn_code",
        "sp",
        "strip_pointer_auth",
        "word_size",
    )

    def __init__(
        self,
        *,
        name: str,
        elf_machine: int,
        pc: int,
        sp: int,
        fp: int,
        return_address: int,
        register_names: dict[int, str],
        red_zone: int,
        sigreturn_code: bytes,
        signal_frame_reader: Callable[[ReadMemory, int], dict[int, int]],
        strip_pointer_auth: Callable[[int], int] = _no_pointer_auth,
        word_size: int = 8,
    ) -> None:
        self.name = name
        self.elf_machine = elf_machine
        #: DWARF numbers of the program counter, stack pointer and frame pointer.
        self.pc = pc
        self.sp = sp
        self.fp = fp
        #: The DWARF return-address column of a typical CIE.
        self.return_address = return_address
        self.register_names = register_names
        #: Bytes below the stack pointer a leaf function may use without moving it.
        self.red_zone = red_zone
        #: Machine code of the kernel's sigreturn trampoline (the bytes at its pc).
        self.sigreturn_code = sigreturn_code
        #: Recovers the interrupted registers from the signal frame at ``sp``.
        self.signal_frame_reader = signal_frame_reader
        #: Clears pointer-authentication bits from a code address.
        self.strip_pointer_auth = strip_pointer_auth
        self.word_size = word_size

    def __repr__(self) -> str:
        return f"<Arch {self.name}>"

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
