"""Stack scanning: the first word above sp that is a return address.

A word on the stack is taken for a return address only if it points into
executable code *and* the bytes just before it decode as a call instruction
whose end is exactly that address — what a ``call``/``bl`` leaves behind.
For direct calls the call's target must be code too.  Stale return addresses
of earlier, already-returned calls pass these checks as well, which is why
scanned frames carry the lowest trust; the ``confirm`` hook lets the stepper
add what only it knows (e.g. that a direct call targets the function the
callee's pc lies in).

Scanning is bounded twice: a window per scan and a :class:`ScanBudget` shared
by all scans of one thread, so a corrupt or huge stack costs at most
``budget`` words of reads and checks.

The call instructions are each architecture's to decode
(``Arch.call_sites``, in ``liveunwind/arch/<name>/instructions.py``, which
lists the forms recognised).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from liveunwind.arch import Arch
from liveunwind.arch.base import CallSite
from liveunwind.errors import MemoryReadError
from liveunwind.unwinder.strategies import (
    CodeReader,
    IsCode,
    ReadMemory,
    ScanBudget,
    Walk,
    note,
)

#: Words one scan examines at most (16 KiB): frames with big local buffers
#: (PATH_MAX, BUFSIZ) must not hide their caller.
DEFAULT_WINDOW = 2048
_PAGE = 4096


# -- call decoding -----------------------------------------------------------


def calls_before(arch: Arch, return_address: int, code: bytes) -> list[CallSite]:
    """Every call instruction that could end at ``return_address``.

    ``code`` holds the bytes just before ``return_address`` (its last byte at
    ``return_address - 1``); ``arch.longest_call`` bytes suffice (7 on
    x86_64, 4 on aarch64).  More than one decoding is possible on x86_64,
    whose instructions have no fixed start.
    """
    return list(arch.call_sites(return_address, code))


def call_before(
    arch: Arch,
    return_address: int,
    is_code: IsCode,
    code_reader: CodeReader,
    *,
    check_target: bool = True,
    confirm: Callable[[CallSite], bool] | None = None,
) -> CallSite | None:
    """The call instruction that ``return_address`` follows, or None.

    Reads the code before ``return_address`` through ``code_reader``; a
    direct call must target code when ``check_target`` is set, and
    ``confirm`` (if given) has the last word on each decoding.
    """
    code = code_before(code_reader, return_address, arch.longest_call)
    for site in arch.call_sites(return_address, code):
        if check_target and site.target is not None and not is_code(site.target):
            continue
        if confirm is None or confirm(site):
            return site
    return None


def code_before(code_reader: CodeReader, end: int, size: int) -> bytes:
    """Up to ``size`` bytes of code ending at ``end``, fewer if the page before is not code.

    ``end`` lies in an executable mapping, so the bytes from its page start
    on are readable even when the page before is not.
    """
    start = max(end - size, 0)
    try:
        return bytes(code_reader(start, end - start))
    except MemoryReadError:
        start = max(start, end - end % _PAGE)
        if start == end:
            return b""
        try:
            return bytes(code_reader(start, end - start))
        except MemoryReadError:
            return b""


# -- scanning ----------------------------------------------------------------


def step(walk: Walk) -> dict[int, int] | None:
    """The caller of the frame whose return address is the first one found above sp.

    The scan stops at the end of the thread's stack and charges the walk's
    budget; a direct call before a candidate must target code and, where the
    walk can tell, a function's first instruction.
    """
    arch, registers = walk.arch, walk.registers
    sp = registers.get(arch.sp)
    if sp is None:
        return None
    found = find_return_address(
        arch,
        sp,
        walk.read,
        walk.is_code,
        walk.code_reader,
        budget=walk.budget,
        stack_end=walk.stack_range[1] if walk.stack_range else None,
        confirm=walk.confirm,
        notes=walk.notes,
    )
    if found is None:
        return None
    slot, return_address = found
    return caller_registers(arch, registers, slot, return_address, walk.read)


def find_return_address(
    arch: Arch,
    sp: int,
    read: ReadMemory,
    is_code: IsCode,
    code_reader: CodeReader,
    *,
    budget: ScanBudget,
    window: int = DEFAULT_WINDOW,
    stack_end: int | None = None,
    check_target: bool = True,
    confirm: Callable[[CallSite], bool] | None = None,
    notes: list[str] | None = None,
) -> tuple[int, int] | None:
    """``(slot address, return address)`` of the first return address at or above ``sp``.

    Examines at most ``window`` words, never past ``stack_end`` (exclusive),
    and charges every word to ``budget``.  Pointer-authentication bits are
    stripped from candidates (signed return addresses saved by ``pac-ret``
    code).  None when nothing in range qualifies, the stack becomes
    unreadable or the budget runs out (``notes`` says which).
    """
    word = arch.word_size
    address = -(-sp // word) * word
    limit = address + window * word
    if stack_end is not None:
        limit = min(limit, stack_end)
    unpack = struct.Struct(f"<{'Q' if word == 8 else 'I'}").iter_unpack
    while address + word <= limit:
        # Read up to the next page boundary: pages are readable or not as a whole.
        chunk_end = min(limit, (address // _PAGE + 1) * _PAGE)
        wanted = (chunk_end - address) // word
        granted = budget.take(wanted)
        if granted == 0:
            note(notes, f"scan: budget exhausted at {address:#x}")
            return None
        try:
            data = read(address, granted * word)
        except MemoryReadError as error:
            note(notes, f"scan: stack unreadable at {error.address:#x}")
            return None
        for index, (value,) in enumerate(unpack(data)):
            candidate = arch.strip_pointer_auth(value)
            if is_code(candidate) and (
                call_before(
                    arch,
                    candidate,
                    is_code,
                    code_reader,
                    check_target=check_target,
                    confirm=confirm,
                )
                is not None
            ):
                budget.give_back(granted - index - 1)
                return address + index * word, candidate
        address += granted * word
        if granted < wanted:
            note(notes, f"scan: budget exhausted at {address:#x}")
            return None
    note(notes, f"scan: no return address within {window} words above sp {sp:#x}")
    return None


def caller_registers(
    arch: Arch,
    registers: dict[int, int],
    slot: int,
    return_address: int,
    read: ReadMemory,
) -> dict[int, int]:
    """The caller's pc, sp and (a guess at) fp, for a return address found at ``slot``.

    The caller's sp is ``slot + word``: exact on x86_64 (``ret`` pops the
    slot), a lower bound on aarch64 (the slot is inside the callee's frame
    record).  The fp is a guess: a function that keeps a frame pointer saved
    the caller's right below the return address, so a plausible frame pointer
    there (aligned, above the slot) is taken; otherwise the fp is assumed
    untouched (it is callee-saved), which holds for code that never uses it.
    """
    word = arch.word_size
    caller = {arch.pc: return_address, arch.sp: slot + word}
    try:
        saved: int | None = int.from_bytes(read(slot - word, word), "little")
    except MemoryReadError:
        saved = None
    current = registers.get(arch.fp)
    if saved is not None and saved > slot and saved % word == 0:
        caller[arch.fp] = saved
    elif current is not None:
        caller[arch.fp] = current
    return caller
