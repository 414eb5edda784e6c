"""SFrame (``.sframe``) decoder: versions 1, 2 and 3; x86_64 and aarch64 (both byte orders).

SFrame describes, per function, rows of "from this pc on: CFA = base + n, FP and
RA saved here".  This module turns those rows into :class:`UnwindRule` for the
stepper and into :class:`SFrameFunction` records for dump commands.  It is pure:
the caller hands in the section bytes and the section's link-time address; the
decoder never reads files or target memory.

The section comes from untrusted files, so the constructor only validates the
header and the extents of the two sub-sections (constant time); every FDE and
FRE is bounds-checked when it is read, and corruption raises
:class:`~liveunwind.errors.FormatError` naming the section offset and field.

Layout facts (binutils ``include/sframe.h``, SFrame specification v1-v3):

- header (28 bytes + auxiliary header); ``fdeoff``/``freoff`` count from its end;
- FDEs: v1 17 bytes, v2 20 bytes (adds the repeat-block size), v3 a 16-byte
  index entry whose 5-byte attribute record opens the function's FRE block;
- a function's start is a signed offset from the section start, or - with
  ``SFRAME_F_FDE_FUNC_START_PCREL`` (v2 from binutils 2.45, v3) - from the FDE's
  own start-address field;
- FRE: start offset (1, 2 or 4 bytes), info byte, then N data words of 1, 2 or
  4 bytes.  Default FDEs carry CFA offset, then RA offset unless the header
  fixes it (x86_64), then FP offset.  v3 flexible FDEs carry (control word,
  offset) pairs for CFA, RA and FP, with a single zero word as RA padding.
  An FRE without data words means the return address is undefined: the
  outermost frame.
"""

from __future__ import annotations

import struct
from collections import namedtuple
from collections.abc import Iterator
from enum import Enum

from liveunwind.arch import Arch, arch_by_sframe_abi
from liveunwind.errors import FormatError
from liveunwind.formats import leb128
from liveunwind.formats.unwind.rules import CfaRule, RegisterRule, RegKind, UnwindRule

MAGIC = 0xDEE2
F_FDE_SORTED = 0x1
F_FRAME_POINTER = 0x2
F_FDE_FUNC_START_PCREL = 0x4
#: Flags each version defines; any other bit means a format we do not know.
_KNOWN_FLAGS = {1: F_FDE_SORTED | F_FRAME_POINTER, 2: 0x7, 3: F_FDE_SORTED | F_FDE_FUNC_START_PCREL}
_FLAG_NAMES = (
    (F_FDE_SORTED, "SFRAME_F_FDE_SORTED"),
    (F_FRAME_POINTER, "SFRAME_F_FRAME_POINTER"),
    (F_FDE_FUNC_START_PCREL, "SFRAME_F_FDE_FUNC_START_PCREL"),
)

_HEADER_SIZE = 28
_FDE_SIZE = {1: 17, 2: 20, 3: 16}
_V3_ATTR_SIZE = 5
#: v1 FDEs have no repeat-block size; PCMASK FDEs there describe 16-byte PLT entries.
_V1_REP_SIZE = 16
_MIN_FRE_SIZE = 2
_ADDRESS_MASK = (1 << 64) - 1
#: FRE start-address field per FRE type, and data-word size per size code.
_FRE_ADDR_FORMATS = {0: "B", 1: "H", 2: "I"}
_WORD_FORMATS = {0: "b", 1: "h", 2: "i"}

_DW_OP_DEREF = 0x06
_DW_OP_BREG0 = 0x70
_DW_OP_BREGX = 0x92


class PcType(Enum):
    """How FRE start addresses are matched against a pc."""

    INC = 0  # offsets from the function start
    MASK = 1  # offsets inside a repeated block (PLT entries): pc - start mod rep_size


class FdeType(Enum):
    """How an FRE's data words are read (v3; earlier versions only have DEFAULT)."""

    DEFAULT = 0
    FLEX = 1


