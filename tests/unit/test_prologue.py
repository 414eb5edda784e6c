"""Prologue analysis (riscv64) and the leaf check's refusals, on code written here.

The riscv64 code is what ``riscv64-linux-gnu-as -march=rv64gc`` (binutils 2.40)
made of the functions below, listed with their offsets; the analysis is
checked at pcs inside them, the prologue strategy and the leaf check on a
crafted stack.  The decoder against objdump's view of a whole real binary is
in tests/system/test_strategies.py.
"""

from __future__ import annotations

import copy

import pytest

from liveunwind.arch import Arch, arch_by_name
from liveunwind.arch.base import PrologueAnalysis, PrologueFrame
from liveunwind.arch.riscv64 import prologue as rv
from liveunwind.arch.riscv64.instructions import plt_slot
from liveunwind.unwinder.strategies import FunctionAt, ModuleAt, Walk, leaf
from liveunwind.unwinder.strategies import prologue as strategy
from tests.support.sparse import SparseMemory

RISCV64 = arch_by_name("riscv64")
X86_64 = arch_by_name("x86_64")
RA, SP, S0, S1 = 1, 2, 8, 9
PC = RISCV64.pc
#: s2–s11: callee-saved registers the functions below never touch.
UNTOUCHED = tuple(range(18, 28))

#  0 f_nonleaf:  7179 addi sp,sp,-48    f406 sd ra,40(sp)   f022 sd s0,32(sp)  ec26 sd s1,24(sp)
#                e781 bnez a5,0x10      48d9 li a7,22       00000073 ecall
# 10 (.L1):      70a2 ld ra,40(sp)      7402 ld s0,32(sp)   64e2 ld s1,24(sp)
#                6145 addi sp,sp,48     8082 ret
# 1a f_fp:       1101 addi sp,sp,-32    ec06 sd ra,24(sp)   e822 sd s0,16(sp)
#                1000 addi s0,sp,32     00000097 auipc ra,0 000080e7 jalr ra,0(ra)  0001 nop
# 2c f_wide:     fc010113 addi sp,sp,-64   02813823 sd s0,48(sp)  02113c23 sd ra,56(sp)
#                04010413 addi s0,sp,64    00050263 beqz a0,0x40  00000013 nop
# 44 f_guard:    7175 addi sp,sp,-144   e8da sd s6,80(sp)   00000b17 auipc s6,0
#                000b3b03 ld s6,0(s6)   e506 sd ra,136(sp)  e122 sd s0,128(sp)
#                000b3783 ld a5,0(s6)   f43e sd a5,40(sp)   4781 li a5,0
#                c109 beqz a0,0x5e      0001 nop
# 60 f_wrap:     4705 li a4,1           4681 li a3,0        b7c5 j 0x44 (f_guard)
# 66 f_s0base:   1101 addi sp,sp,-32    1000 addi s0,sp,32  fe143c23 sd ra,-8(s0)
#                fe943823 sd s1,-16(s0) e109 bnez a0,0x74   0001 nop
# 76 f_lost:     1141 addi sp,sp,-16    812a mv sp,a0       0001 nop
# 7c f_jr:       1141 addi sp,sp,-16    e406 sd ra,8(sp)    e111 bnez a0,0x84  8782 jr a5
#                0001 nop
# 86 f_tail:     1141 addi sp,sp,-16    e406 sd ra,8(sp)    e519 bnez a0,0x98
#                60a2 ld ra,8(sp)       0141 addi sp,sp,16
#                00000317 auipc t1,0    00030067 jr t1      0001 nop
# 9a plt:        00002e17 auipc t3,0x2  378e3e03 ld t3,888(t3)  000e0367 jalr t1,t3
#                00000013 nop
CODE = bytes.fromhex(
    "797106f422f026ec81e7d94873000000a2700274e26445618280011106ec22e800109700"
    "0000e78000000100130101fc23388102233c11021304010463020500130000007571dae8"
    "170b0000033b0b0006e522e183370b003ef4814709c1010005478146c5b701110010233c"
    "14fe233894fe09e1010041112a810100411106e411e182870100411106e419e5a2604101"
    "17030000670003000100172e0000033e8e3767030e0013000000"
)
BASE = 0x10000
F_NONLEAF, F_FP, F_WIDE, F_GUARD, F_WRAP = 0x0, 0x1A, 0x2C, 0x44, 0x60
F_S0BASE, F_LOST, F_JR, F_TAIL, PLT = 0x66, 0x76, 0x7C, 0x86, 0x9A
#: Where each function starts, and where the last one ends.
FUNCTIONS = (F_NONLEAF, F_FP, F_WIDE, F_GUARD, F_WRAP, F_S0BASE, F_LOST, F_JR, F_TAIL, PLT)
ENDS = (*FUNCTIONS[1:], len(CODE))


