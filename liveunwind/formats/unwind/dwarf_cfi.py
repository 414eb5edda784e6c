"""DWARF call frame information: ``.eh_frame``, ``.eh_frame_hdr`` and ``.debug_frame``.

Sources: DWARF 5 §6.4 (CIE, FDE, the DW_CFA instructions) and the Linux
Standard Base (``.eh_frame`` augmentations, DW_EH_PE pointer encodings,
``.eh_frame_hdr``).  A :class:`CfiTable` decodes one section that it is handed
as bytes and compiles the CFA program of the FDE covering a pc into an
:class:`~liveunwind.formats.unwind.rules.UnwindRule`.  It reads nothing by itself.

The section is untrusted: every length, offset and count is checked against
the buffer before use and every loop is bounded by the bytes it consumes, so
any corruption ends in :class:`~liveunwind.errors.FormatError` naming the
section offset.  Lookups are lazy: with an ``.eh_frame_hdr`` table a lookup
binary-searches that table and decodes one FDE; without one, the first lookup
walks the section once to build a sorted index.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

from liveunwind.errors import FormatError
from liveunwind.formats import leb128
from liveunwind.formats.unwind.rules import (
    SAME_VALUE,
    UNDEFINED,
    CfaRule,
    RegisterRule,
    RegKind,
    UnwindRule,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Literal

    SectionKind = Literal["eh_frame", "debug_frame"]
    ByteOrder = Literal["little", "big"]

# DW_EH_PE pointer encodings (LSB 4.1 "DWARF Extensions"): value format in the
# low nibble, application in bits 4-6, "indirect" in bit 7.
DW_EH_PE_absptr = 0x00
DW_EH_PE_uleb128 = 0x01
DW_EH_PE_sleb128 = 0x09
DW_EH_PE_pcrel = 0x10
DW_EH_PE_textrel = 0x20
DW_EH_PE_datarel = 0x30
DW_EH_PE_funcrel = 0x40
DW_EH_PE_aligned = 0x50
DW_EH_PE_indirect = 0x80
DW_EH_PE_omit = 0xFF

#: Fixed-size value formats: low nibble -> (size, signed); absptr is address-sized.
_FIXED_FORMATS = {0x02: (2, False), 0x03: (4, False), 0x04: (8, False)}
_FIXED_FORMATS.update({0x0A: (2, True), 0x0B: (4, True), 0x0C: (8, True)})

#: Deepest DW_CFA_remember_state nesting accepted (compilers use one or two).
MAX_STATE_DEPTH = 64
#: LEB128 values longer than this are corrupt (a 64-bit value needs ten bytes).
#: Largest register number accepted (x86_64 and aarch64 stay below 200).
_MAX_REGISTER = 0xFFFF

_STRUCT_CACHE: dict[tuple[str, int, bool], struct.Struct] = {}


def _struct(byte_order: ByteOrder, size: int, signed: bool) -> struct.Struct:
    """A cached Struct for one integer of ``size`` bytes."""
    key = (byte_order, size, signed)
    found = _STRUCT_CACHE.get(key)
    if found is None:
        code = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
        code = code if signed else code.upper()
        found = _STRUCT_CACHE[key] = struct.Struct(("<" if byte_order == "little" else ">") + code)
    return found


class Cie:
    """A Common Information Entry: what the FDEs sharing it have in common.

    This, :class:`Fde` and the entry headers are plain classes rather than
    named tuples: a named tuple's class costs 70–170 µs of every cold start.
    A CIE and an FDE are still equal when all their fields are.
    """

    __slots__ = (
        "address_size",
        "augmentation",
        "code_alignment",
        "data_alignment",
        "fde_encoding",
        "has_augmentation_data",
        "lsda_encoding",
        "offset",
        "personality",
        "personality_indirect",
        "program_end",
        "program_start",
        "return_address_register",
        "segment_size",
        "signal_frame",
        "version",
    )

    def __init__(
        self,
        *,
        offset: int,
        version: int,
        augmentation: str,
        code_alignment: int,
        data_alignment: int,
        return_address_register: int,
        address_size: int,
        segment_size: int,
        fde_encoding: int,
        lsda_encoding: int,
        personality: int | None,
        personality_indirect: bool,
        signal_frame: bool,
        has_augmentation_data: bool,
        program_start: int,
        program_end: int,
    ) -> None:
        self.offset = offset
        self.version = version
        self.augmentation = augmentation
        self.code_alignment = code_alignment
        self.data_alignment = data_alignment
        self.return_address_register = return_address_register
        self.address_size = address_size
        self.segment_size = segment_size
        #: DW_EH_PE encodings of FDE addresses and LSDA pointers (absptr without "R"/"L").
        self.fde_encoding = fde_encoding
        self.lsda_encoding = lsda_encoding
        #: Personality routine address; when ``personality_indirect`` it is the
        #: address of a pointer to the routine, which only target memory resolves.
        self.personality = personality
        self.personality_indirect = personality_indirect
        self.signal_frame = signal_frame
        #: Whether FDEs carry augmentation data ("z").
        self.has_augmentation_data = has_augmentation_data
        #: Section offsets of the initial instructions.
        self.program_start = program_start
        self.program_end = program_end

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and _fields(self) == _fields(other)

    def __hash__(self) -> int:
        return hash(_fields(self))


class Fde:
    """A Frame Description Entry: the CFA program of one address range."""

    __slots__ = ("cie", "lsda", "offset", "pc_begin", "pc_end", "program_end", "program_start")

    def __init__(
        self,
        *,
        offset: int,
        pc_begin: int,
        pc_end: int,
        cie: Cie,
        lsda: int | None,
        program_start: int,
        program_end: int,
    ) -> None:
        self.offset = offset
        self.pc_begin = pc_begin
        self.pc_end = pc_end
        self.cie = cie
        #: Language-specific data area address, when the CIE has "L" and it is not omitted.
        self.lsda = lsda
        self.program_start = program_start
        self.program_end = program_end

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and _fields(self) == _fields(other)

    def __hash__(self) -> int:
        return hash(_fields(self))


def _fields(record: Cie | Fde) -> tuple[object, ...]:
    """A CIE's or FDE's fields, in their slots' order."""
    return tuple(getattr(record, name) for name in record.__slots__)


