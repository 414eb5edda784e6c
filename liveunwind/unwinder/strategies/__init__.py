"""What the stepper tries when no unwind table covers a pc.

Each strategy is a pure function of the current registers and three
callables the stepper supplies, so none of them knows whether it runs on a
live process, a snapshot or a core:

``read(address, size) -> bytes``
    target memory (the stack); raises MemoryReadError.
``is_code(address) -> bool``
    the address lies in an executable mapping or a registered JIT range.
``code_reader(address, size) -> bytes``
    machine code at an address, from the mapped file or from memory; raises
    MemoryReadError (or returns fewer bytes) when it has none.

They return the caller's registers (only pc, sp and fp: everything else is
unknown after a guess) or None, and explain a refusal through an optional
``notes`` list so ``--verbose`` can say why a fallback was not taken.

- :mod:`.framepointer`: the rbp chain / aarch64 frame records, every link checked.
- :mod:`.leaf`: the first frame of a function that has not set up a frame yet.
- :mod:`.scan`: a bounded search of the stack for a return address that
  follows a call instruction.
"""

from __future__ import annotations

from collections.abc import Callable

from liveunwind.arch.base import ReadMemory

__all__ = ["CodeReader", "IsCode", "ReadMemory", "note"]

#: True when an address is executable code of the target.
IsCode = Callable[[int], bool]
#: Reads machine code (file or memory); raises MemoryReadError or returns short.
CodeReader = Callable[[int, int], bytes]


def note(notes: list[str] | None, text: str) -> None:
    """Records why a strategy refused, when the caller asked to know."""
    if notes is not None:
        notes.append(text)
