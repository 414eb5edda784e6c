"""Whether a guessed return address follows a call that could have entered the frame's function.

``unwinder/strategies/callers.py`` on crafted code and memory: direct calls,
calls through PLT entries (bound, unbound, into another function), indirect
calls, and the frame-pointer step that uses it (a nearer return address,
a frame pointer on another stack).  The PLT decoders on bytes objdump showed
for real binaries.  Against real programs: tests/system/test_fallback.py
(testprogs/fallback/guesses).
"""

from __future__ import annotations

import pytest

from liveunwind.arch.aarch64 import AARCH64
from liveunwind.arch.x86_64 import X86_64
from liveunwind.frames import StopReason
from liveunwind.modules.modulemap import ModuleMap
from liveunwind.targets.base import Mapping
from liveunwind.unwinder.stepper import Stepper
from liveunwind.unwinder.strategies import Walk, framepointer
from liveunwind.unwinder.strategies.callers import ALLOWED, DIRECT, checked_call
from tests.support.spaces import BufferSpace
from tests.support.sparse import SparseMemory

# -- PLT entries, as objdump shows them in real binaries ---------------------------------------


@pytest.mark.parametrize(
    ("code", "address", "slot"),
    [
        # /usr/bin/ls's lazy .plt entry: jmp *0x1ffca(%rip); push $0; jmp PLT0
        ("ff 25 ca ff 01 00 68 00 00 00 00 e9 e0 ff ff ff", 0x4030, 0x24000),
        # gcc -fcf-protection -z ibtplt: .plt.sec's endbr64; bnd-less jmp *0x2fa6(%rip)
        ("f3 0f 1e fa ff 25 a6 2f 00 00 66 0f 1f 44 00 00", 0x1050, 0x4000),
        # .plt.bnd: bnd jmp *disp32(%rip)
        ("f2 ff 25 00 10 00 00 90", 0x2000, 0x3007),
        # PLT0: push GOT+8; jmp *GOT+16: not an entry of a function
        ("ff 35 ca ff 01 00 ff 25 cc ff 01 00 0f 1f 40 00", 0x4020, None),
        ("e8 00 00 00 00 90 90 90", 0x5000, None),
    ],
)
def test_x86_64_plt_entries(code: str, address: int, slot: int | None) -> None:
    assert X86_64.plt_slot is not None
    assert X86_64.plt_slot(bytes.fromhex(code), address) == slot


def _words(*words: int) -> bytes:
    return b"".join(word.to_bytes(4, "little") for word in words)


def test_aarch64_plt_entries() -> None:
    plt_slot = AARCH64.plt_slot
    assert plt_slot is not None
    # aarch64-linux-gnu-gcc's abort@plt: adrp x16, 0x20000; ldr x17, [x16, #32]; add; br x17
    entry = _words(0x90000110, 0xF9401211, 0x91008210, 0xD61F0220)
    assert plt_slot(entry, 0x630) == 0x20020
    # The same after a BTI landing pad: the adrp is one instruction further.
    assert plt_slot(_words(0xD503245F) + entry[:12], 0x62C) == 0x20020
    assert plt_slot(_words(0xD503201F) * 4, 0x630) is None  # nops


# -- the check ------------------------------------------------------------------------------

TEXT = (0x400000, 0x401000)  # the program: F, G, a PLT entry
LIBC = (0x700000, 0x701000)  # another module: M
JIT = (0x900000, 0x901000)  # anonymous code
GOT = 0x600000
F, G, M, PLT = 0x400100, 0x400300, 0x700000, 0x400800
SYMBOLS = {F: 0x100, G: 0x100, M: 0x100}


def _call(memory: SparseMemory, at: int, target: int) -> int:
    """``call target`` at ``at``; returns the return address."""
    memory.put(at, b"\xe8" + (target - at - 5).to_bytes(4, "little", signed=True))
    return at + 5


def _program(got: int) -> tuple[SparseMemory, dict[str, int]]:
    memory = SparseMemory()
    for low, high in (TEXT, LIBC, JIT):
        memory.put(low, b"\x90" * (high - low))
    memory.put(PLT, b"\xff\x25" + (GOT - PLT - 6).to_bytes(4, "little", signed=True))
    memory.word(GOT, got)
    returns = {
        "F": _call(memory, G + 0x50, F),
        "PLT": _call(memory, G + 0x60, PLT),
        "middle of G": _call(memory, G + 0x80, G + 0x10),
        "JIT": _call(memory, G + 0x90, JIT[0]),
    }
    memory.put(G + 0x70, b"\xff\xd0")  # call *%rax
    returns["indirect"] = G + 0x72
    for offset in range(0x100, 0xF00, 8):  # the stacks of the frame-pointer tests
        memory.word(0x7FF000 + offset, 0)
        memory.word(0x500000 + offset, 0)
    return memory, returns