class _Pointers:
    """Decodes DW_EH_PE-encoded pointers at positions of one buffer."""

    __slots__ = ("data", "address", "byte_order", "text_base", "data_base", "mask")

    def __init__(
        self,
        data: bytes | memoryview,
        address: int,
        byte_order: ByteOrder,
        text_base: int | None,
        data_base: int | None,
        mask: int,
    ) -> None:
        self.data = data
        self.address = address  # the virtual address of data[0], for pcrel
        self.byte_order = byte_order
        self.text_base = text_base
        self.data_base = data_base
        self.mask = mask

    def value(self, pos: int, end: int, encoding: int, address_size: int) -> tuple[int, int]:
        """The raw value of the encoding's format at ``pos`` (no base applied)."""
        fmt = encoding & 0x0F
        if fmt in (DW_EH_PE_uleb128, DW_EH_PE_sleb128):
            return leb128.decode(self.data, pos, end, fmt == DW_EH_PE_sleb128)
        if fmt == DW_EH_PE_absptr:
            size, signed = address_size, False
        elif fmt in _FIXED_FORMATS:
            size, signed = _FIXED_FORMATS[fmt]
        else:
            raise FormatError(f"unknown pointer encoding {encoding:#x} at offset {pos:#x}")
        if pos + size > end:
            raise FormatError(f"pointer truncated at offset {pos:#x}")
        return _struct(self.byte_order, size, signed).unpack_from(self.data, pos)[0], pos + size

    def pointer(
        self, pos: int, end: int, encoding: int, address_size: int, func_base: int | None = None
    ) -> tuple[int, bool, int]:
        """Decodes a pointer; returns (value, indirect, next position)."""
        application = encoding & 0x70
        if application == DW_EH_PE_aligned:
            aligned = -(-(self.address + pos) // address_size) * address_size
            pos = aligned - self.address
            encoding = (encoding & DW_EH_PE_indirect) | DW_EH_PE_absptr
        field_address = self.address + pos
        value, after = self.value(pos, end, encoding, address_size)
        if application == DW_EH_PE_pcrel:
            value += field_address
        elif application in (DW_EH_PE_textrel, DW_EH_PE_datarel, DW_EH_PE_funcrel):
            value += self._base(application, func_base, pos)
        elif application not in (DW_EH_PE_absptr, DW_EH_PE_aligned):
            raise FormatError(f"unknown pointer encoding {encoding:#x} at offset {pos:#x}")
        return value & self.mask, bool(encoding & DW_EH_PE_indirect), after

    def _base(self, application: int, func_base: int | None, pos: int) -> int:
        base = {
            DW_EH_PE_textrel: self.text_base,
            DW_EH_PE_datarel: self.data_base,
            DW_EH_PE_funcrel: func_base,
        }[application]
        if base is None:
            raise FormatError(
                f"pointer encoding {application:#x} at offset {pos:#x} needs a base that is unknown"
            )
        return base


class _State:
    """The mutable row of the CFA program: the CFA rule and register rules so far."""

    __slots__ = (
        "args_size",
        "cfa_expression",
        "cfa_offset",
        "cfa_register",
        "ra_signed",
        "registers",
    )

    def __init__(
        self,
        cfa_register: int,
        cfa_offset: int,
        cfa_expression: bytes,
        registers: dict[int, RegisterRule],
        ra_signed: bool,
        args_size: int,
    ) -> None:
        self.cfa_register = cfa_register
        self.cfa_offset = cfa_offset
        self.cfa_expression = cfa_expression
        self.registers = registers
        self.ra_signed = ra_signed
        self.args_size = args_size

    def copy(self) -> _State:
        return _State(
            self.cfa_register,
            self.cfa_offset,
            self.cfa_expression,
            dict(self.registers),
            self.ra_signed,
            self.args_size,
        )


_EMPTY_STATE = _State(-1, 0, b"", {}, False, 0)


class _Program:
    """Runs the DW_CFA instructions of one CIE or FDE over a section buffer."""

    __slots__ = (
        "data",
        "end",
        "cie",
        "pointers",
        "initial",
        "state",
        "stack",
        "loc",
        "mask",
        "func_base",
    )

    def __init__(
        self, table: CfiTable, cie: Cie, initial: _State | None, end: int, loc: int
    ) -> None:
        self.data = table._data
        self.end = end
        self.cie = cie
        self.pointers = table._pointers
        self.initial = initial  # None while running the CIE's own instructions
        self.state = (initial if initial is not None else _EMPTY_STATE).copy()
        self.func_base = loc
        self.stack: list[_State] = []
        self.loc = loc
        self.mask = table._mask

    def run(
        self, pos: int, stop_pc: int | None, on_row: Callable[[int, _State], None] | None
    ) -> None:
        """Executes instructions from ``pos``; stops before a row that starts past ``stop_pc``.

        ``on_row(loc, state)`` is called with each row as the location moves on
        (rows of zero length are not reported).
        """
        data = self.data
        end = self.end
        while pos < end:
            op = data[pos]
            pos += 1
            high = op & 0xC0
            if high == 0x40 or op in _ADVANCES:
                new_loc, pos = self._new_location(op, pos)
                if stop_pc is not None and new_loc > stop_pc:
                    return
                if on_row is not None and new_loc != self.loc:
                    on_row(self.loc, self.state)
                self.loc = new_loc
            elif high == 0x80:
                offset, pos = leb128.decode(data, pos, end, False)
                self._set(op & 0x3F, RegisterRule(RegKind.OFFSET, offset * self.cie.data_alignment))
            elif high == 0xC0:
                self._restore(op & 0x3F, pos)
            else:
                handler = _HANDLERS.get(op)
                if handler is None:
                    raise FormatError(f"unknown DW_CFA instruction {op:#x} at offset {pos - 1:#x}")
                pos = handler(self, pos)

    def _new_location(self, op: int, pos: int) -> tuple[int, int]:
        """Decodes an advance_loc* or set_loc; returns the new location and position."""
        if self.initial is None:
            raise FormatError(f"location change in CIE initial instructions at offset {pos - 1:#x}")
        if op & 0xC0 == 0x40:
            return (self.loc + (op & 0x3F) * self.cie.code_alignment) & self.mask, pos
        if op == 0x01:
            value, _, pos = self.pointers.pointer(
                pos, self.end, self.cie.fde_encoding, self.cie.address_size, self.func_base
            )
            return value, pos
        size = _ADVANCES[op]
        if pos + size > self.end:
            raise FormatError(f"DW_CFA_advance_loc truncated at offset {pos - 1:#x}")
        delta = _struct(self.pointers.byte_order, size, False).unpack_from(self.data, pos)[0]
        return (self.loc + delta * self.cie.code_alignment) & self.mask, pos + size

    # Operand helpers -----------------------------------------------------------

    def uleb(self, pos: int) -> tuple[int, int]:
        return leb128.decode(self.data, pos, self.end, False)

    def sleb(self, pos: int) -> tuple[int, int]:
        return leb128.decode(self.data, pos, self.end, True)

    def register(self, pos: int) -> tuple[int, int]:
        number, after = leb128.decode(self.data, pos, self.end, False)
        if number > _MAX_REGISTER:
            raise FormatError(f"register number {number} out of range at offset {pos:#x}")
        return number, after

    def block(self, pos: int) -> tuple[bytes, int]:
        """A ULEB128 length and that many bytes (a DWARF expression)."""
        length, pos = leb128.decode(self.data, pos, self.end, False)
        if length > self.end - pos:
            raise FormatError(f"expression block of {length} bytes overruns entry at {pos:#x}")
        return bytes(self.data[pos : pos + length]), pos + length

    # State changes -------------------------------------------------------------

    def _set(self, register: int, rule: RegisterRule) -> None:
        self.state.registers[register] = rule

    def _restore(self, register: int, pos: int) -> None:
        """DW_CFA_restore(_extended): back to the CIE's rule for the register."""
        if self.initial is None:
            raise FormatError(f"DW_CFA_restore in CIE initial instructions at offset {pos:#x}")
        rule = self.initial.registers.get(register)
        if rule is None:
            self.state.registers.pop(register, None)
        else:
            self.state.registers[register] = rule

    def define_cfa(self, register: int | None, offset: int | None, pos: int) -> None:
        """def_cfa* instructions; a missing part keeps its value (register+offset rules only).

        A register without an offset before any CFA rule takes offset 0: RISC-V's
        CIEs (gcc's and glibc's) begin with ``DW_CFA_def_cfa_register sp`` alone,
        and gdb and libgcc read it so.
        """
        state = self.state
        if (register is None or offset is None) and (
            state.cfa_expression or (state.cfa_register < 0 and register is None)
        ):
            raise FormatError(f"CFA register/offset change without a register rule at {pos:#x}")
        if register is not None:
            state.cfa_register = register
        if offset is not None:
            state.cfa_offset = offset
        state.cfa_expression = b""

    def remember(self, pos: int) -> None:
        if len(self.stack) >= MAX_STATE_DEPTH:
            raise FormatError(f"DW_CFA_remember_state nested too deep at offset {pos:#x}")
        self.stack.append(self.state.copy())

    def restore_state(self, pos: int) -> None:
        if not self.stack:
            raise FormatError(f"DW_CFA_restore_state without remember_state at offset {pos:#x}")
        remembered = self.stack.pop()
        # args_size is not part of a row; everything else is (including the CFA).
        remembered.args_size = self.state.args_size
        self.state = remembered


def _op_nop(program: _Program, pos: int) -> int:
    return pos


def _op_register_at_offset(
    kind: RegKind, signed: bool, sign: int = 1
) -> Callable[[_Program, int], int]:
    """A handler for the ops ``register, factored offset`` (offset_extended, val_offset, …).

    They differ only in the rule they set, whether the offset is signed, and
    (GNU_negative_offset_extended) its sign.
    """

    def handler(program: _Program, pos: int) -> int:
        register, pos = program.register(pos)
        offset, pos = program.sleb(pos) if signed else program.uleb(pos)
        program._set(register, RegisterRule(kind, sign * offset * program.cie.data_alignment))
        return pos

    return handler


def _op_restore_extended(program: _Program, pos: int) -> int:
    register, after = program.register(pos)
    program._restore(register, pos)
    return after


def _op_undefined(program: _Program, pos: int) -> int:
    register, pos = program.register(pos)
    program._set(register, UNDEFINED)
    return pos


def _op_same_value(program: _Program, pos: int) -> int:
    register, pos = program.register(pos)
    program._set(register, SAME_VALUE)
    return pos


def _op_register(program: _Program, pos: int) -> int:
    register, pos = program.register(pos)
    source, pos = program.register(pos)
    program._set(register, RegisterRule(RegKind.REGISTER, register=source))
    return pos


def _op_remember_state(program: _Program, pos: int) -> int:
    program.remember(pos)
    return pos


def _op_restore_state(program: _Program, pos: int) -> int:
    program.restore_state(pos)
    return pos


def _op_def_cfa(program: _Program, pos: int) -> int:
    register, after = program.register(pos)
    offset, after = program.uleb(after)
    program.define_cfa(register, offset, pos)
    return after


def _op_def_cfa_sf(program: _Program, pos: int) -> int:
    register, after = program.register(pos)
    offset, after = program.sleb(after)
    program.define_cfa(register, offset * program.cie.data_alignment, pos)
    return after


def _op_def_cfa_register(program: _Program, pos: int) -> int:
    register, after = program.register(pos)
    program.define_cfa(register, None, pos)
    return after


def _op_def_cfa_offset(program: _Program, pos: int) -> int:
    offset, after = program.uleb(pos)
    program.define_cfa(None, offset, pos)
    return after


def _op_def_cfa_offset_sf(program: _Program, pos: int) -> int:
    offset, after = program.sleb(pos)
    program.define_cfa(None, offset * program.cie.data_alignment, pos)
    return after


def _op_def_cfa_expression(program: _Program, pos: int) -> int:
    expression, after = program.block(pos)
    if not expression:
        raise FormatError(f"empty DW_CFA_def_cfa_expression at offset {pos:#x}")
    state = program.state
    state.cfa_register, state.cfa_offset, state.cfa_expression = -1, 0, expression
    return after


def _op_expression(program: _Program, pos: int) -> int:
    register, pos = program.register(pos)
    expression, pos = program.block(pos)
    program._set(register, RegisterRule(RegKind.EXPRESSION, expression=expression))
    return pos


def _op_val_expression(program: _Program, pos: int) -> int:
    register, pos = program.register(pos)
    expression, pos = program.block(pos)
    program._set(register, RegisterRule(RegKind.VAL_EXPRESSION, expression=expression))
    return pos


def _op_args_size(program: _Program, pos: int) -> int:
    program.state.args_size, pos = program.uleb(pos)
    return pos


def _op_negate_ra_state(program: _Program, pos: int) -> int:
    """DW_CFA_AARCH64_negate_ra_state (0x2d; GNU_window_save on SPARC, not supported here)."""
    program.state.ra_signed = not program.state.ra_signed
    return pos


#: advance_loc1/2/4, MIPS_advance_loc8 -> operand size; set_loc (0x01) is variable.
_ADVANCES = {0x01: 0, 0x02: 1, 0x03: 2, 0x04: 4, 0x1D: 8}

_HANDLERS: dict[int, Callable[[_Program, int], int]] = {
    0x00: _op_nop,
    0x05: _op_register_at_offset(RegKind.OFFSET, signed=False),
    0x06: _op_restore_extended,
    0x07: _op_undefined,
    0x08: _op_same_value,
    0x09: _op_register,
    0x0A: _op_remember_state,
    0x0B: _op_restore_state,
    0x0C: _op_def_cfa,
    0x0D: _op_def_cfa_register,
    0x0E: _op_def_cfa_offset,
    0x0F: _op_def_cfa_expression,
    0x10: _op_expression,
    0x11: _op_register_at_offset(RegKind.OFFSET, signed=True),
    0x12: _op_def_cfa_sf,
    0x13: _op_def_cfa_offset_sf,
    0x14: _op_register_at_offset(RegKind.VAL_OFFSET, signed=False),
    0x15: _op_register_at_offset(RegKind.VAL_OFFSET, signed=True),
    0x16: _op_val_expression,
    0x2D: _op_negate_ra_state,
    0x2E: _op_args_size,
    0x2F: _op_register_at_offset(RegKind.OFFSET, signed=False, sign=-1),
}


class CfiTable:
    """One ``.eh_frame`` or ``.debug_frame`` section, decoded on demand.

    ``data`` is any bytes-like object holding the whole section (bytes, or a
    memoryview of an mmap — it is never copied); ``section_address`` is its
    link-time address, the base of pcrel pointers.  ``hdr``/``hdr_address``
    are the ``.eh_frame_hdr`` section and its address, when there is one.
    ``data_base``/``text_base`` are the bases of datarel/textrel pointers
    inside the section (``text_base`` None: textrel pointers are an error).
    """

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        section_address: int,
        *,
        kind: SectionKind,
        address_size: int = 8,
        byte_order: ByteOrder = "little",
        hdr: bytes | bytearray | memoryview | None = None,
        hdr_address: int = 0,
        data_base: int = 0,
        text_base: int | None = None,
    ) -> None:
        if kind not in ("eh_frame", "debug_frame"):
            raise ValueError(f"unknown CFI section kind {kind!r}")
        if address_size not in (4, 8):
            raise FormatError(f"unsupported address size {address_size}")
        if byte_order not in ("little", "big"):
            raise ValueError(f"unknown byte order {byte_order!r}")
        self._data = data if isinstance(data, bytes) else memoryview(data).cast("B")
        self._size = len(self._data)
        self.kind = kind
        self.address_size = address_size
        self.byte_order = byte_order
        self._mask = (1 << (8 * address_size)) - 1
        self._pointers = _Pointers(
            self._data, section_address, byte_order, text_base, data_base, self._mask
        )
        self._hdr = _HeaderTable(self, hdr, hdr_address) if hdr is not None else None
        self._cies: dict[int, Cie] = {}
        self._initial_states: dict[int, _State] = {}
        self._index: _RangeIndex | None = None

    # Lookups -------------------------------------------------------------------

    def rule_for(self, pc: int) -> UnwindRule | None:
        """The rule in effect at ``pc`` (section address space), or None if no FDE covers it."""
        fde = self.fde_for(pc)
        return None if fde is None else self._rule(fde, pc)

    def fde_for(self, pc: int) -> Fde | None:
        """The FDE whose range covers ``pc``, or None."""
        if self._hdr is not None and self._hdr.usable():
            offset = self._hdr.lookup(pc)
            if offset is None:
                return None
            fde = self.fde_at(offset)
            return fde if fde.pc_begin <= pc < fde.pc_end else None
        if self._index is None:
            self._index = _RangeIndex(self)
        offset = self._index.lookup(pc)
        return None if offset is None else self.fde_at(offset)

    def rule_from_fde_at(self, offset: int, pc: int) -> UnwindRule:
        """Decodes the FDE at section ``offset`` and runs its program up to ``pc``.

        For indexes that point at FDEs by themselves (Apple compact unwind's
        DWARF escape, libunwind's dynamic tables).  A pc outside the FDE's
        range means the pointer was wrong: FormatError.
        """
        fde = self.fde_at(offset)
        if not fde.pc_begin <= pc < fde.pc_end:
            raise FormatError(
                f"FDE at offset {offset:#x} covers {fde.pc_begin:#x}..{fde.pc_end:#x}, not {pc:#x}"
            )
        return self._rule(fde, pc)

    def rows(self, fde: Fde) -> list[tuple[int, UnwindRule]]:
        """The FDE's table as ``(address, rule)`` rows, like ``readelf --debug-dump=frames-interp``.

        A row holds from its address up to the next row's; rows that would
        start at or past the end of the FDE's range are left out.
        """
        rows: list[tuple[int, UnwindRule]] = []

        def collect(loc: int, state: _State) -> None:
            if fde.pc_begin <= loc < fde.pc_end:
                rows.append((loc, self._compile(fde, state)))

        program = self._program(fde)
        program.run(fde.program_start, None, collect)
        collect(program.loc, program.state)
        return rows

    def entries(self) -> Iterator[Cie | Fde]:
        """Every CIE and FDE of the section in order (for dumps)."""
        offset = 0
        while offset < self._size:
            header = self._header(offset)
            if header is None:
                if self.kind == "eh_frame":
                    return  # the zero terminator
                offset += 4
                continue
            if header.is_cie:
                yield self.cie_at(offset)
            else:
                yield self.fde_at(offset)
            offset = header.end

    # Decoding entries ------------------------------------------------------------

    def _header(self, offset: int) -> _EntryHeader | None:
        """Length and CIE id/pointer of the entry at ``offset``; None for a zero terminator."""
        if offset < 0 or offset + 4 > self._size:
            raise FormatError(f"CFI entry offset {offset:#x} outside the {self._size}-byte section")
        u32 = _struct(self.byte_order, 4, False)
        length = u32.unpack_from(self._data, offset)[0]
        pos = offset + 4
        offset_size = 4
        if length == 0xFFFFFFFF:
            if pos + 8 > self._size:
                raise FormatError(f"64-bit CFI length truncated at offset {offset:#x}")
            length = _struct(self.byte_order, 8, False).unpack_from(self._data, pos)[0]
            pos += 8
            offset_size = 8
        elif length == 0:
            return None
        elif length >= 0xFFFFFFF0:
            raise FormatError(f"reserved CFI length {length:#x} at offset {offset:#x}")
        end = pos + length
        id_size = 8 if offset_size == 8 and self.kind == "debug_frame" else 4
        if length < id_size or end > self._size:
            raise FormatError(
                f"CFI entry at offset {offset:#x} has length {length:#x} "
                f"past the {self._size}-byte section"
            )
        entry_id = _struct(self.byte_order, id_size, False).unpack_from(self._data, pos)[0]
        if self.kind == "eh_frame":
            is_cie = entry_id == 0
            cie_offset = pos - entry_id
        else:
            is_cie = entry_id == (1 << (8 * id_size)) - 1
            cie_offset = entry_id
        return _EntryHeader(offset, pos + id_size, end, is_cie, cie_offset)

    def cie_at(self, offset: int) -> Cie:
        """The CIE at section ``offset`` (cached)."""
        cie = self._cies.get(offset)
        if cie is None:
            header = self._header(offset)
            if header is None or not header.is_cie:
                raise FormatError(f"no CIE at offset {offset:#x}")
            cie = self._cies[offset] = _parse_cie(self, header)
        return cie

    def fde_at(self, offset: int) -> Fde:
        """The FDE at section ``offset``."""
        header = self._header(offset)
        if header is None or header.is_cie:
            raise FormatError(f"no FDE at offset {offset:#x}")
        if header.cie_offset == offset:
            raise FormatError(f"FDE at offset {offset:#x} names itself as its CIE")
        return _parse_fde(self, header, self.cie_at(header.cie_offset))

    # Running programs --------------------------------------------------------------

    def _initial_state(self, cie: Cie) -> _State:
        """The row the CIE's initial instructions set up (cached per CIE)."""
        state = self._initial_states.get(cie.offset)
        if state is None:
            program = _Program(self, cie, None, cie.program_end, 0)
            program.run(cie.program_start, None, None)
            state = self._initial_states[cie.offset] = program.state
        return state

    def _program(self, fde: Fde) -> _Program:
        return _Program(self, fde.cie, self._initial_state(fde.cie), fde.program_end, fde.pc_begin)

    def _rule(self, fde: Fde, pc: int) -> UnwindRule:
        program = self._program(fde)
        program.run(fde.program_start, pc, None)
        return self._compile(fde, program.state)

    def _compile(self, fde: Fde, state: _State) -> UnwindRule:
        """Freezes a program row into an UnwindRule."""
        if not state.cfa_expression and state.cfa_register < 0:
            raise FormatError(f"FDE at offset {fde.offset:#x} leaves the CFA undefined")
        return UnwindRule(
            cfa=CfaRule(state.cfa_register, state.cfa_offset, state.cfa_expression),
            registers=tuple(sorted(state.registers.items())),
            return_address_register=fde.cie.return_address_register,
            signal_frame=fde.cie.signal_frame,
            ra_signed=state.ra_signed,
            args_size=state.args_size,
            start=fde.pc_begin,
            end=fde.pc_end,
        )


