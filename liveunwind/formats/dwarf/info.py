"""``.debug_info``: the few DIEs that name the functions, inlined calls included, at a pc.

A backtrace with source lines needs, for each pc, the compilation unit
holding it (through ``.debug_aranges``, or the units' own ranges when a
producer wrote no aranges), that unit's line program (``DW_AT_stmt_list``),
and the nest of ``DW_TAG_subprogram`` and ``DW_TAG_inlined_subroutine`` DIEs
whose ranges (``DW_AT_low_pc``/``DW_AT_high_pc``, or ``DW_AT_ranges`` in
DWARF 4 ``.debug_ranges`` or DWARF 5 ``.debug_rnglists``) cover it.  Their
names come through ``DW_AT_abstract_origin`` / ``DW_AT_specification``, and
each inlined call's site from ``DW_AT_call_file`` / ``DW_AT_call_line``.

Why not pyelftools, the project's declared DWARF library: measured on this
project's machine (Python 3.11) for one pc in Debian's libc debug file
(5.8 MiB of ``.debug_info``), pyelftools costs 49 ms to import, 77 ms to open
the file and inflate its sections and 53 ms to read ``.debug_aranges``
before it reads a single DIE — 180 ms, twice what ``eu-stack -i -s`` takes
for the whole backtrace (70–100 ms), where the target for ``--lines`` is
1.5× eu-stack.  So this module decodes the structures itself, lazily: unit
headers are found by their lengths, a unit's abbreviations when a pc first
lands in it, and within the unit only the DIEs on the way to the pc are
decoded — every other subtree is jumped over with ``DW_AT_sibling`` or by
the fixed size of its attributes.

Untrusted input: every offset is checked against its section, references
are followed a bounded number of times, and every loop consumes bytes.
"""

from __future__ import annotations

import bisect
import struct

from liveunwind.formats.dwarf.aranges import Aranges
from liveunwind.formats.dwarf.forms import (
    ADDRX_FORMS,
    CONSTANT_FORMS,
    STRX_FORMS,
    UNIT_REF_FORMS,
    DW_FORM_addr,
    DW_FORM_addrx,
    DW_FORM_block,
    DW_FORM_exprloc,
    DW_FORM_implicit_const,
    DW_FORM_line_strp,
    DW_FORM_loclistx,
    DW_FORM_ref_addr,
    DW_FORM_ref_udata,
    DW_FORM_rnglistx,
    DW_FORM_sdata,
    DW_FORM_string,
    DW_FORM_strp,
    DW_FORM_strx,
    DW_FORM_udata,
    DwarfError,
    UnitFormat,
    c_string,
    fixed_size,
    read_value,
)
from liveunwind.formats.leb128 import decode as _leb128

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.formats.dwarf.forms import Buffer

DW_TAG_lexical_block = 0x0B
DW_TAG_compile_unit = 0x11
DW_TAG_inlined_subroutine = 0x1D
DW_TAG_subprogram = 0x2E
DW_TAG_namespace = 0x39
DW_TAG_module = 0x1E
DW_TAG_partial_unit = 0x3C
DW_TAG_skeleton_unit = 0x4A

DW_AT_sibling = 0x01
DW_AT_name = 0x03
DW_AT_stmt_list = 0x10
DW_AT_low_pc = 0x11
DW_AT_high_pc = 0x12
DW_AT_comp_dir = 0x1B
DW_AT_abstract_origin = 0x31
DW_AT_specification = 0x47
DW_AT_ranges = 0x55
DW_AT_call_column = 0x57
DW_AT_call_file = 0x58
DW_AT_call_line = 0x59
DW_AT_linkage_name = 0x6E
DW_AT_str_offsets_base = 0x72
DW_AT_addr_base = 0x73
DW_AT_rnglists_base = 0x74
DW_AT_MIPS_linkage_name = 0x2007
DW_AT_GNU_addr_base = 0x2133

DW_UT_compile = 1
DW_UT_type = 2
DW_UT_partial = 3
DW_UT_skeleton = 4
DW_UT_split_compile = 5
DW_UT_split_type = 6

DW_RLE_end_of_list = 0
DW_RLE_base_addressx = 1
DW_RLE_startx_endx = 2
DW_RLE_startx_length = 3
DW_RLE_offset_pair = 4
DW_RLE_base_address = 5
DW_RLE_start_end = 6
DW_RLE_start_length = 7