def _module_at(address: int) -> object:
    for low, high in (TEXT, LIBC):
        if low <= address < high:
            return low
    return None


def _symbols(address: int) -> tuple[int, int | None] | None:
    for start, size in SYMBOLS.items():
        if start <= address < start + size:
            return start, start + size
    return None


def _is_code(address: int) -> bool:
    return any(low <= address < high for low, high in (TEXT, LIBC, JIT))


def _walk(memory: SparseMemory, pc: int, *, symbols: bool = True, jit: bool = False) -> Walk:
    def function_at(address: int) -> tuple[int, int | None] | None:
        if jit and JIT[0] <= address < JIT[0] + 0x100:
            return JIT[0], JIT[0] + 0x100  # what a perf map says
        return _symbols(address) if symbols else None

    return Walk(
        X86_64,
        {X86_64.pc: pc},
        memory.read,
        _is_code,
        memory.read,
        notes=[],
        function_at=function_at,
        module_at=_module_at,
        stack_at=lambda address: (0x500000, 0x501000) if 0x500000 <= address < 0x501000 else None,
        stack_range=(0x7FF000, 0x800000),
    )


def test_a_direct_call_must_enter_the_function_holding_the_pc() -> None:
    memory, returns = _program(got=F)
    walk = _walk(memory, F + 0x50)
    assert checked_call(walk, returns["F"], F + 0x50) == (DIRECT, "")
    # Through the PLT entry whose slot holds F's address: F's caller too.
    assert checked_call(walk, returns["PLT"], F + 0x50) == (DIRECT, "")
    # A call of F is no caller of M.
    verdict, why = checked_call(walk, returns["F"], M + 0x10)
    assert verdict is None
    assert (
        why == f"follows a call to {F:#x}, not to the function at {M:#x} holding pc {M + 0x10:#x}"
    )


def test_a_plt_entry_is_followed_to_its_bound_function() -> None:
    """The erts_mmap case: the return address after ``call mmap@plt`` is no caller of F or JIT."""
    memory, returns = _program(got=M)
    verdict, why = checked_call(_walk(memory, F + 0x50), returns["PLT"], F + 0x50)
    assert verdict is None
    assert f"{M:#x} (through the PLT entry {PLT:#x})" in why
    # Code no symbol names: M's own symbol says it does not reach there.
    verdict, why = checked_call(_walk(memory, JIT[0] + 0x50), returns["PLT"], JIT[0] + 0x50)
    assert verdict is None
    assert "which does not hold pc" in why
    # Code a perf map names: the call is not to its start.
    jit = _walk(memory, JIT[0] + 0x50, jit=True)
    assert checked_call(jit, returns["PLT"], JIT[0] + 0x50)[0] is None
    assert checked_call(jit, returns["JIT"], JIT[0] + 0x50) == (DIRECT, "")
    # JIT code calling JIT code goes through stubs (above the pc, say): not refused.
    stub = _call(memory, JIT[0] + 0x200, JIT[0] + 0x300)
    assert checked_call(_walk(memory, JIT[0] + 0x50), stub, JIT[0] + 0x50) == (DIRECT, "")


def test_an_unbound_plt_entry_and_an_indirect_call_are_allowed() -> None:
    memory, returns = _program(got=PLT + 6)  # lazy binding: the slot points back into the PLT
    walk = _walk(memory, F + 0x50)
    assert checked_call(walk, returns["PLT"], F + 0x50) == (ALLOWED, "")
    assert checked_call(walk, returns["indirect"], F + 0x50) == (ALLOWED, "")
    assert checked_call(walk, G + 0x74, F + 0x50) == (None, "does not follow a call")


def test_a_call_into_the_middle_of_a_function_is_data() -> None:
    memory, returns = _program(got=F)
    verdict, why = checked_call(_walk(memory, G + 0x20), returns["middle of G"], G + 0x20)
    assert verdict is None and why.endswith(f"inside the function at {G:#x}: data")