def read_code(address: int, size: int) -> bytes:
    offset = address - BASE
    return CODE[max(offset, 0) : max(offset + size, 0)] if 0 <= offset < len(CODE) else b""


def frame(
    start: int, pc: int, *, exact: bool = True, size: int | None = None
) -> PrologueFrame | str:
    return rv.frame(read_code, BASE + start, BASE + pc, exact, size)


def kept(*registers: int) -> tuple[int, ...]:
    return (*registers, *UNTOUCHED)


# -- the analysis -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pc", "expected"),
    [
        # At the entry: nothing built, ra holds the return address.
        (0x0, PrologueFrame(SP, 0, (), kept(RA, S0, S1))),
        # Mid-prologue: sp moved, ra not stored yet.
        (0x2, PrologueFrame(SP, 48, (), kept(RA, S0, S1))),
        # At the branch: the straight line reached the pc.
        (0x8, PrologueFrame(SP, 48, ((RA, -8), (S0, -16), (S1, -24)), kept())),
        # Past the branch: the prologue's frame (and the epilogue ahead agrees).
        (0xA, PrologueFrame(SP, 48, ((RA, -8), (S0, -16), (S1, -24)), kept())),
        (0x10, PrologueFrame(SP, 48, ((RA, -8), (S0, -16), (S1, -24)), kept())),
        # In the epilogue: ra, s0 and s1 reloaded, sp not yet given back.
        (0x16, PrologueFrame(SP, 48, (), kept(RA, S0, S1))),
        # At the ret: sp given back too.
        (0x18, PrologueFrame(SP, 0, (), kept(RA, S0, S1))),
    ],
)
def test_a_compressed_prologue_and_its_epilogue(pc: int, expected: PrologueFrame) -> None:
    assert frame(F_NONLEAF, pc, size=0x1A) == expected


def test_a_frame_pointer_and_a_return_address_after_a_call() -> None:
    """s0 = sp + 32 = the CFA; the call (auipc ra; jalr ra) took ra: it must be in its slot."""
    assert frame(F_FP, 0x2A, exact=False) == PrologueFrame(S0, 0, ((RA, -8), (S0, -16)), kept(S1))


def test_the_32_bit_forms() -> None:
    assert frame(F_WIDE, 0x40, size=0x18) == PrologueFrame(S0, 0, ((RA, -8), (S0, -16)), kept(S1))


def test_registers_reloaded_or_overwritten_are_not_the_callers() -> None:
    """s6 is stored, then reloaded with something else; a5 (not the caller's) stored too."""
    assert frame(F_GUARD, 0x5E, size=0x1C) == PrologueFrame(
        SP, 144, ((RA, -8), (S0, -16), (22, -64)), (S1, *(r for r in UNTOUCHED if r != 22))
    )


def test_a_direct_jump_is_followed() -> None:
    """f_wrap moves two arguments and jumps to f_guard: the straight line goes on there."""
    assert frame(F_WRAP, 0x5E) == frame(F_GUARD, 0x5E)


def test_stores_through_the_frame_pointer() -> None:
    found = frame(F_S0BASE, 0x74, size=0x10)
    # s0 was changed and never saved: the caller's s0 is not known.
    assert found == PrologueFrame(S0, 0, ((RA, -8), (S1, -16)), UNTOUCHED)


