"""formats/macho.py on hand-made bytes: every field where it belongs, every bound checked.

tests/system/test_macho.py reads real programs against lief.
"""

from __future__ import annotations

import struct

import pytest

from liveunwind.errors import FormatError
from liveunwind.formats.macho import MachOHeader, fat_slices

X86_64 = 0x01000007
ARM64 = 0x0100000C


def _name(text: bytes) -> bytes:
    return text.ljust(16, b"\0")


def image(
    *, cpu: int = X86_64, nsects: int | None = None, symbols: list[tuple[int, int]] | None = None
) -> bytes:
    """A 64-bit image: __TEXT (one section, __text) at 0x1000, LC_UUID, LC_SYMTAB after them."""
    segment = struct.pack(
        "<2I16s4Q4I", 0x19, 72 + 80, _name(b"__TEXT"), 0x1000, 0x1000, 0, 0x200, 5, 5,
        1 if nsects is None else nsects, 0,
    ) + struct.pack(
        "<16s16s2Q8I", _name(b"__text"), _name(b"__TEXT"), 0x1100, 0x40, 0x100, 4, 0, 0,
        0x80000400, 0, 0, 0,
    )  # fmt: skip
    uuid = struct.pack("<2I", 0x1B, 24) + bytes(range(16))
    strings = b"\0_main\0_h\xffllo\0"
    entries = symbols if symbols is not None else [(1, 0x1100), (7, 0x1120)]
    table = b"".join(struct.pack("<IBBHQ", strx, 0x0F, 1, 0, value) for strx, value in entries)
    symoff = 0x200
    symtab = struct.pack("<6I", 0x2, 24, symoff, len(entries), symoff + len(table), len(strings))
    commands = segment + uuid + symtab
    header = struct.pack("<7I4x", 0xFEEDFACF, cpu, 3, 2, 3, len(commands), 0)
    return (header + commands).ljust(symoff, b"\xcc") + table + strings


def test_the_load_commands_read_back() -> None:
    data = image()
    header = MachOHeader(data)
    assert (header.cpu_type, header.file_type, header.uuid) == (X86_64, 2, bytes(range(16)))
    (segment,) = header.segments
    assert (segment.name, segment.vmaddr, segment.vmsize, segment.filesize) == (
        "__TEXT", 0x1000, 0x1000, 0x200,
    )  # fmt: skip
    text = header.section("__TEXT", "__text")
    assert text is not None and text.executable and text.in_file
    assert (text.address, text.size, text.offset) == (0x1100, 0x40, 0x100)
    names = [(symbol.name, symbol.value, symbol.section) for symbol in header.symbols(data)]
    assert names == [("_main", 0x1100, 1), ("_h\ufffdllo", 0x1120, 1)]


def test_a_name_past_the_strings_is_empty() -> None:
    data = image(symbols=[(1 << 20, 0x1100)])
    assert [symbol.name for symbol in MachOHeader(data).symbols(data)] == [""]


def test_universal_slices() -> None:
    thin = image()
    fat = struct.pack(">2I", 0xCAFEBABE, 2) + struct.pack(
        ">10I", X86_64, 3, 0x1000, len(thin), 12, ARM64, 0, 0x2000, len(thin), 14
    )
    slices = fat_slices(fat.ljust(0x1000, b"\0") + thin)
    assert slices is not None
    assert [(s.cpu_type, s.offset, s.size) for s in slices] == [
        (X86_64, 0x1000, len(thin)), (ARM64, 0x2000, len(thin)),
    ]  # fmt: skip
    assert fat_slices(thin) is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (image()[:20], "too short"),
        (b"\x7fELF" + image()[4:], "not a 64-bit Mach-O"),
        (image(nsects=0xFFFFFFFF), "4294967295 sections"),
        (image()[:32] + struct.pack("<2I", 0x19, 4) + image()[40:], "bad size"),
        (image()[:16] + struct.pack("<I", 1 << 20) + image()[20:], "load commands"),
        (image()[:20] + struct.pack("<I", 1 << 30) + image()[24:], "load commands"),
    ],
    ids=["truncated", "magic", "nsects", "command size", "ncmds", "sizeofcmds"],
)
def test_a_malformed_header_is_a_format_error(data: bytes, words: str) -> None:
    with pytest.raises(FormatError, match=words):
        MachOHeader(data)


def test_a_symbol_table_past_the_file_is_a_format_error() -> None:
    data = image()
    header = MachOHeader(data)
    with pytest.raises(FormatError, match="run past the file"):
        header.symbols(data[:0x208])
    with pytest.raises(FormatError, match="string table"):
        header.symbols(data[:-3])


def test_too_many_slices_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="1000 slices"):
        fat_slices(struct.pack(">2I", 0xCAFEBABE, 1000) + bytes(20 * 1000))
    with pytest.raises(FormatError, match="more than it holds"):
        fat_slices(struct.pack(">2I", 0xCAFEBABE, 3) + bytes(20))
