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
range the stepper gives, and the return address is code right after a call
that could have entered the frame's function (:mod:`.callers`).  Alignment
is to the word, as the Linux kernel's own arm64 frame-record walker checks
it: the AAPCS64 does not promise more for the record's address.

A function that keeps no frame pointer (a leaf that pushed a word, JIT code,
hand-written assembly) leaves fp pointing at an ancestor's record, and the
step would skip its caller.  Unless the record's return address follows a
direct call into the frame's own function (then the record is the
function's), the words between sp and the record's return address are
searched for a return address that passes the same check; if one is there,
the step is refused (the scan, tried next, finds it) and the note says why.

A frame pointer below sp or outside the walk's stack is not refused for
that alone: runtimes run code on stacks of their own (each Erlang process
has one, below the scheduler's C stack).  It is followed when it lies in a
writable mapping and the frame it leads to checks out: its return address
follows a call that could have entered the function and lies in a known
function (or in JIT code, which no module holds).  The stepper then walks on
that stack.
"""

from __future__ import annotations

from liveunwind.errors import MemoryReadError
from liveunwind.unwinder.strategies import Walk, note
from liveunwind.unwinder.strategies.callers import DIRECT, checked_call
from liveunwind.unwinder.strategies.scan import find_return_address

#: Words between sp and the record searched for a nearer return address at most.
NEARER_WINDOW = 2048


def step(walk: Walk) -> dict[int, int] | None:
    """The caller's pc, sp and fp from the frame record at fp, or None if a check fails.

    The record must lie in ``walk.stack_range``, the readable stack mapping
    of the thread (when it is known; reads still fail on unmapped memory),
    or on another stack whose frame checks out.
    A caller fp of 0 is accepted: it is how the outermost frame (``_start``,
    ``clone``) ends the chain, and the next step then refuses.
    """
    arch, registers, read, is_code = walk.arch, walk.registers, walk.read, walk.is_code
    stack_range, notes = walk.stack_range, walk.notes
    fp = registers.get(arch.fp)
    sp = registers.get(arch.sp)
    pc = registers.get(arch.pc)
    if not fp:
        note(notes, "frame pointer: fp is zero or unknown")
        return None
    word = arch.word_size
    record = arch.frame_record
    if fp % word:
        note(notes, f"frame pointer: fp {fp:#x} is not aligned")
        return None
    elsewhere = None
    if (sp is not None and fp < sp) or (
        stack_range is not None and not _inside(fp + record.start, record.size, stack_range)
    ):
        elsewhere = _other_stack(walk, fp, sp)
        if elsewhere is None:
            return None
        stack_range = elsewhere
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
    slot = fp + record.return_address
    if pc is not None:
        lookup = pc if walk.exact_pc else pc - 1
        verdict, why = checked_call(walk, return_address, lookup)
        if verdict is None:
            note(notes, f"frame pointer: return address [{slot:#x}] = {return_address:#x} {why}")
            return None
        if elsewhere is not None:
            if not _known_code(walk, return_address - 1):
                note(
                    notes,
                    f"frame pointer: fp {fp:#x} is on another stack, and its return address "
                    f"{return_address:#x} lies in no known function",
                )
                return None
            note(
                notes,
                f"frame pointer: fp {fp:#x} is on another stack "
                f"({elsewhere[0]:#x}-{elsewhere[1]:#x}); its frame checks out",
            )
        elif verdict != DIRECT and sp is not None and not _no_nearer(walk, sp, slot, lookup):
            return None
    elif elsewhere is not None:
        note(notes, f"frame pointer: fp {fp:#x} is on another stack, and the pc is unknown")
        return None
    return {arch.pc: return_address, arch.sp: fp + record.caller_sp, arch.fp: caller_fp}


def _other_stack(walk: Walk, fp: int, sp: int | None) -> tuple[int, int] | None:
    """The writable mapping holding fp, off the walk's stack; None (and a note) where none is."""
    where = f"below sp {sp:#x}" if sp is not None and fp < sp else "outside the stack"
    found = None if walk.stack_at is None else walk.stack_at(fp)
    if found is not None and found == walk.stack_range:
        note(walk.notes, f"frame pointer: fp {fp:#x} is {where}, on the same stack")
        return None
    if found is None or not _inside(
        fp + walk.arch.frame_record.start, 2 * walk.arch.word_size, found
    ):
        note(walk.notes, f"frame pointer: fp {fp:#x} is {where}, and on no other stack")
        return None
    return found


def _known_code(walk: Walk, address: int) -> bool:
    """A function the symbols (or a JIT's registration) know, or JIT code: no module holds it.

    A runtime that keeps stacks of its own runs JIT code on them (BEAM),
    which nothing may name when the process is a core.
    """
    if walk.function_at is not None and walk.function_at(address) is not None:
        return True
    return walk.module_at is not None and walk.module_at(address) is None


def _no_nearer(walk: Walk, sp: int, slot: int, lookup: int) -> bool:
    """True unless a checked return address lies between sp and ``slot`` (then a note says so)."""
    arch = walk.arch
    word = arch.word_size
    if slot <= sp:
        return True
    words = min((slot - sp) // word, NEARER_WINDOW)

    def refuse(return_address: int) -> str | None:
        verdict, why = checked_call(walk, return_address, lookup)
        return why if verdict is None else None

    found = find_return_address(
        arch,
        sp,
        walk.read,
        walk.is_code,
        walk.code_reader,
        budget=walk.budget,
        window=words,
        stack_end=slot,
        refuse=refuse,
    )
    if found is None:
        return True
    nearer, return_address = found
    note(
        walk.notes,
        f"frame pointer: the step would pass over the return address [{nearer:#x}] = "
        f"{return_address:#x}, nearer to sp than the record's at [{slot:#x}]: refused",
    )
    return False


def _inside(address: int, size: int, stack_range: tuple[int, int]) -> bool:
    low, high = stack_range
    return low <= address and address + size <= high
