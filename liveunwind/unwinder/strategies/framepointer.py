"""One step along a frame-pointer chain, with every link checked.

Where the caller's fp and the return address sit relative to fp, and what
the caller's sp is, the architecture says (``Arch.frame_record``):

x86_64 (``push %rbp; mov %rsp,%rbp``): ``[rbp]`` is the caller's rbp,
``[rbp+8]`` the return address, and the caller's rsp is ``rbp+16`` exactly.

aarch64 (AAPCS64 frame record, ``stp x29, x30, [...]; mov x29, <record>``):
``[x29]`` is the caller's x29, ``[x29+8]`` the saved x30 (the return address,
possibly signed with a pointer-authentication code, which is stripped).  The
record lies inside the callee's frame, so ``x29+16`` is the lowest the
caller's sp can be; it is exact only when the record sits at the top of the
frame (clang's layout).  The stepper needs some sp to check that the stack
grows, and a lower bound never claims the caller's frame is larger than it is.

A frame-pointer chain is only as good as the code that built it: code compiled
without frame pointers uses rbp/x29 as a general register, so a step is
accepted only if the record address and the next one are word-aligned, the
next lies at least one record above the current one, both lie in the stack
range the stepper gives, and the return address is code.  Alignment is to the
word, as the Linux kernel's own arm64 frame-record walker checks it: the
AAPCS64 does not promise more for the record's address.
"""

from __future__ import annotations

from liveunwind.errors import MemoryReadError
from liveunwind.unwinder.strategies import Walk, note


def step(walk: Walk) -> dict[int, int] | None:
    """The caller's pc, sp and fp from the frame record at fp, or None if a check fails.

    The record must lie in ``walk.stack_range``, the readable stack mapping
    of the thread (when it is known; reads still fail on unmapped memory).
    A caller fp of 0 is accepted: it is how the outermost frame (``_start``,
    ``clone``) ends the chain, and the next step then refuses.
    """
    arch, registers, read, is_code = walk.arch, walk.registers, walk.read, walk.is_code
    stack_range, notes = walk.stack_range, walk.notes
    fp = registers.get(arch.fp)
    sp = registers.get(arch.sp)
    if not fp:
        note(notes, "frame pointer: fp is zero or unknown")
        return None
    word = arch.word_size
    record = arch.frame_record
    if fp % word:
        note(notes, f"frame pointer: fp {fp:#x} is not aligned")
        return None
    if sp is not None and fp < sp:
        note(notes, f"frame pointer: fp {fp:#x} is below sp {sp:#x}")
        return None
    if stack_range is not None and not _inside(fp + record.start, record.size, stack_range):
        note(notes, f"frame pointer: fp {fp:#x} is outside the stack")
        return None
    try:
        caller_fp, return_address = record.links(read(fp + record.start, record.size))
    except MemoryReadError as error:
        note(notes, f"frame pointer: cannot read the frame record at {error.address:#x}")
        return None
    return_address = arch.strip_pointer_auth(return_address)
    if caller_fp:
        if caller_fp % word:
            note(notes, f"frame pointer: next fp {caller_fp:#x} is not aligned")
            return None
        if caller_fp < fp + record.size:
            note(notes, f"frame pointer: next fp {caller_fp:#x} is not above fp {fp:#x}")
            return None
        if stack_range is not None and not _inside(
            caller_fp + record.start, record.size, stack_range
        ):
            note(notes, f"frame pointer: next fp {caller_fp:#x} is outside the stack")
            return None
    if not is_code(return_address):
        note(notes, f"frame pointer: return address {return_address:#x} is not code")
        return None
    return {arch.pc: return_address, arch.sp: fp + record.caller_sp, arch.fp: caller_fp}


def _inside(address: int, size: int, stack_range: tuple[int, int]) -> bool:
    low, high = stack_range
    return low <= address and address + size <= high
