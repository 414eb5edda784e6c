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
That search runs only where the frame may not have built the record
(:func:`_own_record`): a frame the chain or a table led to in a module's
code made a call with its own record, and what lies nearer is stale
(Chromium's uninitialised locals hold return addresses of earlier calls).

Two return addresses the call check refuses are taken where the record's
chain goes on (:func:`_chain_goes_on`): one in JIT code after no call
(HotSpot's interpreter enters its frames by pushing the return address and
jumping), and, for a frame in JIT code, one after a direct call into a
module's unnamed code (V8's embedded builtins jump on into JIT code).  A
record is no stray word on the stack, so what a scan must refuse may be
taken from it; the note says why.

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
from liveunwind.unwinder.strategies.callers import DIRECT, NO_CALL, TRAMPOLINE, checked_call
from liveunwind.unwinder.strategies.scan import find_return_address

#: Words between sp and the record searched for a nearer return address at most.
NEARER_WINDOW = 2048

#: A return address in JIT code after no call, taken on a chain that goes on.
JUMPED = "jumped"
#: Why a return address the call check alone would refuse was taken, by verdict.
_TAKEN = {
    JUMPED: (
        "frame pointer: return address [{slot:#x}] = {address:#x} {why}, but lies in JIT code "
        "and the chain goes on (HotSpot's interpreter enters frames by a jump): taken"
    ),
    TRAMPOLINE: (
        "frame pointer: return address [{slot:#x}] = {address:#x} {why}, but the callee is "
        "unnamed code that may jump into JIT code (V8's builtins) and the chain goes on: taken"
    ),
}


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
        verdict, why = checked_call(walk, return_address, lookup, trampolines=True)
        if verdict is None and why == NO_CALL and _in_jit_code(walk, return_address):
            verdict = JUMPED  # HotSpot's interpreter: entered by a jump
        if verdict in (TRAMPOLINE, JUMPED):
            if elsewhere is not None or not _chain_goes_on(walk, caller_fp, stack_range):
                verdict = None
            else:
                note(notes, _TAKEN[verdict].format(slot=slot, address=return_address, why=why))
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
        elif (
            verdict != DIRECT
            and sp is not None
            and not _own_record(walk, lookup)
            and not _no_nearer(walk, sp, slot, lookup)
        ):
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


def _in_jit_code(walk: Walk, address: int) -> bool:
    """Whether ``address`` is code no module holds: code a JIT compiler wrote."""
    return walk.module_at is not None and walk.module_at(address) is None


def _chain_goes_on(walk: Walk, caller_fp: int, stack_range: tuple[int, int] | None) -> bool:
    """Whether the record at ``caller_fp`` lies on the stack and returns into code.

    Asked where a return address passed the call check only as JIT code
    needs it (entered by a jump, or through a runtime's trampoline): the
    record it came from must lead on as a chain of frame records does.
    """
    arch = walk.arch
    record = arch.frame_record
    if not caller_fp:
        return False
    if stack_range is not None and not _inside(caller_fp + record.start, record.size, stack_range):
        return False
    try:
        _, next_return = record.links(walk.read(caller_fp + record.start, record.size))
    except MemoryReadError:
        return False
    return walk.is_code(arch.strip_pointer_auth(next_return))


def _known_code(walk: Walk, address: int) -> bool:
    """A function the symbols (or a JIT's registration) know, or JIT code: no module holds it.

    A runtime that keeps stacks of its own runs JIT code on them (BEAM),
    which nothing may name when the process is a core.
    """
    if walk.function_at is not None and walk.function_at(address) is not None:
        return True
    return walk.module_at is not None and walk.module_at(address) is None


def _own_record(walk: Walk, lookup: int) -> bool:
    """Whether the frame is taken to have built the record fp points at.

    A frame the chain led to made a call and kept the frame pointer its
    callee's record saved: a link of a chain the program keeps.  So does
    module code a table led to, where no table covers the frame's own pc: a
    module shipped without tables keeps frame pointers to be walked at all
    (Chromium).  Where a nearer return address then lies between sp and the
    record, it is a stale one left in the frame's uninitialised locals.
    Not taken: frame 0 or a frame a signal interrupted (a leaf, or a
    function before its prologue), a frame a scan or the leaf check placed
    (its fp is carried over from the frame below), and JIT code (PostgreSQL's
    LLVM code keeps no frame pointer).
    """
    if walk.exact_pc:
        return False
    if walk.found_by_frame_pointer:
        return True
    module_at = walk.module_at
    return walk.found_by_table and module_at is not None and module_at(lookup) is not None


def _no_nearer(walk: Walk, sp: int, slot: int, lookup: int) -> bool:
    """True unless a checked return address lies between sp and ``slot`` (then a note says so).

    In a JIT frame that made a call (not frame 0, nor one a signal
    interrupted), a return address into JIT code does not count: JIT code
    calling JIT code passes the check whatever it called, so it may be one
    of the frame's own earlier calls (HotSpot's native wrappers call
    runtime stubs before the native method).
    """
    arch = walk.arch
    word = arch.word_size
    if slot <= sp:
        return True
    words = min((slot - sp) // word, NEARER_WINDOW)
    own_calls = not walk.exact_pc and _in_jit_code(walk, lookup)

    def refuse(return_address: int) -> str | None:
        if own_calls and _in_jit_code(walk, return_address):
            return "lies in JIT code, as the frame does: maybe a call it made returned there"
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