@pytest.mark.parametrize(
    ("pc", "verdict", "why"),
    [
        (F + 0x50, DIRECT, ""),
        (F - 0x10, None, "above pc"),  # the callee starts at F: it cannot hold a pc below
        (M + 0x10, None, "in another module"),
    ],
)
def test_without_symbols_the_call_must_enter_below_the_pc_in_its_module(
    pc: int, verdict: str | None, why: str
) -> None:
    memory, returns = _program(got=F)
    found, reason = checked_call(_walk(memory, pc, symbols=False), returns["F"], pc)
    assert found == verdict and why in reason
    # A call from between the target and the pc: recursion, or a call the function made.
    own = _call(memory, F + 0x20, F)
    assert checked_call(_walk(memory, F + 0x50, symbols=False), own, F + 0x50)[0] == DIRECT


# -- the frame-pointer step -----------------------------------------------------------------


def test_a_frame_pointer_step_does_not_pass_a_nearer_return_address() -> None:
    """The PostgreSQL JIT case: a leaf pushed a word; rbp is its caller's, called indirectly."""
    memory, returns = _program(got=F)
    sp, fp = 0x7FF100, 0x7FF200
    memory.word(sp, 0x1234)  # the pushed word
    memory.word(sp + 8, returns["F"])  # the leaf's real return address
    memory.word(fp, 0x7FF300)
    memory.word(fp + 8, returns["indirect"])  # the caller's caller
    walk = _walk(memory, F + 0x50)
    walk.registers = {X86_64.pc: F + 0x50, X86_64.sp: sp, X86_64.fp: fp}
    assert framepointer.step(walk) is None
    assert walk.notes == [
        f"frame pointer: the step would pass over the return address [{sp + 8:#x}] = "
        f"{returns['F']:#x}, nearer to sp than the record's at [{fp + 8:#x}]: refused"
    ]
    # Without the nearer one, the record is taken.
    memory.word(sp + 8, 0)
    assert framepointer.step(walk) == {
        X86_64.pc: returns["indirect"],
        X86_64.sp: fp + 16,
        X86_64.fp: 0x7FF300,
    }


def test_a_frame_that_made_a_call_is_stepped_past_stale_return_addresses() -> None:
    """Chromium's case: a frame the chain or a table led to built its record; its locals
    hold stale return addresses."""
    memory, returns = _program(got=F)
    sp, fp = 0x7FF100, 0x7FF200
    memory.word(sp + 8, returns["F"])  # stale, in an uninitialised local
    memory.word(fp, 0x7FF300)
    memory.word(fp + 8, returns["indirect"])
    taken = {X86_64.pc: returns["indirect"], X86_64.sp: fp + 16, X86_64.fp: 0x7FF300}
    walk = _walk(memory, F + 0x50)
    walk.registers = {X86_64.pc: F + 0x50, X86_64.sp: sp, X86_64.fp: fp}
    walk.exact_pc = False
    assert framepointer.step(walk) is None  # placed by a scan: its fp may be an ancestor's
    walk.found_by_frame_pointer = True
    assert framepointer.step(walk) == taken
    walk.found_by_frame_pointer, walk.found_by_table = False, True
    assert framepointer.step(walk) == taken  # a module's code a table led to
    # JIT code a table led to (PostgreSQL's LLVM code keeps no frame pointer): refused.
    memory.word(sp + 8, returns["indirect"])  # an indirect call could have entered it
    jit_walk = _walk(memory, JIT[0] + 0x80)
    jit_walk.registers = {X86_64.pc: JIT[0] + 0x80, X86_64.sp: sp, X86_64.fp: fp}
    jit_walk.exact_pc, jit_walk.found_by_table = False, True
    assert framepointer.step(jit_walk) is None
    assert "nearer to sp than the record's" in jit_walk.notes[-1]
    # A nearer one in JIT code may be one of the JIT frame's own calls: it does not count.
    memory.put(JIT[0] + 0x40, b"\xff\xd0")  # call *%rax
    memory.word(sp + 8, JIT[0] + 0x42)
    assert framepointer.step(jit_walk) == taken
    jit_walk.exact_pc = True  # but frame 0 made no call we know of: refused
    assert framepointer.step(jit_walk) is None