class LocKind(Enum):
    """Where a row says the CFA, FP or RA is; the values are objdump's column marks."""

    UNTRACKED = "u"  # no data word: FP keeps its value, aarch64 RA is still in LR
    FIXED = "f"  # at CFA + the header's fixed offset (x86_64 RA)
    PADDING = "U"  # v3 flexible FDE padding word: RA at its default place
    UNDEFINED = "RA undefined"  # the row has no data words: outermost frame
    CFA_SLOT = "c"  # saved in memory at CFA + offset
    REGISTER = "r"  # the value is register + offset
    REGISTER_DEREF = "(r)"  # saved in memory at register + offset


class Location(namedtuple("Location", "kind register offset", defaults=(-1, 0))):
    """One decoded recovery location; ``register`` is a DWARF number when used."""

    __slots__ = ()
    kind: LocKind
    register: int
    offset: int


_UNTRACKED = Location(LocKind.UNTRACKED)
_UNDEFINED = Location(LocKind.UNDEFINED)


class SFrameRow(namedtuple("SFrameRow", "offset cfa fp ra ra_signed")):
    """One FRE.  ``offset`` is relative to the function start (PcType.INC) or to
    the repeat block (PcType.MASK).  An outermost row has ``ra.kind`` UNDEFINED and
    untracked CFA and FP."""

    __slots__ = ()
    offset: int
    cfa: Location
    fp: Location
    ra: Location
    ra_signed: bool

    @property
    def outermost(self) -> bool:
        return self.ra.kind is LocKind.UNDEFINED


class SFrameFunction(
    namedtuple(
        "SFrameFunction",
        "index start size pc_type fde_type rep_size pauth_key_b signal_frame rows",
    )
):
    """One FDE with its rows; addresses are in the section's address space."""

    __slots__ = ()
    index: int  # the FDE's position in the section (shadows tuple.index)
    start: int
    size: int
    pc_type: PcType
    fde_type: FdeType
    rep_size: int
    pauth_key_b: bool
    signal_frame: bool
    rows: tuple[SFrameRow, ...]

    @property
    def end(self) -> int:
        return self.start + self.size


class _Fde:
    """The fixed part of one FDE, before its rows are read."""

    __slots__ = ("fre_pos", "index", "info", "info2", "num_fres", "rep_size", "size", "start")

    def __init__(
        self,
        index: int,
        start: int,
        size: int,
        num_fres: int,
        info: int,
        info2: int,
        rep_size: int,
        fre_pos: int,
    ) -> None:
        self.index = index
        self.start = start
        self.size = size
        self.num_fres = num_fres
        self.info = info
        self.info2 = info2
        self.rep_size = rep_size
        #: Section offset of the first FRE.
        self.fre_pos = fre_pos