class _EntryHeader:
    """Where an entry's parts are: content after the id field, end, CIE or FDE."""

    __slots__ = ("cie_offset", "content", "end", "is_cie", "offset")

    def __init__(self, offset: int, content: int, end: int, is_cie: bool, cie_offset: int) -> None:
        self.offset = offset
        self.content = content
        self.end = end
        self.is_cie = is_cie
        self.cie_offset = cie_offset


def _parse_cie(table: CfiTable, header: _EntryHeader) -> Cie:
    """Decodes a CIE's fixed fields and augmentation data."""
    data, end, offset = table._data, header.end, header.offset
    pos = header.content
    if pos >= end:
        raise FormatError(f"CIE at offset {offset:#x} truncated")
    version = data[pos]
    if version not in (1, 3, 4):
        raise FormatError(f"CIE at offset {offset:#x} has unsupported version {version}")
    nul = bytes(data[pos + 1 : end]).find(b"\0")
    if nul < 0:
        raise FormatError(f"CIE at offset {offset:#x}: unterminated augmentation string")
    augmentation = bytes(data[pos + 1 : pos + 1 + nul]).decode("ascii", "replace")
    pos += 2 + nul
    if "eh" in augmentation:
        raise FormatError(f"CIE at offset {offset:#x}: legacy 'eh' augmentation unsupported")
    address_size, segment_size = table.address_size, 0
    if version == 4:
        if pos + 2 > end:
            raise FormatError(f"CIE at offset {offset:#x} truncated")
        address_size, segment_size = data[pos], data[pos + 1]
        pos += 2
        if address_size not in (4, 8) or segment_size > 8:
            raise FormatError(
                f"CIE at offset {offset:#x}: address size {address_size}, "
                f"segment size {segment_size} unsupported"
            )
    code_alignment, pos = leb128.decode(data, pos, end, False)
    data_alignment, pos = leb128.decode(data, pos, end, True)
    if version == 1:
        if pos >= end:
            raise FormatError(f"CIE at offset {offset:#x} truncated")
        return_address_register, pos = data[pos], pos + 1
    else:
        return_address_register, pos = leb128.decode(data, pos, end, False)
    fields = _CieAugmentation()
    if augmentation.startswith("z"):
        pos = fields.parse(table, augmentation, pos, end, address_size, offset)
    elif augmentation.strip("S"):
        # Without "z" there is no length to skip what we do not know.  gas
        # writes a lone "S" into .debug_frame for signal frames.
        raise FormatError(f"CIE at offset {offset:#x}: unknown augmentation {augmentation!r}")
    else:
        fields.signal_frame = bool(augmentation)
    return Cie(
        offset=offset,
        version=version,
        augmentation=augmentation,
        code_alignment=code_alignment,
        data_alignment=data_alignment,
        return_address_register=return_address_register,
        address_size=address_size,
        segment_size=segment_size,
        fde_encoding=fields.fde_encoding,
        lsda_encoding=fields.lsda_encoding,
        personality=fields.personality,
        personality_indirect=fields.personality_indirect,
        signal_frame=fields.signal_frame,
        has_augmentation_data=augmentation.startswith("z"),
        program_start=pos,
        program_end=end,
    )


