"""The first frame when its pc has no unwind rule: a function that has not built a frame.

A thread stopped at the first instruction of a function, or anywhere in a
leaf function that neither pushes nor moves the stack pointer, still has its
return address where the call put it: at ``[sp]`` on x86_64, in the link
register x30 on aarch64.  This is tried before scanning because it is exact
when it applies, but it is only a guess of the shape of the frame, so the
return address must also pass the scan's check (code, right after a call).

Only for the first frame (or one interrupted by a signal): in a caller frame
the pc is a return address, so its function has necessarily built a frame
already, and on aarch64 its x30 has been overwritten by the call it made.

On aarch64 a non-leaf function past its prologue still holds in x30 the return
address of its own last call (a point inside itself); such a value passes the
check too, which is one reason frames found here get the trust of a scan.
"""

from __future__ import annotations

from liveunwind.errors import MemoryReadError
from liveunwind.unwinder.strategies import Walk, note
from liveunwind.unwinder.strategies.scan import call_before


def step(walk: Walk) -> dict[int, int] | None:
    """The caller's pc, sp and fp if the return address is still at entry position, else None.

    x86_64 (any arch without a link register): pc = ``[sp]``, sp = sp + 8.
    aarch64 (any arch whose return address lives in a register): pc = the
    link register stripped of its pointer-authentication code, sp unchanged.
    The fp is unchanged either way: a function that has not built a frame
    has not touched it.
    """
    arch, registers, read, is_code = walk.arch, walk.registers, walk.read, walk.is_code
    code_reader, notes = walk.code_reader, walk.notes
    sp = registers.get(arch.sp)
    if sp is None:
        note(notes, "leaf: sp is unknown")
        return None
    word = arch.word_size
    link_register = arch.link_register
    if link_register is None:  # the call pushed the return address
        try:
            return_address = int.from_bytes(read(sp, word), "little")
        except MemoryReadError as error:
            note(notes, f"leaf: cannot read the stack at {error.address:#x}")
            return None
        caller_sp = sp + word
        where = f"[sp {sp:#x}]"
    else:
        link = registers.get(link_register)
        if link is None:
            note(notes, f"leaf: {arch.register_name(link_register)} is unknown")
            return None
        return_address = arch.strip_pointer_auth(link)
        caller_sp = sp
        where = arch.register_name(link_register)
    if not is_code(return_address):
        note(notes, f"leaf: {where} = {return_address:#x} is not code")
        return None
    if call_before(arch, return_address, is_code, code_reader) is None:
        note(notes, f"leaf: {where} = {return_address:#x} does not follow a call")
        return None
    caller = {arch.pc: return_address, arch.sp: caller_sp}
    fp = registers.get(arch.fp)
    if fp is not None:
        caller[arch.fp] = fp
    return caller
