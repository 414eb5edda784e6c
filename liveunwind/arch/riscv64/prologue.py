"""riscv64 prologue analysis: a frame read off its function's own instructions.

Debian 12's riscv64 glibc has unwind tables for about 810 of its functions
(cancellation points, assembly); for the others gdb reads the function's
prologue from its first instruction (riscv-tdep.c, ``riscv_scan_prologue``):
``addi sp,sp,-N``, ``sd ra,off(sp)``, ``sd s0,off(sp)``, ``addi s0,sp,N``
and their compressed forms.  This module does the same, in its own way:

- From the function's first instruction, in a straight line, it follows the
  stack pointer, a frame pointer set from it (s0), and which registers still
  hold the caller's values and which were stored where.  The straight line
  ends at the first conditional branch, indirect jump or return: what lies
  beyond depends on the path.  A direct jump goes on at its target; calls
  go on at the next instruction (the callee gives back sp and the
  callee-saved registers as they were; ra and the argument and temporary
  registers are gone), and so does ``ecall``.
- Where the straight line reaches the pc, the state at the pc is exact.
  Where it ends before, the state at its end (the end of the prologue) is
  taken for the state at the pc, as gdb takes it: code compiled the usual
  way moves sp only in its prologue and epilogues, or keeps s0 as a frame
  pointer.  Then the caller's registers must come from the stack: a pc that
  is a return address needs ra saved, and a function that built no frame
  before its first branch (a leaf, or a prologue after a branch) is left to
  the leaf check.
- Where the pc is exact (frame 0, or code a signal interrupted) and the
  straight line from the pc reaches a ``ret`` or a jump out of the
  function, the pc is in an epilogue, or just before one: sp is then the
  CFA less what the instructions up to the ``ret`` add to it, and the
  registers they reload are still in their slots.

Instruction encodings: the RISC-V unprivileged ISA, RV64GC (the base
formats, and the C extension's quadrants 0–2).
"""

from __future__ import annotations

from collections import namedtuple

from liveunwind.arch.base import WORD_MASK, PrologueAnalysis, PrologueFrame, ReadCode

RA, SP, S0, A0 = 1, 2, 8, 10
#: s0–s11: what a function must give back to its caller as it found it (lp64d).
CALLEE_SAVED = (8, 9, *range(18, 28))
#: What a call may change: ra, t0–t6, a0–a7.
_CALL_CLOBBERS = (1, 5, 6, 7, *range(10, 18), *range(28, 32))
#: Bytes read from a function's start: well past the longest prologue seen in
#: glibc (twelve registers stored, a stack-protector load) without reading far.
HEAD_SIZE = 256
#: Bytes read from an exact pc to see whether an epilogue follows.
TAIL_SIZE = 64
#: Instructions the straight line from a function's start is followed at most.
MAX_INSTRUCTIONS = 128

# What an instruction does, as far as the analysis cares.
_ADDI = "addi"  # rd = rs1 + imm
_MOVE = "move"  # rd = rs1
_WRITE = "write"  # rd = something else
_LOAD = "load"  # rd = [rs1 + imm], width bytes
_STORE = "store"  # [rs1 + imm] = rs2 (None: a floating-point register), width bytes
_NONE = "none"  # no integer register written, no memory written (fp arithmetic, fence)
_CALL = "call"  # jal/jalr/c.jalr through ra
_SYSTEM = "system"  # ecall, ebreak: only a0 changes
_RET = "ret"  # jalr zero, 0(ra)
_JUMP = "jump"  # jal zero / c.j (imm: the target's offset), or an indirect jump (imm None)
_BRANCH = "branch"
_OTHER = "other"  # anything else: ends the straight line (unknown, illegal, other link registers)

#: Kinds that end the straight line.
_ENDS = frozenset((_RET, _JUMP, _BRANCH, _OTHER))


class Instruction(namedtuple("Instruction", "kind length rd rs1 rs2 imm width")):
    """One decoded instruction: what it does to registers and memory, and its length."""

    __slots__ = ()
    kind: str
    length: int
    rd: int
    rs1: int
    rs2: int | None
    imm: int | None
    width: int


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def _make(
    kind: str,
    length: int,
    rd: int = 0,
    rs1: int = 0,
    rs2: int | None = None,
    imm: int | None = 0,
    width: int = 0,
) -> Instruction:
    return Instruction(kind, length, rd, rs1, rs2, imm, width)