#: DIEs whose ranges make a scope: a function, an inlined call, a block.
_SCOPE_TAGS = frozenset((DW_TAG_subprogram, DW_TAG_inlined_subroutine, DW_TAG_lexical_block))
#: DIEs that hold functions without having an address range themselves.
_CONTAINER_TAGS = frozenset((DW_TAG_namespace, DW_TAG_module))
#: The attributes a function's name is found through.
_NAME_ATTRS = frozenset(
    (
        DW_AT_name,
        DW_AT_linkage_name,
        DW_AT_MIPS_linkage_name,
        DW_AT_abstract_origin,
        DW_AT_specification,
    )
)
#: What is kept of a scope DIE: its ranges, its name, its call site.
_SCOPE_ATTRS = _NAME_ATTRS | {
    DW_AT_low_pc,
    DW_AT_high_pc,
    DW_AT_ranges,
    DW_AT_sibling,
    DW_AT_call_file,
    DW_AT_call_line,
}
#: The attributes that give a DIE its address ranges.
_RANGE_ATTRS = frozenset((DW_AT_low_pc, DW_AT_high_pc, DW_AT_ranges))
#: What stepping over a DIE with children may need of its attributes.
_SIBLING = frozenset((DW_AT_sibling,))
#: Abstract-origin / specification links followed at most (a cycle in corrupt input ends here).
_MAX_NAME_LINKS = 8
#: Nesting depth of DIEs followed at most.
_MAX_DEPTH = 256
#: Entries of one range list read at most.
_MAX_RANGES = 1 << 16
#: Units in one .debug_info read at most.
_MAX_UNITS = 1 << 20
#: Bytes of .debug_abbrev asked for at first for one table (libc's are up to 2.5 KiB).
_ABBREV_PIECE = 1 << 12
#: Bytes of the longest unit header (DWARF 5, 64-bit, a type unit).
_MAX_UNIT_HEADER = 40


class Sections:
    """The DWARF sections of one image, already decompressed; absent ones are None."""

    __slots__ = (
        "abbrev",
        "addr",
        "aranges",
        "byte_order",
        "info",
        "line",
        "line_str",
        "ranges",
        "rnglists",
        "str",
        "str_offsets",
    )

    def __init__(self, byte_order: str, **sections: Buffer | None) -> None:
        self.byte_order = byte_order
        self.info: Buffer | None = None
        self.abbrev: Buffer | None = None
        self.aranges: Buffer | None = None
        self.line: Buffer | None = None
        self.str: Buffer | None = None
        self.line_str: Buffer | None = None
        self.str_offsets: Buffer | None = None
        self.addr: Buffer | None = None
        self.ranges: Buffer | None = None
        self.rnglists: Buffer | None = None
        for name, data in sections.items():
            setattr(self, name, data)


class Abbrev:
    """One abbreviation: a DIE's tag, whether it has children, and its attribute forms."""

    __slots__ = ("children", "ranged", "sibling", "skip", "specs", "steps", "tag")

    def __init__(
        self, tag: int, children: bool, specs: tuple[tuple[int, int, int], ...], ranged: bool
    ) -> None:
        self.tag = tag
        self.children = children
        #: (attribute, form, implicit constant) in the order the DIE holds them.
        self.specs = specs
        #: How to step over the attributes: byte counts (>= 0) and forms to read (< 0: -form).
        self.skip: list[int] | None = None
        #: Per attribute: its size if fixed, else its step of the skip plan.
        self.steps: list[int] = []
        #: Where DW_AT_sibling's value lies after the code, and its size, when every
        #: attribute before it has a fixed size (GCC and clang put it first); else None.
        self.sibling: tuple[int, int] | None = None
        #: Whether its DIEs can have an address range at all (a function's declaration
        #: or abstract instance cannot).
        self.ranged = ranged


def parse_abbrevs(data: Buffer, offset: int, end: int = -1) -> dict[int, Abbrev]:
    """The abbreviation table at ``offset`` of ``.debug_abbrev`` (read up to ``end``, if
    given, rather than its end), by code.

    Nearly every number in a table fits in one byte: those are read in
    place, the rest through the LEB128 decoder (a libc unit's table has
    hundreds of entries, and the call per number was half the time).
    """
    end = len(data) if end < 0 else min(end, len(data))
    if not 0 <= offset < end:
        raise DwarfError(f".debug_abbrev offset {offset:#x} outside the section")
    table: dict[int, Abbrev] = {}
    pos = offset
    while pos < end:
        code = data[pos]
        if code < 0x80:
            pos += 1
        else:
            code, pos = _leb128(data, pos, end, False, DwarfError)
        if code == 0:
            return table
        tag = data[pos] if pos < end else 0x80
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _leb128(data, pos, end, False, DwarfError)
        if pos >= end:
            break
        children = data[pos] != 0
        pos += 1
        specs = []
        ranged = False
        while pos + 1 < end:
            attribute, form = data[pos], data[pos + 1]
            if attribute < 0x80 and form < 0x80:
                pos += 2
            else:
                attribute, pos = _leb128(data, pos, end, False, DwarfError)
                form, pos = _leb128(data, pos, end, False, DwarfError)
            if attribute == 0 and form == 0:
                break
            implicit = 0
            if form == DW_FORM_implicit_const:
                implicit, pos = _leb128(data, pos, end, True, DwarfError)
            if attribute in _RANGE_ATTRS:
                ranged = True
            specs.append((attribute, form, implicit))
        else:
            break
        table[code] = Abbrev(tag, children, tuple(specs), ranged)
    raise DwarfError(f"abbreviation table at {offset:#x} is not terminated")


