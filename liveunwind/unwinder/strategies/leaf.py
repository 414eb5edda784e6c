"""The first frame when its pc has no unwind rule: a function that has not built a frame.

A thread stopped at the first instruction of a function, or anywhere in a
leaf function that neither pushes nor moves the stack pointer, still has its
return address where the call put it: at ``[sp]`` on x86_64, in the link
register (x30 on aarch64, ra on riscv64).  This is tried before the frame
pointer and scanning because it is exact when it applies (a prologue read,
where the architecture has one, sees the same and more, and comes first),
but it is only a guess of the shape of the frame, so the return address must
also pass the scan's check (code, right after a call that could have
entered the function holding the pc: :mod:`.callers`).

Only for the first frame (or one interrupted by a signal): in a caller frame
the pc is a return address, so its function has necessarily built a frame
already, and its link register has been overwritten by the call it made.

A non-leaf function past its prologue still holds in its link register (x30
on aarch64, ra on riscv64) the return address of its own last call, a point
inside itself, and such a value is right after a call too.  A leaf makes no
calls, so a return address that lies in the function holding the pc is
refused (:func:`stale`): where symbols (or a JIT's registration) say which
function that is, unless the call before it is a direct call to that
function's start (a recursive call stopped at its entry); without them, where
a direct call before it targets an address at or below the call, and the call
at or below the pc, all in one module: the callee then spans the call itself.
The frames found here still get the trust of a scan.
"""

from __future__ import annotations

from liveunwind.errors import MemoryReadError
from liveunwind.unwinder.strategies import Walk, note
from liveunwind.unwinder.strategies.callers import checked_call, code_before
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
    pc = registers.get(arch.pc)
    if pc is None:
        if call_before(arch, return_address, is_code, code_reader) is None:
            note(notes, f"leaf: {where} = {return_address:#x} does not follow a call")
            return None
        why = None
    else:
        verdict, why = checked_call(walk, return_address, pc)
        if verdict is None:
            note(notes, f"leaf: {where} = {return_address:#x} {why}")
            return None
        why = stale(walk, pc, return_address)
    if why is not None:
        note(notes, f"leaf: {where} = {return_address:#x} {why}")
        return None
    caller = {arch.pc: return_address, arch.sp: caller_sp}
    fp = registers.get(arch.fp)
    if fp is not None:
        caller[arch.fp] = fp
    return caller


def stale(walk: Walk, pc: int, return_address: int) -> str | None:
    """Why ``return_address`` is one the function at ``pc`` left behind, not its caller's; or None.

    By symbols: it lies in the function holding the pc, and no call before
    it is a direct call to that function's start (a recursive call stopped
    at its entry).  Without a symbol for the pc: every call before it is a
    direct call whose target lies at or below the call, and the call at or
    below the pc, all in one module: had the caller called the pc's function
    there, that function would span the call.
    """
    arch = walk.arch
    sites = [
        site
        for site in arch.call_sites(
            return_address, code_before(walk.code_reader, return_address, arch.longest_call)
        )
        if site.target is None or walk.is_code(site.target)
    ]
    function_at = walk.function_at
    function = None if function_at is None else function_at(pc)
    if function_at is not None and function is not None:
        start = function[0]
        caller = function_at(return_address - 1)
        if caller is None or caller[0] != start:
            return None
        if any(site.target == start for site in sites):
            return None  # a recursive call, stopped at the function's entry
        return f"lies in the function at {start:#x}, as the pc does: a call it made returned there"
    module_at = walk.module_at
    if module_at is None or not sites:
        return None
    module = module_at(pc)
    if module is None:
        return None
    for site in sites:
        target = site.target
        if (
            target is None
            or not target <= site.address <= pc
            or module_at(target) != module
            or module_at(site.address) != module
        ):
            return None
    targets = ", ".join(f"{site.target:#x}" for site in sites)
    return (
        f"follows a call to {targets}, at or below the call and the pc: "
        "the call lies in the function of the pc"
    )