class _CieAugmentation:
    """The fields a "z" augmentation string announces (LSB: z, L, P, R, S)."""

    def __init__(self) -> None:
        self.fde_encoding = DW_EH_PE_absptr
        self.lsda_encoding = DW_EH_PE_omit
        self.personality: int | None = None
        self.personality_indirect = False
        self.signal_frame = False

    def parse(
        self, table: CfiTable, augmentation: str, pos: int, end: int, address_size: int, at: int
    ) -> int:
        """Reads the augmentation data; returns the position of the initial instructions."""
        length, pos = leb128.decode(table._data, pos, end, False)
        data_end = pos + length
        if data_end > end:
            raise FormatError(f"CIE at offset {at:#x}: augmentation data overruns the entry")
        for letter in augmentation[1:]:
            if letter == "S":
                self.signal_frame = True
            elif letter in "LPR":
                pos = self._encoded_field(table, letter, pos, data_end, address_size, at)
            else:
                break  # unknown (e.g. aarch64 "B"): the length lets us skip the rest
        return data_end

    def _encoded_field(
        self, table: CfiTable, letter: str, pos: int, end: int, address_size: int, at: int
    ) -> int:
        if pos >= end:
            raise FormatError(f"CIE at offset {at:#x}: augmentation data truncated")
        encoding = table._data[pos]
        pos += 1
        if letter == "L":
            self.lsda_encoding = encoding
        elif letter == "R":
            if encoding == DW_EH_PE_omit or encoding & DW_EH_PE_indirect:
                raise FormatError(f"CIE at offset {at:#x}: FDE encoding {encoding:#x} unusable")
            self.fde_encoding = encoding
        elif encoding != DW_EH_PE_omit:
            self.personality, self.personality_indirect, pos = table._pointers.pointer(
                pos, end, encoding, address_size
            )
        return pos