class Unit:
    """One unit of ``.debug_info``: its header, and the attributes of its top DIE once read."""

    __slots__ = (
        "abbrev_offset",
        "abbrevs",
        "addr_base",
        "base_address",
        "children",
        "comp_dir",
        "die_offset",
        "end",
        "format",
        "name",
        "offset",
        "rnglists_base",
        "stmt_list",
        "str_offsets_base",
        "top",
        "type",
    )

    def __init__(self, offset: int, end: int, die_offset: int, fmt: UnitFormat) -> None:
        self.offset = offset
        self.end = end
        self.die_offset = die_offset
        self.format = fmt
        self.type = DW_UT_compile
        self.abbrev_offset = 0
        self.abbrevs: dict[int, Abbrev] = {}
        #: Attributes of the unit DIE; None until read.
        self.top: dict[int, tuple[int, int | bytes | str]] | None = None
        self.children = 0
        self.name = ""
        self.comp_dir = ""
        self.stmt_list: int | None = None
        self.base_address = 0
        self.str_offsets_base = 8
        self.addr_base = 8
        self.rnglists_base = 12 if fmt.offset_size == 4 else 20


class Die:
    """One decoded DIE: where it is, its tag and the attributes that were asked for."""

    __slots__ = ("attrs", "offset", "tag", "unit")

    def __init__(
        self, unit: Unit, offset: int, tag: int, attrs: dict[int, tuple[int, int | bytes | str]]
    ) -> None:
        self.unit = unit
        self.offset = offset
        self.tag = tag
        #: attribute → (form, raw value)
        self.attrs = attrs

    def constant(self, attribute: int) -> int | None:
        entry = self.attrs.get(attribute)
        if entry is None or entry[0] not in CONSTANT_FORMS or not isinstance(entry[1], int):
            return None
        return entry[1]


