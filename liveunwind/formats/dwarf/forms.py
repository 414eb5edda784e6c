"""DWARF attribute forms: how many bytes a value takes and what it holds (DWARF 2–5, §7.5.6).

Shared by the ``.debug_info`` reader and the DWARF 5 ``.debug_line`` header,
whose directory and file tables are described with the same forms.  A value
is returned raw — an offset into a string section stays an offset — and the
form tells the caller which section it points into.

Every read is bounded by the end of the unit it belongs to; a value that
would cross it raises :class:`DwarfError`.
"""

from __future__ import annotations

import struct

from liveunwind.errors import FormatError
from liveunwind.formats.leb128 import decode as _leb128

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap
    from collections.abc import Callable

    #: What DWARF is decoded from: a mapped file's bytes, inflated bytes, or a
    #: section being inflated into an anonymous mapping (``modules.lines``).
    Buffer = bytes | bytearray | memoryview | mmap.mmap

DW_FORM_addr = 0x01
DW_FORM_block2 = 0x03
DW_FORM_block4 = 0x04
DW_FORM_data2 = 0x05
DW_FORM_data4 = 0x06
DW_FORM_data8 = 0x07
DW_FORM_string = 0x08
DW_FORM_block = 0x09
DW_FORM_block1 = 0x0A
DW_FORM_data1 = 0x0B
DW_FORM_flag = 0x0C
DW_FORM_sdata = 0x0D
DW_FORM_strp = 0x0E
DW_FORM_udata = 0x0F
DW_FORM_ref_addr = 0x10
DW_FORM_ref1 = 0x11
DW_FORM_ref2 = 0x12
DW_FORM_ref4 = 0x13
DW_FORM_ref8 = 0x14
DW_FORM_ref_udata = 0x15
DW_FORM_indirect = 0x16
DW_FORM_sec_offset = 0x17
DW_FORM_exprloc = 0x18
DW_FORM_flag_present = 0x19
DW_FORM_strx = 0x1A
DW_FORM_addrx = 0x1B
DW_FORM_ref_sup4 = 0x1C
DW_FORM_strp_sup = 0x1D
DW_FORM_data16 = 0x1E
DW_FORM_line_strp = 0x1F
DW_FORM_ref_sig8 = 0x20
DW_FORM_implicit_const = 0x21
DW_FORM_loclistx = 0x22
DW_FORM_rnglistx = 0x23
DW_FORM_ref_sup8 = 0x24
DW_FORM_strx1 = 0x25
DW_FORM_strx2 = 0x26
DW_FORM_strx3 = 0x27
DW_FORM_strx4 = 0x28
DW_FORM_addrx1 = 0x29
DW_FORM_addrx2 = 0x2A
DW_FORM_addrx3 = 0x2B
DW_FORM_addrx4 = 0x2C
DW_FORM_GNU_addr_index = 0x1F01
DW_FORM_GNU_str_index = 0x1F02
DW_FORM_GNU_ref_alt = 0x1F20
DW_FORM_GNU_strp_alt = 0x1F21

#: Forms whose value is an index into ``.debug_str_offsets``.
STRX_FORMS = frozenset(
    (
        DW_FORM_strx,
        DW_FORM_strx1,
        DW_FORM_strx2,
        DW_FORM_strx3,
        DW_FORM_strx4,
        DW_FORM_GNU_str_index,
    )
)
#: Forms whose value is an index into ``.debug_addr``.
ADDRX_FORMS = frozenset(
    (
        DW_FORM_addrx,
        DW_FORM_addrx1,
        DW_FORM_addrx2,
        DW_FORM_addrx3,
        DW_FORM_addrx4,
        DW_FORM_GNU_addr_index,
    )
)
#: Forms holding a reference to another DIE of the same unit (an offset from the unit's start).
UNIT_REF_FORMS = frozenset(
    (DW_FORM_ref1, DW_FORM_ref2, DW_FORM_ref4, DW_FORM_ref8, DW_FORM_ref_udata)
)
#: Forms holding a constant (DW_AT_high_pc as a length, call_file, call_line…).
CONSTANT_FORMS = frozenset(
    (
        DW_FORM_data1,
        DW_FORM_data2,
        DW_FORM_data4,
        DW_FORM_data8,
        DW_FORM_sdata,
        DW_FORM_udata,
        DW_FORM_implicit_const,
    )
)

