"""Function names from DWARF subprograms, for a debug file without ``.symtab``.

On a compilation unit written here byte by byte (DWARF 4): a function with
``low_pc``/``high_pc`` and one split in two by ``DW_AT_ranges`` (named by its
linkage name).  The same against gdb and eu-stack, on a real program whose
debug file has no symbol table and comes from a real debuginfod, is
tests/system/test_debuginfod.py.
"""

from __future__ import annotations

import struct

import pytest

from liveunwind.errors import FormatError
from liveunwind.formats.dwarf.info import DebugInfo, Sections
from liveunwind.modules.symbols import DwarfFunctions

_CU_LOW, _CU_SIZE = 0x1000, 0x1000


def _uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _abbrev(code: int, tag: int, children: bool, *attributes: tuple[int, int]) -> bytes:
    body = _uleb(code) + _uleb(tag) + bytes([children])
    for attribute, form in attributes:
        body += _uleb(attribute) + _uleb(form)
    return body + b"\0\0"


def _debug_info() -> DebugInfo:
    """One unit [0x1000, 0x2000): ``plain_c`` at [0x1000, 0x1040), ``name<int>`` at
    [0x1100, 0x1180) and its cold part [0x1800, 0x1810); nothing at [0x1040, 0x1100)."""
    addr, data4, string, sec_offset = 0x01, 0x06, 0x08, 0x17
    low_pc, high_pc, name, linkage_name, ranges = 0x11, 0x12, 0x03, 0x6E, 0x55
    abbrev = b"".join(
        [
            _abbrev(1, 0x11, True, (low_pc, addr), (high_pc, data4)),
            _abbrev(2, 0x2E, False, (name, string), (low_pc, addr), (high_pc, data4)),
            _abbrev(3, 0x2E, False, (linkage_name, string), (name, string), (ranges, sec_offset)),
            b"\0",
        ]
    )
    dies = (
        _uleb(1) + struct.pack("<QI", _CU_LOW, _CU_SIZE)
        + _uleb(2) + b"plain_c\0" + struct.pack("<QI", 0x1000, 0x40)
        + _uleb(3) + b"_Z4nameIiEvv\0name<int>\0" + struct.pack("<I", 0)
        + b"\0"
    )  # fmt: skip
    body = struct.pack("<HIB", 4, 0, 8) + dies
    info = struct.pack("<I", len(body)) + body
    # DWARF 4 .debug_ranges: offsets from the unit's base address, (0, 0) ends the list.
    debug_ranges = struct.pack("<6Q", 0x100, 0x180, 0x800, 0x810, 0, 0)
    return DebugInfo(Sections("<", info=info, abbrev=abbrev, ranges=debug_ranges))


@pytest.mark.parametrize(
    ("pc", "expected"),
    [
        (0x1000, ("plain_c", 0x1000, 0x1040)),
        (0x103F, ("plain_c", 0x1000, 0x1040)),
        (0x1120, ("_Z4nameIiEvv", 0x1100, 0x1180)),
        (0x1805, ("_Z4nameIiEvv", 0x1800, 0x1810)),  # the cold part: its own range
        (0x1040, None),  # inside the unit, in no function
        (0x3000, None),  # in no unit
    ],
)
def test_the_function_at_a_pc_is_the_subprogram_whose_range_holds_it(
    pc: int, expected: tuple[str, int, int] | None
) -> None:
    assert _debug_info().function_at(pc) == expected


def test_dwarf_functions_name_and_measure_as_symbols_do() -> None:
    info = _debug_info()
    functions = DwarfFunctions(lambda: info, None)
    match = functions.lookup(0x1805)
    assert match is not None
    assert (match.name, match.offset, match.size) == ("_Z4nameIiEvv", 5, 0x10)
    assert functions.lookup(0x1040) is None


def test_dwarf_that_cannot_be_read_names_nothing() -> None:
    def broken() -> DebugInfo:
        raise FormatError("test: .debug_info cut short")

    assert DwarfFunctions(broken, None).lookup(0x1000) is None