def decode(code: bytes, offset: int) -> Instruction | None:
    """The instruction at ``offset`` of ``code``, or None where ``code`` ends before it does."""
    if offset + 2 > len(code):
        return None
    half = code[offset] | code[offset + 1] << 8
    if half & 3 != 3:
        return _decode_compressed(half)
    if offset + 4 > len(code):
        return None
    if half & 0x1F == 0x1F:  # 48 bits and longer: none in RV64GC
        return _make(_OTHER, 4)
    word = int.from_bytes(code[offset : offset + 4], "little")
    return _decode_word(word)


def _decode_word(word: int) -> Instruction:
    """A 32-bit instruction."""
    opcode = word & 0x7F
    rd = (word >> 7) & 31
    funct3 = (word >> 12) & 7
    rs1 = (word >> 15) & 31
    rs2 = (word >> 20) & 31
    funct7 = word >> 25
    imm_i = _signed(word >> 20, 12)
    if opcode == 0x13:  # OP-IMM
        return _make(_ADDI, 4, rd, rs1, imm=imm_i) if funct3 == 0 else _make(_WRITE, 4, rd)
    if opcode == 0x33 and funct3 == 0 and funct7 == 0:  # add
        if rs2 == 0:
            return _make(_MOVE, 4, rd, rs1)
        if rs1 == 0:
            return _make(_MOVE, 4, rd, rs2)
        return _make(_WRITE, 4, rd)
    if opcode in (0x1B, 0x33, 0x3B, 0x37, 0x17, 0x2F):  # OP-IMM-32, OP, OP-32, LUI, AUIPC, AMO
        return _make(_WRITE, 4, rd)
    if opcode == 0x03:  # LOAD
        return _make(_LOAD, 4, rd, rs1, imm=imm_i, width=1 << (funct3 & 3))
    if opcode in (0x23, 0x27):  # STORE, STORE-FP
        imm_s = _signed((funct7 << 5) | rd, 12)
        if opcode == 0x23:
            return _make(_STORE, 4, rs1=rs1, rs2=rs2, imm=imm_s, width=1 << (funct3 & 3))
        return _make(_STORE, 4, rs1=rs1, imm=imm_s, width=1 << min(funct3, 4))
    if opcode == 0x53:  # OP-FP: a few write an integer register
        if word >> 27 in (0x14, 0x18, 0x1C):  # compares, conversions to integers, fmv.x/fclass
            return _make(_WRITE, 4, rd)
        return _make(_NONE, 4)
    if opcode in (0x07, 0x0F, 0x43, 0x47, 0x4B, 0x4F):  # LOAD-FP, MISC-MEM, the FMAs
        return _make(_NONE, 4)
    if opcode == 0x63:
        return _make(_BRANCH, 4)
    if opcode == 0x6F:  # JAL
        if rd == RA:
            return _make(_CALL, 4)
        if rd == 0:
            offset = (
                ((word >> 31) & 1) << 20
                | ((word >> 21) & 0x3FF) << 1
                | ((word >> 20) & 1) << 11
                | ((word >> 12) & 0xFF) << 12
            )
            return _make(_JUMP, 4, imm=_signed(offset, 21))
        return _make(_OTHER, 4)  # jal t0: millicode (-msave-restore) and the like
    if opcode == 0x67 and funct3 == 0:  # JALR
        if rd == RA:
            return _make(_CALL, 4)
        if rd == 0:
            return _make(_RET, 4) if rs1 == RA and imm_i == 0 else _make(_JUMP, 4, imm=None)
        return _make(_OTHER, 4)
    if opcode == 0x73:  # SYSTEM: ecall and ebreak, or a CSR read into rd
        return _make(_SYSTEM, 4) if funct3 == 0 else _make(_WRITE, 4, rd)
    return _make(_OTHER, 4)