def test_a_return_address_after_no_call_is_taken_only_in_jit_code_on_a_chain() -> None:
    """HotSpot's interpreter frames: entered by a jump, in code no module holds."""
    memory, returns = _program(got=F)
    sp, fp, next_fp = 0x7FF100, 0x7FF200, 0x7FF300
    jumped = JIT[0] + 0x20  # nops before it: no call
    memory.word(fp, next_fp)
    memory.word(fp + 8, jumped)
    memory.word(next_fp, 0x7FF400)
    memory.word(next_fp + 8, returns["indirect"])
    walk = _walk(memory, F + 0x50)
    walk.registers = {X86_64.pc: F + 0x50, X86_64.sp: sp, X86_64.fp: fp}
    assert framepointer.step(walk) == {X86_64.pc: jumped, X86_64.sp: fp + 16, X86_64.fp: next_fp}
    assert "lies in JIT code and the chain goes on" in walk.notes[-1]
    # The next record's return address is no code: the chain does not go on.
    memory.word(next_fp + 8, 0x1234)
    assert framepointer.step(walk) is None
    assert walk.notes[-1].endswith(f"= {jumped:#x} does not follow a call")
    # In a module's code, an address after no call is refused whatever the chain.
    memory.word(next_fp + 8, returns["indirect"])
    memory.word(fp + 8, G + 0x20)
    assert framepointer.step(walk) is None
    assert walk.notes[-1].endswith(f"= {G + 0x20:#x} does not follow a call")


def test_a_jit_frame_entered_through_a_modules_unnamed_code_on_a_chain() -> None:
    """V8's case: a builtin (unnamed in a stripped binary) jumps on into JIT code."""
    memory, returns = _program(got=F)
    sp, fp, next_fp = 0x7FF100, 0x7FF200, 0x7FF300
    builtin = _call(memory, G + 0xA0, 0x400600)  # no symbol holds 0x400600
    memory.word(fp, next_fp)
    memory.word(fp + 8, builtin)
    memory.word(next_fp, 0x7FF400)
    memory.word(next_fp + 8, returns["indirect"])
    walk = _walk(memory, JIT[0] + 0x80)
    walk.registers = {X86_64.pc: JIT[0] + 0x80, X86_64.sp: sp, X86_64.fp: fp}
    walk.found_by_frame_pointer, walk.exact_pc = True, False
    assert framepointer.step(walk) == {X86_64.pc: builtin, X86_64.sp: fp + 16, X86_64.fp: next_fp}
    assert "may jump into JIT code (V8's builtins) and the chain goes on" in walk.notes[-1]
    # A scan still refuses it: a word on the stack, not a record.
    assert checked_call(walk, builtin, JIT[0] + 0x7F)[0] is None
    # Named callee: no trampoline, refused.
    walk.function_at = lambda address: (0x400600, 0x400700) if address == 0x400600 else None
    assert framepointer.step(walk) is None
    # A module's frame: refused too.
    memory.word(fp + 8, builtin)
    walk = _walk(memory, M + 0x50)
    walk.registers = {X86_64.pc: M + 0x50, X86_64.sp: sp, X86_64.fp: fp}
    assert framepointer.step(walk) is None
    assert walk.notes[-1].endswith(f"not to the function at {M:#x} holding pc {M + 0x50:#x}")


def test_a_frame_pointer_on_another_stack_is_followed_when_its_frame_checks_out() -> None:
    """Erlang's case: each process has its own stack, below the scheduler's C stack (sp)."""
    memory, returns = _program(got=F)
    fp = 0x500100
    memory.word(fp, 0x500200)
    memory.word(fp + 8, returns["F"])  # lands in G after a call of F, the pc's function
    walk = _walk(memory, F + 0x50)
    walk.registers = {X86_64.pc: F + 0x50, X86_64.sp: 0x7FF100, X86_64.fp: fp}
    assert framepointer.step(walk) == {
        X86_64.pc: returns["F"],
        X86_64.sp: fp + 16,
        X86_64.fp: 0x500200,
    }
    assert "is on another stack (0x500000-0x501000); its frame checks out" in walk.notes[-1]
    # A return address that lands in no known function: refused.
    walk.function_at = lambda address: _symbols(address) if address < G else None
    assert framepointer.step(walk) is None
    assert "lies in no known function" in walk.notes[-1]
    # Below sp on the walk's own stack: a frame already returned from.
    walk.stack_range = (0x500000, 0x501000)
    walk.registers = {X86_64.pc: F + 0x50, X86_64.sp: 0x500800, X86_64.fp: fp}
    assert framepointer.step(walk) is None
    assert walk.notes[-1] == "frame pointer: fp 0x500100 is below sp 0x500800, on the same stack"
    walk.stack_range = (0x7FF000, 0x800000)
    walk.registers = {X86_64.pc: F + 0x50, X86_64.sp: 0x7FF100, X86_64.fp: fp}
    # SparseMemory that is no stack (not writable): refused, saying where fp is.
    walk.stack_at = lambda address: None
    assert framepointer.step(walk) is None
    assert (
        walk.notes[-1] == "frame pointer: fp 0x500100 is below sp 0x7ff100, and on no other stack"
    )