class SFrameSection:
    """A ``.sframe`` section: header validated at construction, the rest on demand.

    ``data`` is any bytes-like object holding the section (it is not copied);
    ``section_address`` is the section's link-time virtual address, so that pcs
    given to :meth:`rule_for` and addresses returned are in the same
    (module-relative, for PIE) address space as the ELF file's symbols.
    """

    def __init__(self, data: bytes | bytearray | memoryview, section_address: int) -> None:
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        self._data = view
        self.section_address = section_address
        self._parse_header()

    # -- header ------------------------------------------------------------------

    def _parse_header(self) -> None:
        size = len(self._data)
        if size < _HEADER_SIZE:
            raise FormatError(
                f".sframe: {size} bytes is shorter than the {_HEADER_SIZE}-byte header"
            )
        magic = bytes(self._data[0:2])
        if magic == b"\xe2\xde":
            self._endian = "<"
        elif magic == b"\xde\xe2":
            self._endian = ">"
        else:
            raise FormatError(f".sframe+0x0: bad magic {magic.hex()} (want 0xdee2)")
        fields = struct.unpack_from(self._endian + "BBBbbBIIIII", self._data, 2)
        (self.version, self.flags, abi_id, self.fixed_fp_offset, self.fixed_ra_offset) = fields[:5]
        (self.auxhdr_len, self.num_fdes, self.num_fres, self.fre_len, fdeoff, freoff) = fields[5:]
        if self.version not in _FDE_SIZE:
            raise FormatError(f".sframe+0x2: unsupported SFrame version {self.version}")
        if self.flags & ~_KNOWN_FLAGS[self.version]:
            raise FormatError(
                f".sframe+0x3: unknown flags {self.flags:#x} for version {self.version}"
            )
        arch = arch_by_sframe_abi(abi_id)
        if arch is None:
            raise FormatError(f".sframe+0x4: unsupported ABI/arch id {abi_id}")
        #: The architecture of the ABI id, whose DWARF numbers the rules use.
        self._arch: Arch = arch
        if arch.sframe_abis[abi_id] != ("big" if self._endian == ">" else "little"):
            raise FormatError(f".sframe+0x4: ABI/arch id {abi_id} contradicts the byte order")
        self.abi_arch = abi_id
        header_end = _HEADER_SIZE + self.auxhdr_len
        self._fde_size = _FDE_SIZE[self.version]
        self._fde_pos = header_end + fdeoff
        self._fre_pos = header_end + freoff
        self._fre_end = self._fre_pos + self.fre_len
        self._check_extent("FDE sub-section", self._fde_pos, self.num_fdes * self._fde_size)
        self._check_extent("FRE sub-section", self._fre_pos, self.fre_len)
        attributes = self.num_fdes * _V3_ATTR_SIZE if self.version == 3 else 0
        if self.num_fres * _MIN_FRE_SIZE + attributes > self.fre_len:
            raise FormatError(
                f".sframe+0xc: {self.num_fres} FREs cannot fit in {self.fre_len} bytes"
            )

    def _check_extent(self, what: str, start: int, length: int) -> None:
        if start + length > len(self._data):
            raise FormatError(
                f".sframe: {what} at {start:#x}+{length:#x} runs past the section end "
                f"({len(self._data):#x})"
            )

    @property
    def arch(self) -> str:
        """The architecture's name (``x86_64``, ``aarch64``), as liveunwind.arch has it."""
        return self._arch.name

    @property
    def big_endian(self) -> bool:
        return self._endian == ">"

    @property
    def is_sorted(self) -> bool:
        return bool(self.flags & F_FDE_SORTED)

    # -- FDEs ----------------------------------------------------------------------

    def _fde_start(self, index: int) -> int:
        """Start address of FDE ``index``: cheap, for the binary search."""
        pos = self._fde_pos + index * self._fde_size
        fmt = "q" if self.version == 3 else "i"
        (value,) = struct.unpack_from(self._endian + fmt, self._data, pos)
        base = self.section_address
        if self.flags & F_FDE_FUNC_START_PCREL:
            base += pos
        return (base + value) & _ADDRESS_MASK

    def _read_fde(self, index: int) -> _Fde:
        pos = self._fde_pos + index * self._fde_size
        endian = self._endian
        if self.version == 3:
            size, fre_off = struct.unpack_from(endian + "II", self._data, pos + 8)
            attr_pos = self._fre_offset(index, fre_off, _V3_ATTR_SIZE)
            num_fres, info, info2, rep_size = struct.unpack_from(
                endian + "HBBB", self._data, attr_pos
            )
            fre_pos = attr_pos + _V3_ATTR_SIZE
        else:
            size, fre_off, num_fres, info = struct.unpack_from(endian + "IIIB", self._data, pos + 4)
            info2 = 0
            rep_size = self._data[pos + 17] if self.version == 2 else _V1_REP_SIZE
            fre_pos = self._fre_offset(index, fre_off, 0)
        if num_fres > self.num_fres:
            raise FormatError(
                f".sframe+{pos:#x}: FDE {index} claims {num_fres} FREs, the section has "
                f"{self.num_fres}"
            )
        return _Fde(index, self._fde_start(index), size, num_fres, info, info2, rep_size, fre_pos)

    def _fre_offset(self, index: int, fre_off: int, need: int) -> int:
        pos = self._fre_pos + fre_off
        if fre_off > self.fre_len or pos + need > self._fre_end:
            raise FormatError(
                f".sframe: FDE {index} FRE offset {fre_off:#x} is outside the FRE sub-section "
                f"({self.fre_len:#x} bytes)"
            )
        return pos

    def _find_fde(self, pc: int) -> _Fde | None:
        """The FDE covering ``pc``: binary search when sorted, else one linear pass."""
        if self.is_sorted:
            low, high = 0, self.num_fdes
            while low < high:
                middle = (low + high) // 2
                if self._fde_start(middle) <= pc:
                    low = middle + 1
                else:
                    high = middle
            candidates: range = range(low - 1, low) if low else range(0)
        else:
            candidates = range(self.num_fdes)
        for index in candidates:
            start = self._fde_start(index)
            if start <= pc:
                fde = self._read_fde(index)
                if pc < start + fde.size:
                    return fde
        return None

    # -- FREs ----------------------------------------------------------------------

    def _rows(self, fde: _Fde) -> Iterator[SFrameRow]:
        """Decodes the FREs of ``fde`` in order; start offsets must not decrease."""
        fre_type = fde.info & 0xF
        addr_format = _FRE_ADDR_FORMATS.get(fre_type)
        if addr_format is None:
            raise FormatError(f".sframe: FDE {fde.index} has unknown FRE type {fre_type}")
        addr_format = self._endian + addr_format
        addr_size = struct.calcsize(addr_format)
        flex = self._fde_type(fde) is FdeType.FLEX
        decode = self._flex_row if flex else self._default_row
        pos, previous = fde.fre_pos, 0
        for number in range(fde.num_fres):
            if pos + addr_size + 1 > self._fre_end:
                raise FormatError(f".sframe+{pos:#x}: FDE {fde.index} FRE {number} is truncated")
            (offset,) = struct.unpack_from(addr_format, self._data, pos)
            info = self._data[pos + addr_size]
            words, pos = self._data_words(fde, number, info, pos + addr_size + 1)
            if offset < previous:
                raise FormatError(
                    f".sframe: FDE {fde.index} FRE {number} starts at {offset:#x}, before "
                    f"the previous FRE ({previous:#x})"
                )
            previous = offset
            yield decode(offset, info, words, fde.index)

    def _data_words(
        self, fde: _Fde, number: int, info: int, pos: int
    ) -> tuple[tuple[int, ...], int]:
        """Reads the signed data words after an FRE's info byte; returns them and the next pos."""
        count = (info >> 1) & 0xF
        word_format = _WORD_FORMATS.get((info >> 5) & 0x3)
        if word_format is None:
            raise FormatError(f".sframe+{pos - 1:#x}: FDE {fde.index} FRE {number}: bad word size")
        fmt = f"{self._endian}{count}{word_format}"
        end = pos + struct.calcsize(fmt)
        if end > self._fre_end:
            raise FormatError(
                f".sframe+{pos:#x}: FDE {fde.index} FRE {number} data words run past the FRE "
                "sub-section"
            )
        words = struct.unpack_from(fmt, self._data, pos)
        return words, end

    def _fde_type(self, fde: _Fde) -> FdeType:
        if self.version < 3:
            return FdeType.DEFAULT
        code = fde.info2 & 0x1F
        if code > FdeType.FLEX.value:
            raise FormatError(f".sframe: FDE {fde.index} has unknown FDE type {code}")
        return FdeType(code)

    def _default_row(self, offset: int, info: int, words: tuple[int, ...], index: int) -> SFrameRow:
        """CFA offset; RA offset unless the header fixes RA; FP offset unless fixed."""
        signed = bool(info >> 7)
        if not words:
            return SFrameRow(offset, _UNTRACKED, _UNTRACKED, _UNDEFINED, signed)
        if len(words) > 3:
            raise FormatError(f".sframe: FDE {index}: FRE at {offset:#x} has {len(words)} words")
        arch = self._arch
        cfa = Location(LocKind.REGISTER, arch.sp if info & 1 else arch.fp, words[0])
        rest = list(words[1:])
        if self.fixed_ra_offset:
            ra = Location(LocKind.FIXED, offset=self.fixed_ra_offset)
        else:
            ra = Location(LocKind.CFA_SLOT, offset=rest.pop(0)) if rest else _UNTRACKED
        if self.fixed_fp_offset:
            fp = Location(LocKind.CFA_SLOT, offset=self.fixed_fp_offset)
        else:
            fp = Location(LocKind.CFA_SLOT, offset=rest[0]) if rest else _UNTRACKED
        return SFrameRow(offset, cfa, fp, ra, signed)

    def _flex_row(self, offset: int, info: int, words: tuple[int, ...], index: int) -> SFrameRow:
        """(control, offset) pairs for CFA, RA, FP; a lone zero control word pads RA."""
        signed = bool(info >> 7)
        if not words:
            return SFrameRow(offset, _UNTRACKED, _UNTRACKED, _UNDEFINED, signed)
        word_bits = 8 << ((info >> 5) & 0x3)
        where = f".sframe: FDE {index}: flexible FRE at {offset:#x}"
        if len(words) < 2:
            raise FormatError(f"{where} has no CFA offset")
        cfa = _flex_location(words[0], words[1], word_bits, where)
        position = 2
        if len(words) > position and words[position] == 0:
            ra, position = Location(LocKind.PADDING), position + 1
        elif len(words) > position:
            ra, position = self._flex_pair(words, position, word_bits, where), position + 2
        elif self.fixed_ra_offset:
            ra = Location(LocKind.FIXED, offset=self.fixed_ra_offset)
        else:
            ra = _UNTRACKED
        fp = _UNTRACKED
        if len(words) > position:
            fp, position = self._flex_pair(words, position, word_bits, where), position + 2
        if position != len(words):
            raise FormatError(f"{where} has {len(words)} data words, expected {position}")
        return SFrameRow(offset, cfa, fp, ra, signed)

    @staticmethod
    def _flex_pair(words: tuple[int, ...], position: int, bits: int, where: str) -> Location:
        if position + 1 >= len(words):
            raise FormatError(f"{where}: control word {position} has no offset")
        return _flex_location(words[position], words[position + 1], bits, where)

    # -- public queries ----------------------------------------------------------------

    def functions(self) -> Iterator[SFrameFunction]:
        """Every FDE in table order with all its rows, for dumps and tests.

        The FDEs together may not claim more FREs than the header counts, so a
        corrupt table cannot make the dump decode the same rows over and over.
        """
        claimed = 0
        for index in range(self.num_fdes):
            fde = self._read_fde(index)
            claimed += fde.num_fres
            if claimed > self.num_fres:
                raise FormatError(
                    f".sframe: FDEs 0-{index} claim {claimed} FREs, the header counts "
                    f"{self.num_fres}"
                )
            yield self._function(fde)

    def function_for(self, pc: int) -> SFrameFunction | None:
        """The function covering ``pc`` with all its rows, or None.

        The stepper can use this for v3 signal-trampoline FDEs, which may have no
        rows at all (:meth:`rule_for` returns None there) but still say
        ``signal_frame``.
        """
        fde = self._find_fde(pc)
        return None if fde is None else self._function(fde)

    def _function(self, fde: _Fde) -> SFrameFunction:
        return SFrameFunction(
            index=fde.index,
            start=fde.start,
            size=fde.size,
            pc_type=_pc_type(fde),
            fde_type=self._fde_type(fde),
            rep_size=fde.rep_size,
            pauth_key_b=self._arch.pointer_auth and bool((fde.info >> 5) & 1),
            signal_frame=self._signal_frame(fde),
            rows=tuple(self._rows(fde)),
        )

    def rule_for(self, pc: int) -> UnwindRule | None:
        """The unwind rule at ``pc`` (section address space), or None if no row covers it.

        Costs a binary search over the FDE table (a linear pass when the section
        is not sorted) plus decoding the covering function's FREs up to ``pc``.
        """
        fde = self._find_fde(pc)
        if fde is None:
            return None
        offset = pc - fde.start
        if _pc_type(fde) is PcType.MASK:
            if fde.rep_size == 0:
                raise FormatError(f".sframe: FDE {fde.index} is PCMASK with a zero block size")
            offset %= fde.rep_size
        covering = None
        for row in self._rows(fde):
            if row.offset > offset:
                break
            covering = row
        if covering is None:
            return None
        signal = self._signal_frame(fde)
        return self._unwind_rule(covering, fde.start, fde.start + fde.size, signal)

    def _signal_frame(self, fde: _Fde) -> bool:
        """Only v3 defines the signal-frame bit (bit 7 of the info byte)."""
        return self.version == 3 and bool(fde.info >> 7)

    # -- rows to rules ---------------------------------------------------------------

    def _unwind_rule(self, row: SFrameRow, start: int, end: int, signal: bool) -> UnwindRule:
        arch = self._arch
        ra = arch.return_address
        signed = row.ra_signed and arch.pointer_auth
        if row.outermost:
            # Nothing to recover: the walk ends here, the CFA is only a placeholder.
            cfa = CfaRule(register=arch.sp, offset=0)
            registers: tuple[tuple[int, RegisterRule], ...] = (
                (ra, RegisterRule(RegKind.UNDEFINED)),
            )
            return UnwindRule(cfa, registers, ra, signal, signed, start=start, end=end)
        rules = {ra: self._ra_rule(row.ra)}
        if row.fp.kind is not LocKind.UNTRACKED:
            rules[arch.fp] = _register_rule(row.fp)
        return UnwindRule(
            _cfa_rule(row.cfa),
            tuple(sorted(rules.items())),
            ra,
            signal_frame=signal,
            ra_signed=signed,
            start=start,
            end=end,
        )

    def _ra_rule(self, location: Location) -> RegisterRule:
        """Where the return address is: FIXED/PADDING mean the ABI's default place."""
        kind = location.kind
        if kind in (LocKind.FIXED, LocKind.PADDING, LocKind.UNTRACKED):
            if self.fixed_ra_offset:
                return RegisterRule(RegKind.OFFSET, offset=self.fixed_ra_offset)
            if self._arch.link_register is not None:
                return RegisterRule(RegKind.SAME)  # still in the link register
            raise FormatError(f".sframe: {self._arch.name} section without a fixed RA offset")
        return _register_rule(location)

    # -- objdump-style text --------------------------------------------------------------

    def format_objdump(self) -> str:
        """Header and all functions as ``objdump --sframe`` prints them (after its
        "Contents of the SFrame section" line)."""
        parts = [self.format_objdump_header(), "\n  Function Index :\n"]
        for function in self.functions():
            parts.append(self.format_objdump_function(function))
        return "".join(parts)

    def format_objdump_header(self) -> str:
        """The "Header :" block; v1 follows binutils 2.40, the only objdump that reads v1."""
        lines = ["  Header :", "", f"    Version: SFRAME_VERSION_{self.version}"]
        names = [name for bit, name in _FLAG_NAMES if self.flags & bit]
        if not names:
            lines.append("    Flags: NONE")
        for number, name in enumerate(names):
            prefix = "    Flags: " if number == 0 else " " * 11
            lines.append(prefix + name + ("," if number + 1 < len(names) else ""))
        if self.version >= 2 and self.fixed_fp_offset:
            lines.append(f"    CFA fixed FP offset: {self.fixed_fp_offset}")
        if self.version >= 2 and self.fixed_ra_offset:
            lines.append(f"    CFA fixed RA offset: {self.fixed_ra_offset}")
        lines.append(f"    Num FDEs: {self.num_fdes}")
        lines.append(f"    Num FREs: {self.num_fres}")
        return "\n".join(lines) + "\n"

    def format_objdump_function(self, function: SFrameFunction) -> str:
        """One function: its "func idx" line, the column titles and every row."""
        text = (
            f"\n    func idx [{function.index}]: pc = {function.start:#x}, "
            f"size = {function.size} bytes"
        )
        attributes = ("S" if function.signal_frame else "") + (
            "F" if function.fde_type is FdeType.FLEX else ""
        )
        if attributes:
            text += f', attr = "{attributes}"'
        if function.pauth_key_b:
            text += ", pauth = B key"
        marker = "[m]" if function.pc_type is PcType.MASK else ""
        text += f"\n    {'STARTPC':<7}{marker:<8} {'CFA':<10}{'FP':<10}{'RA':<13}"
        for line in self.format_objdump_rows(function):
            text += "\n" + line
        return text + "\n"

    def format_objdump_rows(self, function: SFrameFunction) -> list[str]:
        """One line per row: STARTPC CFA FP RA with objdump's ``u``/``f``/``U``/``c±N``/``[s]``."""
        lines = []
        for row in function.rows:
            address = row.offset
            if function.pc_type is PcType.INC:
                address = (function.start + row.offset) & _ADDRESS_MASK
            if row.outermost:
                lines.append(f"    {address:016x}  RA undefined")
                continue
            flex = function.fde_type is FdeType.FLEX
            ra = self._format_location(row.ra, flex) + ("[s]" if row.ra_signed else "   ")
            cfa = self._format_location(row.cfa, flex)
            lines.append(
                f"    {address:016x}  {cfa:<10}{self._format_location(row.fp, flex):<10}{ra:<13}"
            )
        return lines

    def _format_location(self, location: Location, flex: bool) -> str:
        kind = location.kind
        if kind is LocKind.FIXED and self.version == 1:
            return "u"  # binutils 2.40 showed the header-fixed RA as untracked
        if kind in (LocKind.UNTRACKED, LocKind.FIXED, LocKind.PADDING, LocKind.UNDEFINED):
            return kind.value
        if kind is LocKind.CFA_SLOT:
            return f"c{location.offset:+d}"
        name = self.register_name(location.register)
        if not flex:
            return f"{name}+{location.offset}"  # objdump prints default CFAs with "%s+%d"
        text = f"{name}{location.offset:+d}"
        return f"({text})" if kind is LocKind.REGISTER_DEREF else text

    def register_name(self, number: int) -> str:
        """objdump's names: ``sp`` and ``fp`` for the ABI's stack and frame pointer, else rN."""
        if number == self._arch.sp:
            return "sp"
        if number == self._arch.fp:
            return "fp"
        return f"r{number}"


