"""The frame a function's own prologue builds, read from its start where no table covers the pc.

The architecture reads the code (``Arch.prologue``; riscv64's is
``liveunwind/arch/riscv64/prologue.py``) from the function's first
instruction to the pc, and says where the CFA is and where the caller's
registers are: in their slots on the stack, or still in the registers.  This
is how gdb walks riscv64 code without unwind tables, most of Debian's
riscv64 glibc.

Where the function starts, its symbol (or a JIT compiler's registration)
says.  Where nothing does (a stripped library's internal functions), the call
that entered the function can: a return address on the stack whose call is
a direct one (through the PLT entry's GOT slot, where it calls a PLT entry)
gives an entry, and it is taken only if the prologue read from there saved
the return address exactly in the slot that return address was found in.

A prologue read is a guess all the same (the code is assumed to keep to what
its prologue set up), so it is checked: the CFA may not lie below sp, the
return address must be code right after a call, and one the function still
holds in its link register must pass the leaf check's rule (not a return
address of a call the function made itself).  On an architecture without an
analysis it declines without a word.
"""

from __future__ import annotations

import struct

from liveunwind.arch.base import (
    PLT_CODE_SIZE,
    WORD_MASK,
    PrologueAnalysis,
    PrologueFrame,
    ReadCode,
)
from liveunwind.errors import MemoryReadError
from liveunwind.unwinder.strategies import CodeReader, Walk, note
from liveunwind.unwinder.strategies.callers import code_before
from liveunwind.unwinder.strategies.leaf import stale
from liveunwind.unwinder.strategies.scan import call_before

_PAGE = 4096
#: Words above sp searched for the return address of the call that entered a
#: function without a symbol (16 KiB, as a scan: frames with big buffers).
WINDOW = 2048
#: Entries whose prologue is read for one frame at most: a stack full of code
#: pointers costs this many analyses, not one per word.
MAX_ENTRIES = 32


def step(walk: Walk) -> dict[int, int] | None:
    """The caller's registers from the frame the function's prologue built, or None.

    The caller's sp is the CFA; its pc the return address; the registers the
    prologue saved come from their slots, the callee-saved ones it left
    alone are the frame's own.
    """
    arch = walk.arch
    analysis = arch.prologue
    function_at = walk.function_at
    if analysis is None or function_at is None:
        return None  # nothing reads the code here: not worth a note
    registers, notes = walk.registers, walk.notes
    pc = registers.get(arch.pc)
    sp = registers.get(arch.sp)
    if pc is None or sp is None:
        note(notes, "prologue: pc or sp is unknown")
        return None
    exact = walk.exact_pc
    read = _reader(walk.code_reader)
    function = function_at(pc if exact else pc - 1)
    if function is None:
        return _entered_by_call(walk, analysis, read, pc, sp)
    start, end = function
    found = analysis.frame(read, start, pc, exact, None if end is None else end - start)
    if isinstance(found, str):
        note(notes, f"prologue: {found} (function at {start:#x})")
        return None
    return _caller(walk, found, pc, sp)


def _caller(walk: Walk, found: PrologueFrame, pc: int, sp: int) -> dict[int, int] | None:
    """The caller's registers from a prologue's frame, checked; None (and a note) if implausible."""
    arch, registers, notes = walk.arch, walk.registers, walk.notes
    cfa = _cfa(registers, found)
    if cfa is None:
        note(notes, f"prologue: {arch.register_name(found.cfa_register)} is unknown")
        return None
    if cfa < sp:
        note(notes, f"prologue: CFA {cfa:#x} below sp {sp:#x}")
        return None
    caller = {arch.sp: cfa}
    word = arch.word_size
    for register, slot in found.saved:
        try:
            caller[register] = int.from_bytes(walk.read((cfa + slot) & WORD_MASK, word), "little")
        except MemoryReadError as error:
            note(notes, f"prologue: cannot read the stack at {error.address:#x}")
            return None
    for register in found.kept:
        value = registers.get(register)
        if value is not None:
            caller.setdefault(register, value)
    ra = arch.return_address
    ra_slot = next((slot for register, slot in found.saved if register == ra), None)
    return_address = caller.pop(ra, None)
    if return_address is None:
        note(notes, f"prologue: {arch.register_name(ra)} is unknown")
        return None
    return_address = arch.strip_pointer_auth(return_address)
    where = arch.register_name(ra) if ra_slot is None else f"[cfa{ra_slot:+d}]"
    if not walk.is_code(return_address):
        note(notes, f"prologue: {where} = {return_address:#x} is not code")
        return None
    if call_before(arch, return_address, walk.is_code, walk.code_reader) is None:
        note(notes, f"prologue: {where} = {return_address:#x} does not follow a call")
        return None
    if ra_slot is None:
        why = stale(walk, pc, return_address)
        if why is not None:
            note(notes, f"prologue: {where} = {return_address:#x} {why}")
            return None
    caller[arch.pc] = return_address
    return caller