# -- the stepper: the entry function, a walk moving to another stack ------------------------

CODE_MAP = Mapping(0x400000, 0x401000, "r-xp", 0, 0, "")
STACK_MAP = Mapping(0x7FF000, 0x800000, "rw-p", 0, 0, "[stack]")
OTHER_MAP = Mapping(0x500000, 0x501000, "rw-p", 0, 0, "")


class _EntrySpace(BufferSpace):
    """A BufferSpace whose program's entry point (AT_ENTRY) is known."""

    def __init__(self, regions: list[tuple[Mapping, bytes]], registers: dict[int, int]) -> None:
        super().__init__(regions, registers)
        self.entry: int | None = None

    def entry_point(self) -> int | None:
        return self.entry


def _space(fp: int, records: dict[int, tuple[int, int]]) -> _EntrySpace:
    """Anonymous code (``call 0x400000`` at 0x400100, returning to 0x400105); frame records."""
    code = bytearray(b"\x90" * 0x1000)
    code[0x100:0x105] = b"\xe8" + (0x400000 - 0x400105).to_bytes(4, "little", signed=True)
    stack, other = bytearray(0x1000), bytearray(0x1000)
    for address, (next_fp, return_address) in records.items():
        memory, base = (other, OTHER_MAP.start) if address < STACK_MAP.start else (stack, 0x7FF000)
        memory[address - base : address - base + 16] = next_fp.to_bytes(
            8, "little"
        ) + return_address.to_bytes(8, "little")
    registers = {X86_64.pc: 0x400010, X86_64.sp: 0x7FF100, X86_64.fp: fp}
    regions = [(CODE_MAP, bytes(code)), (STACK_MAP, bytes(stack)), (OTHER_MAP, bytes(other))]
    return _EntrySpace(regions, registers)


def test_the_entry_function_ends_the_walk() -> None:
    space = _space(0x7FF200, {0x7FF200: (0x7FF300, 0x400105), 0x7FF300: (0, 0x400105)})
    (thread,) = space.threads()
    walked = Stepper(space, ModuleMap(space), unwinders=("fp",)).backtrace(thread)
    assert walked.stop_reason is StopReason.NO_UNWIND_INFO  # fp 0 after two frames
    space.entry = 0x400100  # the return address lies in the entry function's first bytes
    walked = Stepper(space, ModuleMap(space), unwinders=("fp",)).backtrace(thread)
    assert [frame.pc for frame in walked.frames] == [0x400010, 0x400105]
    assert walked.complete
    assert walked.stop_detail == "the program's entry function, at 0x400100"


def test_a_walk_follows_a_frame_pointer_onto_another_stack() -> None:
    """fp lies below sp, on a stack of the runtime's; the frames there check out."""
    space = _space(0x500200, {0x500200: (0x500300, 0x400105), 0x500300: (0, 0x400105)})
    (thread,) = space.threads()
    stepper = Stepper(space, ModuleMap(space), unwinders=("fp",), verbose=True)
    stepper._walk.function_at = lambda address: (0x400000, 0x400200)  # as symbols would say
    walked = stepper.backtrace(thread)
    assert [(frame.pc, frame.sp) for frame in walked.frames] == [
        (0x400010, 0x7FF100),
        (0x400105, 0x500210),
        (0x400105, 0x500310),
    ]
    assert "is on another stack (0x500000-0x501000)" in walked.frames[1].notes[-1]
    # The second step ran on the new stack: its fp is inside it, above sp.
    assert not any("another stack" in note for note in walked.frames[2].notes)
    assert walked.stop_reason is StopReason.NO_UNWIND_INFO
    # Where that stack ends nothing says: no scan there (stale heap lies past it).
    scanning = Stepper(space, ModuleMap(space), unwinders=("fp", "scan"), verbose=True)
    scanning._walk.function_at = stepper._walk.function_at
    again = scanning.backtrace(thread)
    assert len(again.frames) == 3
    assert "of unknown end" in again.stop_notes[-1]