#: Indirections (DW_FORM_indirect naming another DW_FORM_indirect) followed at most.
_MAX_INDIRECT = 4


class DwarfError(FormatError):
    """A DWARF section is corrupt, cut short, or uses a form this reader does not know."""


class UnitFormat:
    """What the size of a value depends on: byte order, address and offset size, version."""

    __slots__ = (
        "address_size",
        "byte_order",
        "offset_size",
        "sizes",
        "u16",
        "u32",
        "u64",
        "version",
    )

    def __init__(self, byte_order: str, address_size: int, offset_size: int, version: int) -> None:
        if address_size not in (4, 8):
            raise DwarfError(f"unsupported address size {address_size}")
        self.byte_order = byte_order
        self.address_size = address_size
        self.offset_size = offset_size
        self.version = version
        self.u16: Callable[[Buffer, int], tuple[int]] = struct.Struct(byte_order + "H").unpack_from
        self.u32: Callable[[Buffer, int], tuple[int]] = struct.Struct(byte_order + "I").unpack_from
        self.u64: Callable[[Buffer, int], tuple[int]] = struct.Struct(byte_order + "Q").unpack_from
        #: form → size of its values in this format, for the forms of a fixed size.
        self.sizes: dict[int, int] = {}

    def unsigned(self, data: Buffer, pos: int, size: int) -> int:
        """An unsigned integer of ``size`` bytes (1, 2, 3, 4 or 8) at ``pos``."""
        if size == 4:
            return self.u32(data, pos)[0]
        if size == 8:
            return self.u64(data, pos)[0]
        if size == 2:
            return self.u16(data, pos)[0]
        if size == 1:
            return data[pos]
        if self.byte_order == "<":
            return int.from_bytes(data[pos : pos + size], "little")
        return int.from_bytes(data[pos : pos + size], "big")


#: Fixed value sizes: form → bytes, or a negative code resolved per unit
#: (-1 address size, -2 offset size, -3 ref_addr: address size in DWARF 2).
_FIXED: dict[int, int] = {
    DW_FORM_addr: -1,
    DW_FORM_data1: 1,
    DW_FORM_ref1: 1,
    DW_FORM_flag: 1,
    DW_FORM_strx1: 1,
    DW_FORM_addrx1: 1,
    DW_FORM_data2: 2,
    DW_FORM_ref2: 2,
    DW_FORM_strx2: 2,
    DW_FORM_addrx2: 2,
    DW_FORM_strx3: 3,
    DW_FORM_addrx3: 3,
    DW_FORM_data4: 4,
    DW_FORM_ref4: 4,
    DW_FORM_ref_sup4: 4,
    DW_FORM_strx4: 4,
    DW_FORM_addrx4: 4,
    DW_FORM_data8: 8,
    DW_FORM_ref8: 8,
    DW_FORM_ref_sig8: 8,
    DW_FORM_ref_sup8: 8,
    DW_FORM_data16: 16,
    DW_FORM_flag_present: 0,
    DW_FORM_implicit_const: 0,
    DW_FORM_strp: -2,
    DW_FORM_line_strp: -2,
    DW_FORM_sec_offset: -2,
    DW_FORM_strp_sup: -2,
    DW_FORM_GNU_ref_alt: -2,
    DW_FORM_GNU_strp_alt: -2,
    DW_FORM_ref_addr: -3,
}
_ULEB_FORMS = frozenset(
    (
        DW_FORM_udata,
        DW_FORM_ref_udata,
        DW_FORM_strx,
        DW_FORM_addrx,
        DW_FORM_loclistx,
        DW_FORM_rnglistx,
        DW_FORM_GNU_addr_index,
        DW_FORM_GNU_str_index,
    )
)