def _parse_fde(table: CfiTable, header: _EntryHeader, cie: Cie) -> Fde:
    """Decodes an FDE's range and LSDA pointer."""
    pos, end = header.content + cie.segment_size, header.end
    pointers = table._pointers
    pc_begin, _, pos = pointers.pointer(pos, end, cie.fde_encoding, cie.address_size)
    pc_range, pos = pointers.value(pos, end, cie.fde_encoding, cie.address_size)
    if pc_range < 0:
        raise FormatError(f"FDE at offset {header.offset:#x} has a negative range")
    lsda = None
    if cie.has_augmentation_data:
        length, pos = leb128.decode(table._data, pos, end, False)
        data_end = pos + length
        if data_end > end:
            raise FormatError(f"FDE at offset {header.offset:#x}: augmentation data overruns")
        if cie.lsda_encoding != DW_EH_PE_omit and length:
            lsda, _, _ = pointers.pointer(
                pos, data_end, cie.lsda_encoding, cie.address_size, func_base=pc_begin
            )
        pos = data_end
    return Fde(
        offset=header.offset,
        pc_begin=pc_begin,
        pc_end=min(pc_begin + pc_range, table._mask + 1),
        cie=cie,
        lsda=lsda,
        program_start=pos,
        program_end=end,
    )


