"""What the fuzz campaign (tests/fuzz/) found, each input rebuilt by hand from a real file.

A finding is an input that made liveunwind fail with something other than
its own typed errors, run out of its time or memory bounds, or crash.  Each
one fixed is pinned here by the smallest edit of a real file that shows
it, so the test says what was wrong without depending on the mutator.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from liveunwind.cli.unwindinfo import describe_file
from liveunwind.errors import FormatError
from tests.support.macho import TOOLS

# -- Mach-O files: corrupt fields lief once handed back in surprising forms (now formats/macho) --


@pytest.fixture(scope="module")
def chain(macho_build: Path) -> bytes:
    """testprogs/macho's x86_64 program, a thin 64-bit Mach-O file."""
    if any(shutil.which(tool) is None for tool in TOOLS):
        pytest.skip(f"needs {', '.join(TOOLS)}")
    return (macho_build / "chain-x86_64").read_bytes()


def load_commands(data: bytes) -> list[tuple[int, int]]:
    """(offset, cmd) of every load command."""
    count = struct.unpack_from("<I", data, 16)[0]
    found, position = [], 32
    for _ in range(count):
        command, size = struct.unpack_from("<2I", data, position)
        found.append((position, command))
        position += size
    return found


def edited(data: bytes, folder: Path, edits: dict[int, bytes]) -> str:
    out = bytearray(data)
    for offset, raw in edits.items():
        out[offset : offset + len(raw)] = raw
    path = folder / "edited"
    path.write_bytes(out)
    return str(path)


def test_an_unknown_cpu_type(chain: bytes, tmp_path: Path) -> None:
    """A cputype we have no Arch for (lief gave it as a bare int: AttributeError on .value)."""
    from liveunwind.modules.macho import MachOImage

    path = edited(chain, tmp_path, {4: struct.pack("<I", 0x01000099)})
    with pytest.raises(FormatError, match="no x86_64 or arm64 slice"):
        MachOImage(path)


def test_a_segment_name_that_is_not_utf8(chain: bytes, tmp_path: Path) -> None:
    """The name reads with U+FFFD, so no segment is __TEXT: one line (lief: UnicodeDecodeError)."""
    from liveunwind.modules.macho import MachOImage

    text = next(
        position
        for position, command in load_commands(chain)
        if command == 0x19 and chain[position + 8 : position + 16].rstrip(b"\0") == b"__TEXT"
    )
    path = edited(chain, tmp_path, {text + 8 + 5: b"\xf9"})  # "__TEX\xf9"
    with pytest.raises(FormatError, match="no __TEXT segment"):
        MachOImage(path)
    with pytest.raises(Exception, match="no __TEXT segment"):  # unwind-info says it in one line
        describe_file(path, None, None)


def test_a_symbol_name_that_is_not_utf8(chain: bytes, tmp_path: Path, macho_build: Path) -> None:
    """Such a name reads as text with U+FFFD (lief gave it as bytes: TypeError)."""
    from liveunwind.modules.macho import MachOImage

    symtab = next(position for position, command in load_commands(chain) if command == 0x2)
    symoff, nsyms, stroff, _ = struct.unpack_from("<4I", chain, symtab + 8)
    original = MachOImage(str(macho_build / "chain-x86_64")).symbols
    name_of = {}
    for index in range(nsyms):
        (strx,) = struct.unpack_from("<I", chain, symoff + 16 * index)
        name = chain[stroff + strx : chain.index(b"\0", stroff + strx)]
        name_of[name] = stroff + strx
    target = name_of[b"_leaf_stop"]
    path = edited(chain, tmp_path, {target + 1: b"\xff"})
    image = MachOImage(path)
    address = next(
        original._addresses[i]
        for i, name in enumerate(original._names)
        if name == "leaf_stop"
    )  # fmt: skip
    match = image.symbols.lookup(address)
    assert match is not None and match.name == "\ufffdeaf_stop"


def test_a_segment_holding_code_whose_name_is_not_utf8(
    chain: bytes, tmp_path: Path, macho_build: Path
) -> None:
    """The segment's content is found by its offsets, not its name (lief gave that name as
    bytes: KeyError in ``_segment_content`` out of compact unwind's STACK_IND read, fuzz seeds
    585933173 and 664230474, the latter pinned in tests/fuzz/corpus/macho-file)."""
    from liveunwind.modules.macho import MachOImage

    pagezero = next(
        position
        for position, command in load_commands(chain)
        if command == 0x19 and chain[position + 8 : position + 24].rstrip(b"\0") == b"__PAGEZERO"
    )
    text_base = MachOImage(str(macho_build / "chain-x86_64")).text_base
    # __PAGEZERO renamed "\xff\xfePAGE" and moved over __TEXT's first page, file offset 0.
    path = edited(
        chain,
        tmp_path,
        {
            pagezero + 8: b"\xff\xfePAGE\0\0\0\0\0\0\0\0\0\0",
            pagezero + 24: struct.pack("<QQQQ", text_base, 0x1000, 0, 0x1000),
        },
    )
    image = MachOImage(path)
    assert image.read(text_base + 0x10, 8) == chain[0x10:0x18]