@pytest.mark.parametrize(
    ("start", "pc", "exact", "why"),
    [
        (F_LOST, 0x7A, True, "sp is set from x10 at 0x10078"),
        (F_JR, 0x82, True, "an indirect jump follows the pc: a tail call or a jump table"),
        # After the epilogue gave sp back, before the tail call: which it is, is not known.
        (F_TAIL, 0x90, True, "an indirect jump follows the pc: a tail call or a jump table"),
        (F_NONLEAF, 0x3, True, "the pc is not on an instruction boundary from 0x10000"),
        (0x18, 0x1A, True, "the pc lies past the function's return at 0x10018"),
        (0x8, 0xA, True, "no frame built before the first branch (0x10008)"),
        (F_WRAP, 0x62, False, "the pc follows no call on the straight line from 0x10060"),
        # From f_fp's call on: the call took ra, and nothing saved it.
        (0x22, 0x2A, False, "the return address is neither saved nor in ra"),
    ],
)
def test_what_the_analysis_refuses(start: int, pc: int, exact: bool, why: str) -> None:
    assert frame(start, pc, exact=exact) == why


def test_a_tail_call_epilogue() -> None:
    """Between the reload of ra and the tail call: ra from its slot, then from ra itself."""
    assert frame(F_TAIL, 0x8C) == PrologueFrame(SP, 16, ((RA, -8),), kept(RA, S0, S1)[1:])
    assert frame(F_TAIL, 0x8E) == PrologueFrame(SP, 16, (), kept(RA, S0, S1))


def test_the_plt_slot() -> None:
    """auipc t3, 0x2; ld t3, 888(t3): the slot is 0x2000 + 888 past the entry."""
    entry = BASE + PLT
    assert plt_slot(read_code(entry, 16), entry) == entry + 0x2000 + 888
    assert plt_slot(read_code(BASE, 16), BASE) is None
    assert plt_slot(read_code(entry, 8), entry) is None


# -- the strategy and the leaf check on a crafted stack ------------------------------------

STACK = (0x7FF000, 0x800000)
SP_VALUE = 0x7FF800
#: Where the code of the callers lies: a direct call to the PLT entry, an indirect one.
CALLERS = 0x20000
PAGE = 0x1000


def _jal_ra(offset: int) -> bytes:
    """``jal ra, offset``."""
    imm = offset & 0x1FFFFF
    word = (
        (imm >> 20 & 1) << 31
        | (imm >> 1 & 0x3FF) << 21
        | (imm >> 11 & 1) << 20
        | (imm >> 12 & 0xFF) << 12
        | 1 << 7
        | 0x6F
    )
    return word.to_bytes(4, "little")