class _RangeIndex:
    """Sorted FDE ranges of a whole section, for sections without a search table."""

    def __init__(self, table: CfiTable) -> None:
        ranges = sorted(
            (entry.pc_begin, entry.pc_end, entry.offset)
            for entry in table.entries()
            if isinstance(entry, Fde) and entry.pc_end > entry.pc_begin
        )
        self.begins = [begin for begin, _, _ in ranges]
        self.ends = [end for _, end, _ in ranges]
        self.offsets = [offset for _, _, offset in ranges]
        # reach[i]: the furthest end among ranges 0..i, so overlapping (nested)
        # ranges are found without scanning the whole list.
        self.reach: list[int] = []
        furthest = 0
        for end in self.ends:
            furthest = max(furthest, end)
            self.reach.append(furthest)

    def lookup(self, pc: int) -> int | None:
        """Offset of the FDE covering ``pc`` (the one starting last, if several do)."""
        index = bisect_right(self.begins, pc) - 1
        while index >= 0 and self.reach[index] > pc:
            if self.ends[index] > pc:
                return self.offsets[index]
            index -= 1
        return None


class _HeaderTable:
    """The binary-search table of ``.eh_frame_hdr`` (LSB 4.1 ".eh_frame_hdr")."""

    def __init__(
        self, table: CfiTable, hdr: bytes | bytearray | memoryview, hdr_address: int
    ) -> None:
        self._table = table
        self._data = hdr if isinstance(hdr, bytes) else memoryview(hdr).cast("B")
        # datarel in .eh_frame_hdr is relative to the start of .eh_frame_hdr.
        self._pointers = _Pointers(
            self._data, hdr_address, table.byte_order, None, hdr_address, table._mask
        )
        self._parsed = False
        self._count = 0
        self._encoding = DW_EH_PE_omit
        self._start = 0
        self._entry_size = 0  # 0: variable-size entries, decoded into _entries
        self._entries: list[tuple[int, int]] = []

    def usable(self) -> bool:
        """Whether the header has a search table (ld omits it when it cannot build one)."""
        if not self._parsed:
            self._parse()
        return self._encoding != DW_EH_PE_omit

    def _parse(self) -> None:
        data, size = self._data, len(self._data)
        if size < 4 or data[0] != 1:
            raise FormatError(".eh_frame_hdr is truncated or has an unknown version")
        frame_encoding, count_encoding, table_encoding = data[1], data[2], data[3]
        pos = 4
        if frame_encoding != DW_EH_PE_omit:
            _, _, pos = self._pointers.pointer(pos, size, frame_encoding, self._table.address_size)
        if count_encoding == DW_EH_PE_omit or table_encoding == DW_EH_PE_omit:
            self._parsed = True
            return
        if table_encoding & DW_EH_PE_indirect:
            raise FormatError(f".eh_frame_hdr table encoding {table_encoding:#x} is indirect")
        count, _, pos = self._pointers.pointer(pos, size, count_encoding, 8)
        entry_size = self._fixed_size(table_encoding)
        minimum = entry_size or 2  # a variable-size entry still takes two bytes
        if count > (size - pos) // minimum:
            raise FormatError(f".eh_frame_hdr claims {count} entries in {size - pos} bytes")
        self._count, self._start, self._entry_size = count, pos, entry_size
        self._encoding = table_encoding
        if not entry_size:
            self._entries = [self._decode_next() for _ in range(count)]
        self._parsed = True

    def _fixed_size(self, encoding: int) -> int:
        """Bytes per table entry, or 0 when entries vary in size (LEB128, aligned)."""
        fmt = encoding & 0x0F
        if (encoding & 0x70) == DW_EH_PE_aligned or fmt in (DW_EH_PE_uleb128, DW_EH_PE_sleb128):
            return 0
        if fmt == DW_EH_PE_absptr:
            return 2 * self._table.address_size
        if fmt in _FIXED_FORMATS:
            return 2 * _FIXED_FORMATS[fmt][0]
        raise FormatError(f".eh_frame_hdr table encoding {encoding:#x} unknown")

    def _decode_next(self) -> tuple[int, int]:
        """Decodes the variable-size entry at ``_start`` and moves past it."""
        pc, _, pos = self._pointers.pointer(
            self._start, len(self._data), self._encoding, self._table.address_size
        )
        fde, _, self._start = self._pointers.pointer(
            pos, len(self._data), self._encoding, self._table.address_size
        )
        return pc, fde

    def _entry(self, index: int) -> tuple[int, int]:
        if not self._entry_size:
            return self._entries[index]
        pos = self._start + index * self._entry_size
        end = pos + self._entry_size
        size = self._table.address_size
        pc, _, pos = self._pointers.pointer(pos, end, self._encoding, size)
        fde, _, _ = self._pointers.pointer(pos, end, self._encoding, size)
        return pc, fde

    def lookup(self, pc: int) -> int | None:
        """Section offset of the last FDE starting at or before ``pc``, or None."""
        low, high = 0, self._count
        while low < high:
            middle = (low + high) // 2
            if self._entry(middle)[0] <= pc:
                low = middle + 1
            else:
                high = middle
        if low == 0:
            return None
        return self._entry(low - 1)[1] - self._table._pointers.address