def _decode_compressed(half: int) -> Instruction:
    """A 16-bit instruction (the C extension, RV64)."""
    quadrant = half & 3
    funct3 = half >> 13
    bit12 = (half >> 12) & 1
    rd = (half >> 7) & 31  # also rs1
    rs2 = (half >> 2) & 31
    rd_short = 8 + ((half >> 2) & 7)  # rd' / rs2' at bits 4:2
    rs1_short = 8 + ((half >> 7) & 7)  # rs1' / rd' at bits 9:7
    if quadrant == 0:
        if half == 0:
            return _make(_OTHER, 2)  # the defined illegal instruction
        word_offset = ((half >> 10) & 7) << 3 | ((half >> 6) & 1) << 2 | ((half >> 5) & 1) << 6
        double_offset = ((half >> 10) & 7) << 3 | ((half >> 5) & 3) << 6
        if funct3 == 0:  # c.addi4spn rd', sp, nzuimm
            nzuimm = (
                ((half >> 11) & 3) << 4
                | ((half >> 7) & 0xF) << 6
                | ((half >> 6) & 1) << 2
                | ((half >> 5) & 1) << 3
            )
            return _make(_ADDI, 2, rd_short, SP, imm=nzuimm) if nzuimm else _make(_OTHER, 2)
        if funct3 == 1:  # c.fld
            return _make(_NONE, 2)
        if funct3 == 2:  # c.lw
            return _make(_LOAD, 2, rd_short, rs1_short, imm=word_offset, width=4)
        if funct3 == 3:  # c.ld
            return _make(_LOAD, 2, rd_short, rs1_short, imm=double_offset, width=8)
        if funct3 == 5:  # c.fsd
            return _make(_STORE, 2, rs1=rs1_short, imm=double_offset, width=8)
        if funct3 == 6:  # c.sw
            return _make(_STORE, 2, rs1=rs1_short, rs2=rd_short, imm=word_offset, width=4)
        if funct3 == 7:  # c.sd
            return _make(_STORE, 2, rs1=rs1_short, rs2=rd_short, imm=double_offset, width=8)
        return _make(_OTHER, 2)
    if quadrant == 1:
        imm6 = _signed(bit12 << 5 | rs2, 6)
        if funct3 == 0:  # c.addi (c.nop with rd 0)
            return _make(_ADDI, 2, rd, rd, imm=imm6)
        if funct3 in (1, 2):  # c.addiw, c.li
            return _make(_WRITE, 2, rd)
        if funct3 == 3:
            if rd != SP:  # c.lui
                return _make(_WRITE, 2, rd)
            imm = (
                bit12 << 9
                | ((half >> 6) & 1) << 4
                | ((half >> 5) & 1) << 6
                | ((half >> 3) & 3) << 7
                | ((half >> 2) & 1) << 5
            )
            return _make(_ADDI, 2, SP, SP, imm=_signed(imm, 10)) if imm else _make(_OTHER, 2)
        if funct3 == 4:  # c.srli, c.srai, c.andi, c.sub, c.xor, c.or, c.and, c.subw, c.addw
            return _make(_WRITE, 2, rs1_short)
        if funct3 == 5:  # c.j
            offset = (
                bit12 << 11
                | ((half >> 11) & 1) << 4
                | ((half >> 9) & 3) << 8
                | ((half >> 8) & 1) << 10
                | ((half >> 7) & 1) << 6
                | ((half >> 6) & 1) << 7
                | ((half >> 3) & 7) << 1
                | ((half >> 2) & 1) << 5
            )
            return _make(_JUMP, 2, imm=_signed(offset, 12))
        return _make(_BRANCH, 2)  # c.beqz, c.bnez
    if quadrant == 2:
        if funct3 == 0:  # c.slli
            return _make(_WRITE, 2, rd)
        if funct3 == 1:  # c.fldsp
            return _make(_NONE, 2)
        if funct3 == 2:  # c.lwsp
            offset = ((half >> 4) & 7) << 2 | bit12 << 5 | ((half >> 2) & 3) << 6
            return _make(_LOAD, 2, rd, SP, imm=offset, width=4)
        if funct3 == 3:  # c.ldsp
            offset = ((half >> 5) & 3) << 3 | bit12 << 5 | ((half >> 2) & 7) << 6
            return _make(_LOAD, 2, rd, SP, imm=offset, width=8)
        if funct3 == 4:
            if not bit12:
                if rs2 == 0:  # c.jr
                    if rd == 0:
                        return _make(_OTHER, 2)
                    return _make(_RET, 2) if rd == RA else _make(_JUMP, 2, imm=None)
                return _make(_MOVE, 2, rd, rs2)  # c.mv
            if rs2 == 0:
                return _make(_SYSTEM, 2) if rd == 0 else _make(_CALL, 2)  # c.ebreak, c.jalr
            return _make(_WRITE, 2, rd)  # c.add
        double_offset = ((half >> 10) & 7) << 3 | ((half >> 7) & 7) << 6
        if funct3 == 5:  # c.fsdsp
            return _make(_STORE, 2, rs1=SP, imm=double_offset, width=8)
        if funct3 == 6:  # c.swsp
            offset = ((half >> 9) & 0xF) << 2 | ((half >> 7) & 3) << 6
            return _make(_STORE, 2, rs1=SP, rs2=rs2, imm=offset, width=4)
        return _make(_STORE, 2, rs1=SP, rs2=rs2, imm=double_offset, width=8)  # c.sdsp
    return _make(_OTHER, 2)  # not reached: quadrant 3 is a 32-bit instruction