def fixed_size(form: int, fmt: UnitFormat) -> int | None:
    """The size of a value of ``form`` in units of ``fmt``, or None if it varies."""
    if not fmt.sizes:
        fmt.sizes.update((known, _fixed_size(known, fmt)) for known in _FIXED)
    return fmt.sizes.get(form)


def _fixed_size(form: int, fmt: UnitFormat) -> int:
    size = _FIXED[form]
    if size >= 0:
        return size
    if size == -1:
        return fmt.address_size
    if size == -2:
        return fmt.offset_size
    return fmt.address_size if fmt.version <= 2 else fmt.offset_size


def read_value(
    data: Buffer, pos: int, end: int, form: int, fmt: UnitFormat
) -> tuple[int | bytes | str, int]:
    """The raw value of one attribute of ``form`` at ``pos``, and the position after it.

    Integers for constants, addresses, offsets and indices; ``str`` for
    DW_FORM_string; ``bytes`` for blocks, expressions and data16.  sdata is
    signed, everything else unsigned.
    """
    for _ in range(_MAX_INDIRECT):
        size = _FIXED.get(form)
        if size is not None:
            if size < 0:
                size = fixed_size(form, fmt) or 0
            if pos + size > end:
                raise DwarfError(f"attribute of form {form:#x} crosses its unit's end")
            if size == 16:
                return bytes(data[pos : pos + 16]), pos + 16
            return (fmt.unsigned(data, pos, size) if size else 1), pos + size
        if form in _ULEB_FORMS:
            return _leb128(data, pos, end, False, DwarfError)
        if form == DW_FORM_sdata:
            return _leb128(data, pos, end, True, DwarfError)
        if form == DW_FORM_string:
            stop = bytes(data[pos : min(end, pos + 4096)]).find(b"\0")
            if stop < 0:
                raise DwarfError("unterminated DW_FORM_string")
            return bytes(data[pos : pos + stop]).decode("utf-8", "replace"), pos + stop + 1
        if form in (DW_FORM_block1, DW_FORM_block2, DW_FORM_block4, DW_FORM_block, DW_FORM_exprloc):
            if form == DW_FORM_block1:
                length, pos = data[pos] if pos < end else 0, pos + 1
            elif form == DW_FORM_block2:
                length, pos = fmt.unsigned(data, pos, 2) if pos + 2 <= end else 0, pos + 2
            elif form == DW_FORM_block4:
                length, pos = fmt.unsigned(data, pos, 4) if pos + 4 <= end else 0, pos + 4
            else:
                length, pos = _leb128(data, pos, end, False, DwarfError)
            if pos + length > end:
                raise DwarfError(f"block of {length} bytes crosses its unit's end")
            return bytes(data[pos : pos + length]), pos + length
        if form == DW_FORM_indirect:
            form, pos = _leb128(data, pos, end, False, DwarfError)
            continue
        raise DwarfError(f"unknown attribute form {form:#x}")
    raise DwarfError("DW_FORM_indirect nested too deeply")


def c_string(section: Buffer | None, offset: int) -> str | None:
    """The NUL-terminated string at ``offset`` of a string section, or None if outside it."""
    if section is None or not 0 <= offset < len(section):
        return None
    if isinstance(section, memoryview):  # a mapped, uncompressed section: no find()
        chunk = bytes(section[offset : offset + 4096])
        stop = chunk.find(b"\0")
        return (chunk if stop < 0 else chunk[:stop]).decode("utf-8", "replace")
    stop = section.find(b"\0", offset, offset + 4096)
    return section[offset : offset + 4096 if stop < 0 else stop].decode("utf-8", "replace")
