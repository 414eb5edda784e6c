"""What the stepper and the targets need to know about one architecture: the Arch record.

Kept apart from the package's ``__init__`` so that the per-architecture files,
which build Arch instances, and the package, which picks one of them, do not
import each other.
"""

from __future__ import annotations

from collections.abc import Callable

#: Reads ``size`` bytes of target memory at an address (raises MemoryReadError).
ReadMemory = Callable[[int, int], bytes]

#: Addresses and registers are 64-bit on every architecture liveunwind reads:
#: arithmetic on them (CFA + offset, load bias + symbol) wraps with this mask.
WORD_MASK = (1 << 64) - 1


def _no_pointer_auth(value: int) -> int:
    return value


class Arch:
    """What the stepper and the targets need to know about one architecture.

    One instance per architecture (``X86_64``, ``AARCH64``), compared by identity.
    """

    __slots__ = (
        "elf_machine",
        "fp",
        "link_register",
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
        link_register: int | None = None,
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
        #: The register a call leaves the return address in (aarch64's LR), or
        #: None where the call pushes it onto the stack (x86_64).
        self.link_register = link_register
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