class _Lost(Exception):
    """The analysis cannot follow the stack pointer any further."""


class _State:
    """What the instructions so far did: offsets are from the sp at the function's entry.

    ``sp`` is the stack pointer's offset, ``fp`` s0's where s0 was set from
    sp (else None), ``entry`` the registers that still hold the caller's
    values, ``slots`` the caller's values stored on the stack (offset →
    register) and ``saved`` the same by register.
    """

    __slots__ = ("entry", "fp", "saved", "slots", "sp")

    def __init__(self) -> None:
        self.sp = 0
        self.fp: int | None = None
        self.entry = set(range(1, 32))
        self.slots: dict[int, int] = {}
        self.saved: dict[int, int] = {}

    def run(self, insn: Instruction) -> None:
        """Applies one instruction that does not end the straight line; _Lost where sp is lost."""
        kind, rd = insn.kind, insn.rd
        if kind is _ADDI:
            self._add(rd, insn.rs1, insn.imm or 0)
        elif kind is _MOVE:
            self._add(rd, insn.rs1, 0)
        elif kind is _WRITE:
            self._write(rd)
        elif kind is _LOAD:
            self._load(insn)
        elif kind is _STORE:
            self._store(insn)
        elif kind is _CALL:
            self.entry.difference_update(_CALL_CLOBBERS)
        elif kind is _SYSTEM:
            self.entry.discard(A0)

    def _address(self, base: int, imm: int) -> int | None:
        """The entry-sp offset ``imm(base)`` addresses, where base is sp or a frame pointer."""
        if base == SP:
            return self.sp + imm
        if base == S0 and self.fp is not None:
            return self.fp + imm
        return None

    def _add(self, rd: int, rs1: int, imm: int) -> None:
        base = self._address(rs1, imm) if rs1 in (SP, S0) else None
        if rd == SP:
            if base is None:
                raise _Lost(f"sp is set from {'s0' if rs1 == S0 else f'x{rs1}'}")
            self.sp = base
            # What lies below sp now is no longer the frame's.
            for slot in [slot for slot in self.slots if slot < self.sp]:
                del self.saved[self.slots.pop(slot)]
        elif rd == S0:
            self.fp = base
            self.entry.discard(S0)
        elif rd:
            self.entry.discard(rd)

    def _write(self, rd: int) -> None:
        if rd == SP:
            raise _Lost("sp is set by an instruction the analysis does not follow")
        if rd == S0:
            self.fp = None
        if rd:
            self.entry.discard(rd)

    def _load(self, insn: Instruction) -> None:
        """A load: a register reloaded from its own slot holds the caller's value again."""
        rd = insn.rd
        address = self._address(insn.rs1, insn.imm or 0)
        self._write(rd)
        if insn.width == 8 and address is not None and self.slots.get(address) == rd:
            self.entry.add(rd)

    def _store(self, insn: Instruction) -> None:
        """A store: the caller's value of a register, stored in the frame, is saved there."""
        address = self._address(insn.rs1, insn.imm or 0)
        if address is None:
            return  # not the stack as far as the analysis knows
        end = address + insn.width
        for slot in [slot for slot in self.slots if slot < end and address < slot + 8]:
            del self.saved[self.slots.pop(slot)]
        value = insn.rs2
        if (
            value is not None
            and insn.width == 8
            and value in self.entry
            and value not in self.saved
            and self.sp <= address < 0
        ):
            self.saved[value] = address
            self.slots[address] = value

    def frame(self) -> PrologueFrame:
        """The frame as it stands: the CFA from s0 where it is a frame pointer, else from sp."""
        if self.fp is not None:
            register, offset = S0, -self.fp
        else:
            register, offset = SP, -self.sp
        kept = tuple(r for r in (RA, *CALLEE_SAVED) if r in self.entry and r not in self.saved)
        return PrologueFrame(register, offset, tuple(sorted(self.saved.items())), kept)