class DebugInfo:
    """The units of one image's DWARF, read as lookups need them."""

    def __init__(
        self,
        sections: Sections,
        need: Callable[[int], object] | None = None,
        need_abbrev: Callable[[int], int] | None = None,
    ) -> None:
        """``need(end)``, if given, is called before ``.debug_info`` is read up to ``end``
        (-1: all of it): a compressed section can then be inflated only as far as
        lookups reach, which the units of one backtrace rarely do to its end.
        ``need_abbrev(end)`` does the same for ``.debug_abbrev`` and returns how far
        it is there (Debian's libc: 960 KiB, 2.7 ms to inflate whole)."""
        if sections.info is None or sections.abbrev is None:
            raise DwarfError("no .debug_info or .debug_abbrev")
        self.sections = sections
        self.info: Buffer = sections.info
        self._need: Callable[[int], object] = need or _no_need
        self._need_abbrev: Callable[[int], int] = need_abbrev or _all_there
        self._abbrev_tables: dict[int, dict[int, Abbrev]] = {}
        self._units: dict[int, Unit] = {}
        self._unit_offsets: list[int] | None = None
        self._aranges: Aranges | None = None
        self._unit_ranges: tuple[list[int], list[int], list[int]] | None = None

    # -- units ----------------------------------------------------------------

    def unit_at(self, offset: int) -> Unit:
        """The unit whose header starts at ``offset``, its top DIE read."""
        unit = self._units.get(offset)
        if unit is None:
            unit = self._read_unit_header(offset)
            self._read_top(unit)
            self._units[offset] = unit
        return unit

    def unit_offsets(self) -> list[int]:
        """Where every unit's header starts, found by stepping over their lengths."""
        if self._unit_offsets is None:
            self._need(-1)
            offsets: list[int] = []
            pos, end = 0, len(self.info)
            order = self.sections.byte_order
            while pos + 4 <= end and len(offsets) < _MAX_UNITS:
                offsets.append(pos)
                (length,) = struct.unpack_from(order + "I", self.info, pos)
                if length == 0xFFFFFFFF:
                    if pos + 12 > end:
                        break
                    (length,) = struct.unpack_from(order + "Q", self.info, pos + 4)
                    pos += 12 + length
                else:
                    pos += 4 + length
            self._unit_offsets = offsets
        return self._unit_offsets

    def unit_containing(self, offset: int) -> Unit | None:
        """The unit a ``.debug_info`` offset (a DW_FORM_ref_addr) points into."""
        offsets = self.unit_offsets()
        index = bisect.bisect_right(offsets, offset) - 1
        if index < 0:
            return None
        unit = self.unit_at(offsets[index])
        return unit if unit.die_offset <= offset < unit.end else None

    def _read_unit_header(self, offset: int) -> Unit:
        self._need(offset + _MAX_UNIT_HEADER)
        data, order = self.info, self.sections.byte_order
        if not 0 <= offset <= len(data) - 11:
            raise DwarfError(f".debug_info offset {offset:#x} outside the section")
        (length,) = struct.unpack_from(order + "I", data, offset)
        pos, offset_size = offset + 4, 4
        if length == 0xFFFFFFFF:
            (length,) = struct.unpack_from(order + "Q", data, pos)
            pos, offset_size = pos + 8, 8
        end = pos + length
        self._need(end)
        if end > len(data):
            raise DwarfError(f"unit at {offset:#x} runs past .debug_info")
        (version,) = struct.unpack_from(order + "H", data, pos)
        pos += 2
        if not 2 <= version <= 5:
            raise DwarfError(f"unit at {offset:#x}: unsupported DWARF version {version}")
        unit_type = DW_UT_compile
        if version >= 5:
            unit_type, address_size = data[pos], data[pos + 1]
            pos += 2
            abbrev_offset = _offset(data, pos, offset_size, order)
            pos += offset_size
            if unit_type in (DW_UT_skeleton, DW_UT_split_compile):
                pos += 8  # dwo_id
            elif unit_type in (DW_UT_type, DW_UT_split_type):
                pos += 8 + offset_size  # type signature, type offset
        else:
            abbrev_offset = _offset(data, pos, offset_size, order)
            address_size = data[pos + offset_size]
            pos += offset_size + 1
        if pos > end:
            raise DwarfError(f"unit at {offset:#x}: header longer than the unit")
        unit = Unit(offset, end, pos, UnitFormat(order, address_size, offset_size, version))
        unit.type = unit_type
        unit.abbrev_offset = abbrev_offset
        return unit

    def _abbrevs(self, offset: int) -> dict[int, Abbrev]:
        """The abbreviation table at ``offset``, read once.

        A table's end is known only once read: the section is asked for a
        piece after ``offset``, and for twice as much while the table runs past it.
        """
        table = self._abbrev_tables.get(offset)
        if table is None:
            data = self.sections.abbrev
            assert data is not None
            reach = _ABBREV_PIECE
            while True:
                there = min(self._need_abbrev(offset + reach), len(data))
                try:
                    table = parse_abbrevs(data, offset, there)
                    break
                except DwarfError:
                    if there >= len(data) or offset + reach >= len(data):
                        raise
                    reach *= 2  # bounded: doubles until the whole section is there
            self._abbrev_tables[offset] = table
        return table

    def _read_top(self, unit: Unit) -> None:
        """Reads the unit DIE: name, directory, line program, bases and base address."""
        unit.abbrevs = self._abbrevs(unit.abbrev_offset)
        code, pos = _leb128(self.info, unit.die_offset, unit.end, False, DwarfError)
        abbrev = unit.abbrevs.get(code)
        if abbrev is None:
            raise DwarfError(f"unit at {unit.offset:#x}: unknown abbreviation {code}")
        attrs, pos = self._attributes(unit, abbrev, pos, None)
        unit.top, unit.children = attrs, (pos if abbrev.children else 0)
        for attribute, name in (
            (DW_AT_str_offsets_base, "str_offsets_base"),
            (DW_AT_addr_base, "addr_base"),
            (DW_AT_GNU_addr_base, "addr_base"),
            (DW_AT_rnglists_base, "rnglists_base"),
        ):
            entry = attrs.get(attribute)
            if entry is not None and isinstance(entry[1], int):
                setattr(unit, name, entry[1])
        unit.name = self.string(unit, attrs.get(DW_AT_name)) or ""
        unit.comp_dir = self.string(unit, attrs.get(DW_AT_comp_dir)) or ""
        stmt = attrs.get(DW_AT_stmt_list)
        unit.stmt_list = stmt[1] if stmt is not None and isinstance(stmt[1], int) else None
        low = self.address(unit, attrs.get(DW_AT_low_pc))
        unit.base_address = low or 0

    # -- attributes ---------------------------------------------------------

    def _attributes(
        self, unit: Unit, abbrev: Abbrev, pos: int, wanted: frozenset[int] | None
    ) -> tuple[dict[int, tuple[int, int | bytes | str]], int]:
        """The attributes of one DIE (only ``wanted`` ones, if given) and where the DIE ends.

        Attributes not wanted are stepped over as :meth:`_skip_attributes` does.
        """
        attrs: dict[int, tuple[int, int | bytes | str]] = {}
        data, end, fmt = self.info, unit.end, unit.format
        if abbrev.skip is None:
            _plan(abbrev, fmt)
        for (attribute, form, implicit), step in zip(abbrev.specs, abbrev.steps, strict=True):
            if wanted is not None and attribute not in wanted:
                if step >= 0:
                    pos += step
                elif step == _SKIP_ULEB:
                    while pos < end and data[pos] & 0x80:
                        pos += 1
                    pos += 1
                else:
                    _value, pos = read_value(data, pos, end, form, fmt)
                continue
            if form == DW_FORM_implicit_const:
                value: int | bytes | str = implicit
            else:
                value, pos = read_value(data, pos, end, form, fmt)
            attrs[attribute] = (form, value)
        if pos > end:
            raise DwarfError(f"DIE attributes cross the end of the unit at {unit.offset:#x}")
        return attrs, pos

    def _skip_attributes(self, unit: Unit, abbrev: Abbrev, pos: int) -> int:
        """Where the DIE whose attributes start at ``pos`` ends, reading as little as possible."""
        plan = abbrev.skip
        if plan is None:
            plan = _plan(abbrev, unit.format)
        data, end = self.info, unit.end
        for step in plan:
            if step >= 0:
                pos += step
            elif step == _SKIP_STRING:
                pos = self._string_end(pos, end)
            elif step == _SKIP_ULEB:
                while pos < end and data[pos] & 0x80:
                    pos += 1
                pos += 1
            elif step == _SKIP_EXPRLOC:
                length, pos = _leb128(data, pos, end, False, DwarfError)
                pos += length
            else:
                _value, pos = read_value(data, pos, end, -step, unit.format)
        if pos > end:
            raise DwarfError(f"DIE attributes cross the end of the unit at {unit.offset:#x}")
        return pos

    def _string_end(self, pos: int, end: int) -> int:
        """Where the DW_FORM_string at ``pos`` ends (after its NUL)."""
        data = self.info
        if isinstance(data, memoryview):  # an uncompressed section, mapped: no find()
            stop = bytes(data[pos : min(end, pos + 4096)]).find(b"\0")
            stop = stop if stop < 0 else pos + stop
        else:
            stop = data.find(b"\0", pos, end)
        if stop < 0:
            raise DwarfError("unterminated DW_FORM_string")
        return stop + 1

    def _sibling(self, unit: Unit, abbrev: Abbrev, pos: int) -> int:
        """Where the next sibling of a DIE with children starts, read straight off its
        DW_AT_sibling (``pos``: its attributes), or -1 where that cannot be done."""
        if abbrev.skip is None:
            _plan(abbrev, unit.format)
        sibling = abbrev.sibling
        if sibling is None:
            return -1
        at, size = sibling
        at += pos
        if at + size > unit.end:
            return -1
        target = unit.offset + unit.format.unsigned(self.info, at, size)
        return target if pos < target <= unit.end else -1

    def string(self, unit: Unit, entry: tuple[int, int | bytes | str] | None) -> str | None:
        """A string attribute's text, wherever its form keeps it."""
        if entry is None:
            return None
        form, value = entry
        if isinstance(value, str):
            return value
        if not isinstance(value, int):
            return None
        sections = self.sections
        if form == DW_FORM_strp:
            return c_string(sections.str, value)
        if form == DW_FORM_line_strp:
            return c_string(sections.line_str, value)
        if form in STRX_FORMS:
            offsets = sections.str_offsets
            size = unit.format.offset_size
            at = unit.str_offsets_base + value * size
            if offsets is None or at + size > len(offsets):
                return None
            return c_string(sections.str, unit.format.unsigned(offsets, at, size))
        return None  # DW_FORM_GNU_strp_alt / strp_sup: a supplementary file this reader lacks

    def address(self, unit: Unit, entry: tuple[int, int | bytes | str] | None) -> int | None:
        """An address attribute's value: DW_FORM_addr, or an index into ``.debug_addr``."""
        if entry is None:
            return None
        form, value = entry
        if not isinstance(value, int):
            return None
        if form == DW_FORM_addr:
            return value
        if form in ADDRX_FORMS:
            return self._indexed_address(unit, value)
        return None

    def _indexed_address(self, unit: Unit, index: int) -> int | None:
        table = self.sections.addr
        size = unit.format.address_size
        at = unit.addr_base + index * size
        if table is None or at + size > len(table):
            return None
        return unit.format.unsigned(table, at, size)

    # -- ranges -------------------------------------------------------------

    def covering_start(
        self, unit: Unit, attrs: dict[int, tuple[int, int | bytes | str]], pc: int
    ) -> int | None:
        """The lowest address of a DIE whose ranges hold ``pc``; None if they do not."""
        found = self._covering(unit, attrs, pc)
        return None if found is None else found[0]

    def _covering(
        self, unit: Unit, attrs: dict[int, tuple[int, int | bytes | str]], pc: int
    ) -> tuple[int, int, int] | None:
        """(lowest address, start, end of the range holding ``pc``) of a DIE; None if none does."""
        low = self.address(unit, attrs.get(DW_AT_low_pc))
        high_entry = attrs.get(DW_AT_high_pc)
        if low is not None and high_entry is not None:
            value = high_entry[1]
            if not isinstance(value, int):
                return None
            high = (
                low + value if high_entry[0] in CONSTANT_FORMS else self.address(unit, high_entry)
            )
            return (low, low, high) if high is not None and low <= pc < high else None
        ranges = attrs.get(DW_AT_ranges)
        if ranges is None:
            return None
        found = self.ranges(unit, ranges)
        holding = [(start, end) for start, end in found if start <= pc < end]
        if not holding:
            return None
        return (min(start for start, _ in found), *holding[0])

    def has_ranges(self, attrs: dict[int, tuple[int, int | bytes | str]]) -> bool:
        return DW_AT_ranges in attrs or (DW_AT_low_pc in attrs and DW_AT_high_pc in attrs)

    def ranges(self, unit: Unit, entry: tuple[int, int | bytes | str]) -> list[tuple[int, int]]:
        """The address ranges of a DW_AT_ranges attribute (DWARF 2–4 or 5 form)."""
        form, value = entry
        if not isinstance(value, int):
            return []
        if unit.format.version < 5:
            return _ranges_v4(self.sections.ranges, value, unit)
        table = self.sections.rnglists
        if table is None:
            return []
        if form == DW_FORM_rnglistx:
            size = unit.format.offset_size
            at = unit.rnglists_base + value * size
            if at + size > len(table):
                return []
            value = unit.rnglists_base + unit.format.unsigned(table, at, size)
        return self._rnglist(table, value, unit)

    def _rnglist(self, table: Buffer, pos: int, unit: Unit) -> list[tuple[int, int]]:
        fmt, end = unit.format, len(table)
        size = fmt.address_size
        base, found = unit.base_address, []
        for _ in range(_MAX_RANGES):
            if not 0 <= pos < end:
                break
            kind = table[pos]
            pos += 1
            if kind == DW_RLE_end_of_list:
                break
            if kind in (DW_RLE_base_address, DW_RLE_start_end, DW_RLE_start_length):
                if pos + size > end:
                    break
                first, pos = fmt.unsigned(table, pos, size), pos + size
                if kind == DW_RLE_base_address:
                    base = first
                elif kind == DW_RLE_start_end:
                    if pos + size > end:
                        break
                    found.append((first, fmt.unsigned(table, pos, size)))
                    pos += size
                else:
                    length, pos = _leb128(table, pos, end, False, DwarfError)
                    found.append((first, first + length))
                continue
            first, pos = _leb128(table, pos, end, False, DwarfError)
            if kind == DW_RLE_base_addressx:
                base = self._indexed_address(unit, first) or 0
                continue
            second, pos = _leb128(table, pos, end, False, DwarfError)
            if kind == DW_RLE_offset_pair:
                found.append((base + first, base + second))
            elif kind in (DW_RLE_startx_endx, DW_RLE_startx_length):
                start = self._indexed_address(unit, first)
                if start is None:
                    continue
                if kind == DW_RLE_startx_endx:
                    stop = self._indexed_address(unit, second)
                    if stop is not None:
                        found.append((start, stop))
                else:
                    found.append((start, start + second))
            else:
                raise DwarfError(f"unknown range list entry kind {kind}")
        return found

    # -- the unit of a pc ---------------------------------------------------

    def unit_for_pc(self, pc: int) -> Unit | None:
        """The compilation unit whose code holds ``pc`` (a link-time address).

        ``.debug_aranges`` first; units it does not list (some producers
        leave units out, or write no aranges at all) by their own ranges.
        """
        listed = self.aranges().unit_of(pc)
        if listed is not None:
            return self.unit_at(listed)
        starts, ends, offsets = self._unit_range_table()
        index = bisect.bisect_right(starts, pc) - 1
        # Ranges may nest or overlap in odd output: look back a few entries.
        for candidate in range(index, max(index - 8, -1), -1):
            if starts[candidate] <= pc < ends[candidate]:
                return self.unit_at(offsets[candidate])
        return None

    def listed_unit(self, pc: int) -> tuple[int, int] | None:
        """Where the unit ``.debug_aranges`` gives for ``pc`` starts, and where the next
        listed unit starts (-1 for none) — without reading ``.debug_info``."""
        aranges = self.aranges()
        offset = aranges.unit_of(pc)
        return None if offset is None else (offset, aranges.following(offset))

    def aranges(self) -> Aranges:
        """``.debug_aranges``, read the first time a pc is looked up."""
        if self._aranges is None:
            self._aranges = Aranges(self.sections.aranges, self.sections.byte_order)
        return self._aranges

    def _unit_range_table(self) -> tuple[list[int], list[int], list[int]]:
        """The ranges of the units ``.debug_aranges`` does not list, from their unit DIEs."""
        if self._unit_ranges is None:
            listed = self.aranges().units()
            entries = []
            for offset in self.unit_offsets():
                if offset in listed:
                    continue
                try:
                    unit = self.unit_at(offset)
                except DwarfError:
                    continue
                if unit.top is None or unit.type not in (DW_UT_compile, DW_UT_partial):
                    continue
                for start, end in self._unit_ranges_of(unit):
                    entries.append((start, end, offset))
            self._unit_ranges = _sorted_table(entries)
        return self._unit_ranges

    def _unit_ranges_of(self, unit: Unit) -> list[tuple[int, int]]:
        attrs = unit.top or {}
        ranges = attrs.get(DW_AT_ranges)
        if ranges is not None:
            return self.ranges(unit, ranges)
        low = self.address(unit, attrs.get(DW_AT_low_pc))
        high_entry = attrs.get(DW_AT_high_pc)
        if low is None or high_entry is None or not isinstance(high_entry[1], int):
            return []
        if high_entry[0] in CONSTANT_FORMS:
            return [(low, low + high_entry[1])]
        high = self.address(unit, high_entry)
        return [] if high is None else [(low, high)]

    # -- the scopes of a pc ---------------------------------------------------

    def scopes(self, unit: Unit, pc: int) -> list[Die]:
        """The subprogram and inlined-call DIEs covering ``pc``, outermost first.

        Walks the unit's DIE tree from the top, entering only DIEs whose
        ranges hold the pc (and namespaces and blocks without ranges, which
        are transparent); any other subtree is stepped over.  Several
        childless functions may cover one pc (an assembler file's aliases,
        each its own DW_TAG_subprogram): like gdb, the one that starts last
        wins, and of those starting together the last one.  A compiled
        function (it has children) covering the pc is entered at once, as
        is the first covering child inside it.
        """
        if not unit.children:
            return []
        data, end = self.info, unit.end
        abbrevs = unit.abbrevs
        chain: list[Die] = []
        #: The best childless function so far: (start, DIE).
        best: tuple[int, Die] | None = None
        #: Per open level: whether its parent covers the pc (then the search ends with it).
        levels = [False]
        pos = unit.children
        while pos < end:
            die_offset = pos
            code = data[pos]
            if code < 0x80:
                pos += 1
            else:
                code, pos = _leb128(data, pos, end, False, DwarfError)
            if code == 0:
                if levels.pop():
                    return chain
                if levels:
                    continue
                if best is not None:
                    chain.append(best[1])
                return chain
            abbrev = abbrevs.get(code)
            if abbrev is None:
                raise DwarfError(f"DIE at {die_offset:#x}: unknown abbreviation {code}")
            tag = abbrev.tag
            if tag in _SCOPE_TAGS:
                if not abbrev.ranged and tag != DW_TAG_lexical_block:
                    # A declaration or an abstract instance (most of a unit's functions):
                    # stepped over, not decoded.
                    pos = self._after_die(unit, abbrev, pos)
                    continue
                attrs, pos = self._attributes(unit, abbrev, pos, _SCOPE_ATTRS)
                has_ranges = self.has_ranges(attrs)
                start = self.covering_start(unit, attrs, pc) if has_ranges else None
                if start is not None and not chain and not abbrev.children:
                    # A function without a body of DIEs (an assembler symbol):
                    # remember it and keep looking for a later one.
                    if best is None or start >= best[0]:
                        best = (start, Die(unit, die_offset, tag, attrs))
                elif start is not None:
                    if tag != DW_TAG_lexical_block:
                        chain.append(Die(unit, die_offset, tag, attrs))
                    if not abbrev.children:
                        return chain
                    levels.append(True)
                elif not has_ranges and tag == DW_TAG_lexical_block and abbrev.children:
                    levels.append(False)  # a block without code of its own: look inside
                elif abbrev.children:
                    pos = self._skip_children(unit, attrs.get(DW_AT_sibling), pos)
            elif tag in _CONTAINER_TAGS and abbrev.children:
                pos = self._skip_attributes(unit, abbrev, pos)
                levels.append(False)
            else:
                pos = self._after_die(unit, abbrev, pos)
            if len(levels) > _MAX_DEPTH:
                raise DwarfError(f"DIEs nested deeper than {_MAX_DEPTH} in unit {unit.offset:#x}")
        if best is not None and not chain:
            chain.append(best[1])  # a unit cut short
        return chain

    def _after_die(self, unit: Unit, abbrev: Abbrev, pos: int) -> int:
        """Where the next sibling of the DIE whose attributes start at ``pos`` starts."""
        if not abbrev.children:
            return self._skip_attributes(unit, abbrev, pos)
        after = self._sibling(unit, abbrev, pos)
        if after < 0:
            attrs, pos = self._attributes(unit, abbrev, pos, _SIBLING)
            after = self._skip_children(unit, attrs.get(DW_AT_sibling), pos)
        return after

    def _skip_children(
        self, unit: Unit, sibling: tuple[int, int | bytes | str] | None, pos: int
    ) -> int:
        """The position after the children starting at ``pos`` (DW_AT_sibling when usable)."""
        if sibling is not None and sibling[0] in UNIT_REF_FORMS and isinstance(sibling[1], int):
            target = unit.offset + sibling[1]
            if pos <= target <= unit.end:
                return target
        data, end, abbrevs = self.info, unit.end, unit.abbrevs
        depth = 1
        while depth and pos < end:
            code = data[pos]
            if code < 0x80:
                pos += 1
            else:
                code, pos = _leb128(data, pos, end, False, DwarfError)
            if code == 0:
                depth -= 1
                continue
            abbrev = abbrevs.get(code)
            if abbrev is None:
                raise DwarfError(f"unknown abbreviation {code} in unit {unit.offset:#x}")
            if abbrev.children:
                after = self._sibling(unit, abbrev, pos)
                if after >= 0:
                    pos = after
                    continue
            pos = self._skip_attributes(unit, abbrev, pos)
            if abbrev.children:
                depth += 1
                if depth > _MAX_DEPTH:
                    raise DwarfError(f"DIEs nested too deeply in unit {unit.offset:#x}")
        return pos

    # -- names ----------------------------------------------------------------

    def die_at(self, unit: Unit, offset: int, wanted: frozenset[int] | None) -> Die | None:
        """The DIE at ``.debug_info`` offset ``offset`` of ``unit``, or None if it is not one."""
        if not unit.die_offset <= offset < unit.end:
            return None
        code, pos = _leb128(self.info, offset, unit.end, False, DwarfError)
        abbrev = unit.abbrevs.get(code)
        if abbrev is None:
            return None
        attrs, _ = self._attributes(unit, abbrev, pos, wanted)
        return Die(unit, offset, abbrev.tag, attrs)

    def referenced(self, die: Die, attribute: int, wanted: frozenset[int] | None) -> Die | None:
        """The DIE a reference attribute of ``die`` points to, in its unit or another."""
        entry = die.attrs.get(attribute)
        if entry is None:
            return None
        form, value = entry
        if not isinstance(value, int):
            return None
        if form in UNIT_REF_FORMS:
            return self.die_at(die.unit, die.unit.offset + value, wanted)
        if form == DW_FORM_ref_addr:
            unit = self.unit_containing(value)
            return None if unit is None else self.die_at(unit, value, wanted)
        return None  # DW_FORM_GNU_ref_alt / ref_sup: a supplementary file this reader lacks

    def function_names(self, die: Die) -> tuple[str | None, str | None]:
        """(DW_AT_name, linkage name) of a subprogram or inlined call, through its origins."""
        name: str | None = None
        linkage: str | None = None
        current: Die | None = die
        for _ in range(_MAX_NAME_LINKS):
            if current is None:
                break
            attrs = current.attrs
            if name is None:
                name = self.string(current.unit, attrs.get(DW_AT_name))
            if linkage is None:
                linkage = self.string(
                    current.unit,
                    attrs.get(DW_AT_linkage_name) or attrs.get(DW_AT_MIPS_linkage_name),
                )
            if name is not None and linkage is not None:
                break
            link = DW_AT_abstract_origin if DW_AT_abstract_origin in attrs else DW_AT_specification
            current = self.referenced(current, link, _NAME_ATTRS)
        return name, linkage

    def call_site(self, die: Die) -> tuple[int | None, int | None]:
        """(DW_AT_call_file, DW_AT_call_line) of an inlined call."""
        return die.constant(DW_AT_call_file), die.constant(DW_AT_call_line)

    def function_at(self, pc: int) -> tuple[str, int, int] | None:
        """The function whose code holds ``pc``: its name, and the range of its code holding pc.

        For a debug file without a symbol table (its ``.symtab`` removed, or
        a dwz'd file): the innermost ``DW_TAG_subprogram`` covering ``pc``
        (inlined calls are not functions of their own here), named by its
        linkage name, else ``DW_AT_name``.  The range is the one of its
        ranges that holds ``pc`` (a function split into hot and cold parts
        has two), as an ELF symbol would give it (``f`` and ``f.cold``).
        """
        unit = self.unit_for_pc(pc)
        if unit is None:
            return None
        functions = [die for die in self.scopes(unit, pc) if die.tag == DW_TAG_subprogram]
        if not functions:
            return None
        die = functions[-1]
        found = self._covering(unit, die.attrs, pc)
        name, linkage = self.function_names(die)
        label = linkage or name
        if found is None or label is None:
            return None
        return label, found[1], found[2]