def _cfa(registers: dict[int, int], found: PrologueFrame) -> int | None:
    base = registers.get(found.cfa_register)
    return None if base is None else (base + found.cfa_offset) & WORD_MASK


def _entered_by_call(
    walk: Walk, analysis: PrologueAnalysis, read: ReadCode, pc: int, sp: int
) -> dict[int, int] | None:
    """The frame of a function no symbol names, from the call that entered it.

    The words above sp are searched (charged to the walk's scan budget) for
    a return address after a direct call whose target — through its GOT
    slot, where the target is a PLT entry — lies in the pc's module; the
    prologue read from that entry must have saved the return address in
    the very slot it was found in.  At most :data:`MAX_ENTRIES` prologues
    are read.
    """
    arch, registers, notes = walk.arch, walk.registers, walk.notes
    module_at = walk.module_at
    module = None if module_at is None else module_at(pc)
    if module_at is None or module is None:
        note(notes, f"prologue: no symbol says where the function of pc {pc:#x} starts")
        return None
    word = arch.word_size
    address = -(-sp // word) * word
    limit = address + WINDOW * word
    if walk.stack_range is not None:
        limit = min(limit, walk.stack_range[1])
    unpack = struct.Struct(f"<{'Q' if word == 8 else 'I'}").iter_unpack
    budget = walk.budget
    entries = 0
    while address + word <= limit and entries < MAX_ENTRIES:
        chunk_end = min(limit, (address // _PAGE + 1) * _PAGE)
        wanted = (chunk_end - address) // word
        granted = budget.take(wanted)
        if granted == 0:
            break
        try:
            data = walk.read(address, granted * word)
        except MemoryReadError:
            budget.give_back(granted)
            break
        for index, (value,) in enumerate(unpack(data)):
            slot = address + index * word
            candidate = arch.strip_pointer_auth(value)
            if not walk.is_code(candidate):
                continue
            code = code_before(walk.code_reader, candidate, arch.longest_call)
            for site in arch.call_sites(candidate, code):
                entry = _entry(walk, read, site.target)
                if entry is None or module_at(entry) != module or entries >= MAX_ENTRIES:
                    continue
                entries += 1
                found = analysis.frame(read, entry, pc, walk.exact_pc, None)
                if isinstance(found, str):
                    continue
                ra_slot = next(
                    (at for register, at in found.saved if register == arch.return_address), None
                )
                cfa = _cfa(registers, found)
                if ra_slot is None or cfa is None or (cfa + ra_slot) & WORD_MASK != slot:
                    continue
                budget.give_back(granted - index - 1)
                note(notes, f"prologue: entered at {entry:#x}, by the call before {candidate:#x}")
                return _caller(walk, found, pc, sp)
        address += granted * word
        if granted < wanted:
            break
    note(
        notes,
        f"prologue: no symbol says where the function of pc {pc:#x} starts, and no direct call "
        "on the stack enters a prologue that saved its return address there",
    )
    return None


def _entry(walk: Walk, read: ReadCode, target: int | None) -> int | None:
    """Where a direct call to ``target`` enters: through the GOT slot where it is a PLT entry."""
    if target is None or not walk.is_code(target):
        return None
    plt_slot = walk.arch.plt_slot
    got = None if plt_slot is None else plt_slot(read(target, PLT_CODE_SIZE), target)
    if got is None:
        return target
    word = walk.arch.word_size
    try:
        entry = int.from_bytes(walk.read(got, word), "little")
    except MemoryReadError:
        return None
    return entry if walk.is_code(entry) else None


def _reader(code_reader: CodeReader) -> ReadCode:
    """``code_reader`` made to give fewer bytes (to the page's end, or none) rather than fail."""

    def read(address: int, size: int) -> bytes:
        try:
            return bytes(code_reader(address, size))
        except MemoryReadError:
            end = address - address % _PAGE + _PAGE
            try:
                return bytes(code_reader(address, min(size, end - address)))
            except MemoryReadError:
                return b""

    return read