def frame(
    read: ReadCode, start: int, pc: int, exact: bool, size: int | None
) -> PrologueFrame | str:
    """The frame at ``pc`` of the function entered at ``start``.

    ``read(address, size)`` gives the code (fewer bytes where there is no
    more, never an error); ``exact`` says the pc is where the thread stopped
    rather than a return address; ``size`` is the function's, where known.
    The straight line goes on at the target of a direct jump (an entry that
    only moves its arguments and jumps on, like glibc's ``pthread_join``).
    Returns why not where the code does not tell.
    """
    state = _State()
    address, base = start, start
    code = read(start, HEAD_SIZE)
    end_kind = last_kind = None
    try:
        for _ in range(MAX_INSTRUCTIONS):
            if address == pc:
                break
            insn = decode(code, address - base)
            if insn is None and len(code) == HEAD_SIZE:  # read on
                code, base = read(address, HEAD_SIZE), address
                insn = decode(code, 0)
            if insn is None:
                break
            if address < pc < address + insn.length:
                return f"the pc is not on an instruction boundary from {start:#x}"
            kind = insn.kind
            if kind is _JUMP and insn.imm is not None:
                address = base = (address + insn.imm) & WORD_MASK
                code = read(address, HEAD_SIZE)
                continue
            if kind in _ENDS:
                end_kind = kind
                break
            state.run(insn)
            address += insn.length
            last_kind = kind
    except _Lost as lost:
        return f"{lost} at {address:#x}"
    if state.sp > 0 or (state.fp is not None and state.fp > 0):
        return f"the stack pointer moves up in the prologue ({address:#x})"
    if address == pc:
        # The straight line reached the pc: its state is the pc's.
        if not exact and last_kind is not _CALL:
            return f"the pc follows no call on the straight line from {start:#x}"
        return _with_return_address(state.frame())
    if end_kind is _RET:
        return f"the pc lies past the function's return at {address:#x}"
    if not (state.sp < 0 or state.fp is not None or state.saved):
        return f"no frame built before the first branch ({address:#x})"
    if not exact:
        state.entry.discard(RA)  # a call returned to the pc: ra is the callee's
        return _with_return_address(state.frame())
    return _at_exact_pc(state, read(pc, TAIL_SIZE), pc - start, size)


def _with_return_address(found: PrologueFrame) -> PrologueFrame | str:
    if RA in found.kept or any(register == RA for register, _ in found.saved):
        return found
    return "the return address is neither saved nor in ra"


def _at_exact_pc(
    state: _State, code: bytes, pc_offset: int, size: int | None
) -> PrologueFrame | str:
    """The frame at an exact pc past the prologue: the prologue's, unless an epilogue follows.

    The straight line from the pc is followed to its end (or the function's,
    where its size is known).  A ``ret`` there, or a jump after the stack
    pointer was given back or out of the function, means the pc is in an
    epilogue or just before one: sp is then the CFA less what the
    instructions up to it add, and the registers they reload are still in
    their slots, while the others already hold the caller's values.  A
    branch, a call or a jump inside the function (any direct jump, where the
    function's size is not known) leaves the prologue's frame; an indirect
    jump with sp not given back may be either, and is refused.
    """
    added = 0
    reloaded: set[int] = set()
    offset = 0
    built = state.sp < 0 or state.fp is not None
    while True:
        insn = decode(code, offset)
        if (
            insn is None
            or (size is not None and pc_offset + offset >= size)
            or insn.kind is _BRANCH
            or insn.kind is _CALL
            or insn.kind is _OTHER
        ):
            return _with_return_address(state.frame())
        kind = insn.kind
        if kind is _JUMP and added == 0:
            if insn.imm is None:
                # A jump table in the body, or a tail call once sp was given back.
                if built:
                    return "an indirect jump follows the pc: a tail call or a jump table"
                return _with_return_address(state.frame())
            target = pc_offset + offset + insn.imm
            if size is None or 0 <= target < size:
                return _with_return_address(state.frame())  # a jump inside the function
        if kind is _RET or kind is _JUMP:
            # The function returns, or jumps out of itself (sp given back: a tail call),
            # at the end of this straight line.
            if added < 0:
                return "the stack pointer moves down between the pc and the return"
            saved = tuple((r, o) for r, o in sorted(state.saved.items()) if r in reloaded)
            kept = tuple(r for r in (RA, *CALLEE_SAVED) if r not in reloaded)
            return _with_return_address(PrologueFrame(SP, added, saved, kept))
        if kind is _ADDI and insn.rd == SP and insn.rs1 == SP:
            added += insn.imm or 0
        elif insn.rd == SP and kind in (_ADDI, _MOVE, _WRITE, _LOAD):
            return "an epilogue sets sp from another register"
        elif kind in (_ADDI, _MOVE, _WRITE, _LOAD) and insn.rd:
            reloaded.add(insn.rd)
        offset += insn.length


ANALYSIS = PrologueAnalysis(frame)