def _no_need(end: int) -> None:
    """All of ``.debug_info`` is there already."""


def _all_there(end: int) -> int:
    """All of ``.debug_abbrev`` is there already."""
    return 1 << 62


def _offset(data: Buffer, pos: int, size: int, order: str) -> int:
    if pos + size > len(data):
        raise DwarfError("cut DWARF offset")
    return struct.unpack_from(order + ("I" if size == 4 else "Q"), data, pos)[0]


#: Steps of a skip plan that are not byte counts nor -form: the common variable sizes.
_SKIP_STRING = -(1 << 20)
_SKIP_ULEB = _SKIP_STRING - 1
_SKIP_EXPRLOC = _SKIP_STRING - 2
_SKIP_STEPS = {
    DW_FORM_string: _SKIP_STRING,
    DW_FORM_udata: _SKIP_ULEB,
    DW_FORM_sdata: _SKIP_ULEB,
    DW_FORM_ref_udata: _SKIP_ULEB,
    DW_FORM_strx: _SKIP_ULEB,
    DW_FORM_addrx: _SKIP_ULEB,
    DW_FORM_loclistx: _SKIP_ULEB,
    DW_FORM_rnglistx: _SKIP_ULEB,
    DW_FORM_exprloc: _SKIP_EXPRLOC,
    DW_FORM_block: _SKIP_EXPRLOC,
}