def _pc_type(fde: _Fde) -> PcType:
    return PcType((fde.info >> 4) & 1)


def _flex_location(control: int, offset: int, word_bits: int, where: str) -> Location:
    """Decodes a v3 control word: bit 0 register-based, bit 1 dereference, bits 3+ register."""
    control &= (1 << word_bits) - 1  # control words are unsigned
    if control & 0b100:
        raise FormatError(f"{where}: reserved bit set in control word {control:#x}")
    if not control & 1:
        return Location(LocKind.CFA_SLOT, offset=offset)  # CFA-based is always a stack slot
    kind = LocKind.REGISTER_DEREF if control & 0b10 else LocKind.REGISTER
    return Location(kind, register=control >> 3, offset=offset)


def _cfa_rule(location: Location) -> CfaRule:
    if location.kind is LocKind.REGISTER:
        return CfaRule(register=location.register, offset=location.offset)
    if location.kind is LocKind.REGISTER_DEREF:
        return CfaRule(expression=_breg(location.register, location.offset) + bytes([_DW_OP_DEREF]))
    raise FormatError(".sframe: CFA defined relative to itself")


def _register_rule(location: Location) -> RegisterRule:
    """FP or RA from a decoded location; register+offset forms become DWARF expressions."""
    kind = location.kind
    if kind is LocKind.CFA_SLOT:
        return RegisterRule(RegKind.OFFSET, offset=location.offset)
    if kind is LocKind.REGISTER and location.offset == 0:
        return RegisterRule(RegKind.REGISTER, register=location.register)
    if kind is LocKind.REGISTER:
        return RegisterRule(
            RegKind.VAL_EXPRESSION, expression=_breg(location.register, location.offset)
        )
    if kind is LocKind.REGISTER_DEREF:
        return RegisterRule(
            RegKind.EXPRESSION, expression=_breg(location.register, location.offset)
        )
    raise FormatError(f".sframe: no register rule for {kind.name}")


def _breg(register: int, offset: int) -> bytes:
    """DW_OP_breg<n> / DW_OP_bregx: push register + offset."""
    if register < 32:
        return bytes([_DW_OP_BREG0 + register]) + leb128.encode_signed(offset)
    return bytes([_DW_OP_BREGX]) + leb128.encode_unsigned(register) + leb128.encode_signed(offset)