def _memory() -> SparseMemory:
    """The code above, and the callers' code, each filling its page (pages are read whole)."""
    memory = SparseMemory()
    memory.put(BASE, CODE + b"\x01\x00" * ((PAGE - len(CODE)) // 2))  # c.nop
    memory.put(CALLERS, b"\x01\x00" * (PAGE // 2))
    memory.put(CALLERS + 0x10, _jal_ra(BASE + PLT - (CALLERS + 0x10)))  # returns to +0x14
    memory.put(CALLERS + 0x20, bytes.fromhex("8297"))  # c.jalr a5: returns to +0x22
    for address in range(*STACK, 8):
        memory.word(address, 0)
    # The PLT entry's GOT slot holds f_wrap (the link is resolved).
    memory.word(BASE + PLT + 0x2000 + 888, BASE + F_WRAP)
    return memory


def _is_code(address: int) -> bool:
    return BASE <= address < BASE + PAGE or CALLERS <= address < CALLERS + PAGE


def _function_at(address: int) -> tuple[int, int | None] | None:
    for start, end in zip(FUNCTIONS, ENDS, strict=True):
        if BASE + start <= address < BASE + end:
            return BASE + start, BASE + end
    return None


def _walk(
    arch: Arch,
    registers: dict[int, int],
    memory: SparseMemory,
    *,
    exact: bool = True,
    function_at: FunctionAt | None = _function_at,
    module_at: ModuleAt | None = None,
    notes: list[str] | None = None,
) -> Walk:
    return Walk(
        arch,
        registers,
        memory.read,
        _is_code,
        memory.read,
        stack_range=STACK,
        notes=notes,
        function_at=function_at,
        module_at=module_at,
        exact_pc=exact,
    )


def test_the_strategy_reads_the_callers_registers_from_their_slots() -> None:
    memory = _memory()
    memory.word(SP_VALUE + 40, CALLERS + 0x14)  # ra
    memory.word(SP_VALUE + 32, 0x7FFF00)  # s0
    memory.word(SP_VALUE + 24, 0x1234)  # s1
    registers = {PC: BASE + 0x10, SP: SP_VALUE, RA: BASE + 0x2A, S0: 1, S1: 2, 18: 3}
    caller = strategy.step(_walk(RISCV64, registers, memory))
    assert caller == {PC: CALLERS + 0x14, SP: SP_VALUE + 48, S0: 0x7FFF00, S1: 0x1234, 18: 3}


def test_the_strategy_checks_what_it_found() -> None:
    memory = _memory()
    memory.word(SP_VALUE + 40, BASE + 0x4)  # code, but after no call
    notes: list[str] = []
    registers = {PC: BASE + 0x10, SP: SP_VALUE}
    assert strategy.step(_walk(RISCV64, registers, memory, notes=notes)) is None
    assert notes == ["prologue: [cfa-8] = 0x10004 does not follow a call"]


def test_without_an_analysis_or_symbols_the_strategy_is_silent() -> None:
    memory = _memory()
    notes: list[str] = []
    registers = {X86_64.pc: BASE, X86_64.sp: SP_VALUE}
    assert strategy.step(_walk(X86_64, registers, memory, notes=notes)) is None
    walk = _walk(RISCV64, {PC: BASE, SP: SP_VALUE}, memory, function_at=None, notes=notes)
    assert strategy.step(walk) is None
    assert notes == []


def test_a_function_without_symbol_is_entered_by_a_direct_call_through_the_plt() -> None:
    """f_guard without a symbol: the call at CALLERS+0x10 to the PLT entry, whose GOT slot
    holds f_wrap, which jumps to f_guard, whose prologue stores ra at CFA-8: exactly where
    that call's return address lies.  A return address below it, after an indirect call,
    proves nothing and is passed over."""
    memory = _memory()
    memory.word(SP_VALUE + 8, CALLERS + 0x22)
    memory.word(SP_VALUE + 136, CALLERS + 0x14)
    memory.word(SP_VALUE + 128, 0x7FFF00)
    notes: list[str] = []
    registers = {PC: BASE + 0x5E, SP: SP_VALUE, S1: 5}
    walk = _walk(
        RISCV64, registers, memory, function_at=lambda _: None, module_at=lambda _: 1, notes=notes
    )
    caller = strategy.step(walk)
    assert caller == {PC: CALLERS + 0x14, SP: SP_VALUE + 144, S0: 0x7FFF00, 22: 0, S1: 5}
    assert notes == [f"prologue: entered at {BASE + F_WRAP:#x}, by the call before 0x20014"]


def test_a_call_whose_prologue_saves_ra_elsewhere_proves_nothing() -> None:
    memory = _memory()
    memory.word(SP_VALUE + 128, CALLERS + 0x14)  # not where f_guard keeps ra
    notes: list[str] = []
    walk = _walk(
        RISCV64,
        {PC: BASE + 0x5E, SP: SP_VALUE},
        memory,
        function_at=lambda _: None,
        module_at=lambda _: 1,
        notes=notes,
    )
    assert strategy.step(walk) is None
    assert notes == [
        "prologue: no symbol says where the function of pc 0x1005e starts, and no direct call "
        "on the stack enters a prologue that saved its return address there"
    ]


# -- the leaf check: a return address the function left behind ------------------------------


def test_a_return_address_in_the_pcs_own_function_is_refused() -> None:
    """f_fp's ra after its own call (auipc ra; jalr ra, targeting itself, not f_fp's start)."""
    notes: list[str] = []
    registers = {PC: BASE + 0x2A, SP: SP_VALUE, RA: BASE + 0x2A}
    assert leaf.step(_walk(RISCV64, registers, _memory(), notes=notes)) is None
    assert notes == [
        "leaf: ra = 0x1002a follows a call to 0x10022, not to the function at 0x1001a "
        "holding pc 0x1002a"
    ]


def _x86_memory(call_target: int) -> SparseMemory:
    """A function at 0x400000 with ``call call_target`` at 0x400100 (returns to 0x400105)."""
    memory = SparseMemory()
    memory.put(0x400000, b"\x90" * 0x200)
    relative = (call_target - 0x400105).to_bytes(4, "little", signed=True)
    memory.put(0x400100, b"\xe8" + relative)
    for address in range(*STACK, 8):
        memory.word(address, 0)
    memory.word(SP_VALUE, 0x400105)
    return memory


def _x86_function(address: int) -> tuple[int, int | None] | None:
    return (0x400000, 0x400200) if 0x400000 <= address < 0x400200 else None


def _x86_is_code(address: int) -> bool:
    return 0x400000 <= address < 0x400200


@pytest.mark.parametrize(
    ("call_target", "pc", "function_at", "modules", "accepted"),
    [
        # By symbols: a recursive call stopped at the function's entry...
        (0x400000, 0x400000, _x86_function, None, True),
        # ...but a call to elsewhere: the function's own return address.
        (0x400080, 0x400000, _x86_function, None, False),
        # Without symbols: the call's target at or below it, and it at or below the pc.
        (0x400080, 0x400150, None, (1, 1), False),
        # The pc below the call's target: the call did not enter the pc's function.
        (0x400080, 0x400050, None, (1, 1), False),
        # The call's target is no PLT entry and lies in another module than the pc.
        (0x400080, 0x400150, None, (1, 2), False),
        # A target at or below the pc, the call outside that span: it may have entered it.
        (0x400000, 0x400050, None, (1, 1), True),
    ],
)
def test_the_leaf_checks_rules_on_x86_64(
    call_target: int,
    pc: int,
    function_at: FunctionAt | None,
    modules: tuple[int, int] | None,
    accepted: bool,
) -> None:
    memory = _x86_memory(call_target)
    module_at: ModuleAt | None = None
    if modules is not None:
        low, high = modules

        def module_at(address: int) -> int:
            return low if address < 0x400140 else high

    walk = Walk(
        X86_64,
        {X86_64.pc: pc, X86_64.sp: SP_VALUE},
        memory.read,
        _x86_is_code,
        memory.read,
        stack_range=STACK,
        notes=[],
        function_at=function_at,
        module_at=module_at,
    )
    caller = leaf.step(walk)
    assert (caller is not None) == accepted, walk.notes
    if not accepted:
        (why,) = walk.notes or [""]
        assert why.startswith("leaf: [sp 0x7ff800] = 0x400105 ")


def test_a_stack_full_of_code_pointers_costs_a_bounded_number_of_reads() -> None:
    """Every word above f_guard's frame returns after the call to the PLT entry: none of them
    lies where f_guard keeps ra, and only MAX_ENTRIES prologues are read."""
    memory = _memory()
    for address in range(SP_VALUE + 144, STACK[1], 8):
        memory.word(address, CALLERS + 0x14)
    analyses = []

    def counted(*arguments: object) -> PrologueFrame | str:
        analyses.append(arguments)
        return rv.frame(*arguments)  # type: ignore[arg-type]

    arch = copy.copy(RISCV64)
    arch.prologue = PrologueAnalysis(counted)
    walk = _walk(
        arch,
        {PC: BASE + 0x5E, SP: SP_VALUE},
        memory,
        function_at=lambda _: None,
        module_at=lambda _: 1,
    )
    assert strategy.step(walk) is None
    assert len(analyses) == strategy.MAX_ENTRIES