def _plan(abbrev: Abbrev, fmt: UnitFormat) -> list[int]:
    """Sets ``abbrev.skip`` (fixed sizes folded together, variable sizes as steps to read)
    and ``abbrev.sibling``; returns the skip plan."""
    plan: list[int] = []
    steps: list[int] = []
    fixed: int | None = 0  # bytes before the current attribute, while all are fixed
    for attribute, form, _implicit in abbrev.specs:
        size = fixed_size(form, fmt)
        if attribute == DW_AT_sibling and fixed is not None and form in UNIT_REF_FORMS and size:
            abbrev.sibling = (fixed, size)
        if size is None:
            step = _SKIP_STEPS.get(form, -form)
            plan.append(step)
            steps.append(step)
            fixed = None
            continue
        steps.append(size)
        if fixed is not None:
            fixed += size
        if plan and plan[-1] >= 0:
            plan[-1] += size
        else:
            plan.append(size)
    abbrev.steps = steps
    abbrev.skip = plan
    return plan


def _ranges_v4(table: Buffer | None, pos: int, unit: Unit) -> list[tuple[int, int]]:
    """A DWARF 2–4 ``.debug_ranges`` list: pairs relative to a base, (-1, base) resets it."""
    if table is None:
        return []
    fmt = unit.format
    size = fmt.address_size
    largest = (1 << (8 * size)) - 1
    base, found = unit.base_address, []
    for _ in range(_MAX_RANGES):
        if not 0 <= pos <= len(table) - 2 * size:
            break
        start, end = fmt.unsigned(table, pos, size), fmt.unsigned(table, pos + size, size)
        pos += 2 * size
        if start == 0 and end == 0:
            break
        if start == largest:
            base = end
        else:
            found.append((base + start, base + end))
    return found


def _sorted_table(entries: list[tuple[int, int, int]]) -> tuple[list[int], list[int], list[int]]:
    entries.sort()
    return [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]
