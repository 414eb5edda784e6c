"""Stack scanning: the first word above sp that is a return address.

A word on the stack is taken for a return address only if it points into
executable code *and* the bytes just before it decode as a call instruction
whose end is exactly that address — what a ``call``/``bl`` leaves behind.
For direct calls the call's target must be code too.  Stale return addresses
of earlier, already-returned calls pass these checks as well, so a step of
the walk also asks :mod:`.callers` whether the call could have entered the
function the walk is in (a direct call must target it); scanned frames
still carry the lowest trust.  Under ``--verbose`` each refused candidate is
noted with its slot, its value and why (the first
:data:`NOTED_REFUSALS` of a scan).

The scan stays on the stack the walk is on: the mapping holding sp (the
stepper's ``walk.stack_range``).  It does not scan a stack a frame pointer
led the walk to (a runtime's, such as an Erlang process's inside a heap
mapping): where that stack ends nothing says, and past it lies stale heap.

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
from liveunwind.unwinder.strategies.callers import checked_call, code_before

#: Words one scan examines at most (16 KiB): frames with big local buffers
#: (PATH_MAX, BUFSIZ) must not hide their caller.
DEFAULT_WINDOW = 2048
_PAGE = 4096
#: Refused candidates one scan notes at most under ``--verbose`` (then a count).
NOTED_REFUSALS = 8


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
) -> CallSite | None:
    """The call instruction that ``return_address`` follows, or None.

    Reads the code before ``return_address`` through ``code_reader``; a
    direct call must target code when ``check_target`` is set.
    """
    code = code_before(code_reader, return_address, arch.longest_call)
    for site in arch.call_sites(return_address, code):
        if check_target and site.target is not None and not is_code(site.target):
            continue
        return site
    return None


# -- scanning ----------------------------------------------------------------


def step(walk: Walk) -> dict[int, int] | None:
    """The caller of the frame whose return address is the first one found above sp.

    The scan stops at the end of the thread's stack and charges the walk's
    budget; the call before a candidate must be one that could have entered
    the function holding the pc (:func:`.callers.checked_call`).
    """
    arch, registers = walk.arch, walk.registers
    sp, pc = registers.get(arch.sp), registers.get(arch.pc)
    if sp is None:
        return None
    if walk.foreign_stack:
        note(walk.notes, f"scan: sp {sp:#x} is on a stack a frame pointer led to, of unknown end")
        return None
    lookup = None if pc is None else (pc if walk.exact_pc else pc - 1)

    def refuse(return_address: int) -> str | None:
        if lookup is None:
            return None
        verdict, why = checked_call(walk, return_address, lookup)
        return why if verdict is None else None

    found = find_return_address(
        arch,
        sp,
        walk.read,
        walk.is_code,
        walk.code_reader,
        budget=walk.budget,
        stack_end=walk.stack_range[1] if walk.stack_range else None,
        refuse=refuse,
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
    refuse: Callable[[int], str | None] | None = None,
    notes: list[str] | None = None,
) -> tuple[int, int] | None:
    """``(slot address, return address)`` of the first return address at or above ``sp``.

    Examines at most ``window`` words, never past ``stack_end`` (exclusive),
    and charges every word to ``budget``.  Pointer-authentication bits are
    stripped from candidates (signed return addresses saved by ``pac-ret``
    code).  ``refuse(return_address)`` (if given) says why a candidate that
    follows a call is not the caller, or None to take it; each refusal is
    noted.  None when nothing in range qualifies, the stack becomes
    unreadable or the budget runs out (``notes`` says which).
    """
    refused = 0
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
                )
                is not None
            ):
                why = None if refuse is None else refuse(candidate)
                if why is None:
                    budget.give_back(granted - index - 1)
                    return address + index * word, candidate
                refused += 1
                if refused <= NOTED_REFUSALS:
                    note(notes, f"scan: [{address + index * word:#x}] = {candidate:#x} {why}")
        address += granted * word
        if granted < wanted:
            note(notes, f"scan: budget exhausted at {address:#x}")
            return None
    more = f" ({refused - NOTED_REFUSALS} more refused)" if refused > NOTED_REFUSALS else ""
    note(notes, f"scan: no return address within {window} words above sp {sp:#x}{more}")
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
