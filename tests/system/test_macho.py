"""liveunwind's own Mach-O reader (formats/macho.py) against lief, the C++ parser it replaced.

The files are testprogs/macho's programs (clang and lld, x86_64 and arm64)
and a universal file llvm-lipo makes of both; lief is the oracle of what
they hold.  Then crafted files: each is one line and exit code 2, quickly
and with no third-party parser running.  tests/unit/test_macho.py decodes
hand-made bytes.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.modules.macho import MachOImage
from tests.support.assertions import assert_one_line_error
from tests.support.cli import run_cli
from tests.support.macho import ARCHES, TOOLS

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in (*TOOLS, "llvm-lipo-16")),
    reason=f"needs {', '.join((*TOOLS, 'llvm-lipo-16'))}",
)


@pytest.fixture(scope="module")
def universal(macho_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lipo") / "chain-universal"
    subprocess.run(
        ["llvm-lipo-16", "-create", *(str(macho_build / f"chain-{arch}") for arch in ARCHES),
         "-output", str(path)],
        check=True,
    )  # fmt: skip
    return path


def _lief_slice(path: Path, cpu_type: int) -> Any:
    lief = pytest.importorskip("lief")
    lief.logging.disable()
    fat = lief.MachO.parse(str(path))
    for index in range(fat.size):
        binary = fat.at(index)
        value = binary.header.cpu_type
        if int(getattr(value, "value", value)) == cpu_type:
            return binary
    raise AssertionError(f"lief finds no slice of CPU type {cpu_type:#x} in {path}")


def assert_as_lief_reads_it(image: MachOImage, path: Path) -> None:
    """Segments, sections (and their bytes), UUID and the code symbols lief reads, the same."""
    assert image.arch.macho is not None
    binary = _lief_slice(path, image._header.cpu_type)
    assert [(s.name, s.vmaddr, s.vmsize, s.fileoff, s.filesize) for s in image.segments] == [
        (s.name, s.virtual_address, s.virtual_size, s.file_offset, s.file_size)
        for s in binary.segments
    ]
    assert [(s.segment, s.name, s.address, s.size) for s in image.section_list] == [
        (s.segment_name, s.name, s.virtual_address, s.size) for s in binary.sections
    ]
    for ours, theirs in zip(image.section_list, binary.sections, strict=True):
        if ours.in_file and ours.size:
            assert image.section_data(ours.segment, ours.name) == bytes(theirs.content), ours
    assert image.uuid == bytes(binary.uuid.uuid)
    code = {i for i, section in enumerate(image.section_list) if section.executable}
    theirs = sorted(
        (symbol.value, symbol.name, symbol.numberof_sections - 1)
        for symbol in binary.symbols
        if not symbol.raw_type & 0xE0
        and symbol.raw_type & 0x0E == 0x0E
        and symbol.numberof_sections - 1 in code
    )
    assert sorted(image._symbol_records()) == theirs
    assert len(theirs) >= 8  # the program's functions: a file where nothing matched proves nothing


@pytest.mark.parametrize("arch", ARCHES)
def test_a_program_reads_as_lief_reads_it(macho_build: Path, arch: str) -> None:
    path = macho_build / f"chain-{arch}"
    assert_as_lief_reads_it(MachOImage(str(path)), path)


@pytest.mark.parametrize("arch", ARCHES)
def test_each_slice_of_a_universal_file(universal: Path, macho_build: Path, arch: str) -> None:
    wanted = arch_by_name(arch)
    image = MachOImage(str(universal), arch=wanted)
    assert image.arch is wanted
    assert_as_lief_reads_it(image, universal)
    thin = MachOImage(str(macho_build / f"chain-{arch}"))
    assert image.uuid == thin.uuid and image.read(thin.text_base, 64) == thin.read(
        thin.text_base, 64
    )


# -- crafted files: one line, exit code 2 -------------------------------------------------


def _commands(data: bytes) -> list[tuple[int, int]]:
    """(cmd, offset) of each load command of a thin 64-bit file."""
    found, position = [], 32
    for _ in range(struct.unpack_from("<I", data, 16)[0]):
        command, size = struct.unpack_from("<2I", data, position)
        found.append((command, position))
        position += size
    return found


def _edited(data: bytes, edits: dict[int, bytes]) -> bytes:
    out = bytearray(data)
    for offset, raw in edits.items():
        out[offset : offset + len(raw)] = raw
    return bytes(out)


def _crafted(chain: bytes) -> dict[str, tuple[bytes, str]]:
    """Name → (file, what the one line says)."""
    commands = _commands(chain)
    text = next(at for cmd, at in commands if cmd == 0x19 and chain[at + 8 : at + 14] == b"__TEXT")
    symtab = next(at for cmd, at in commands if cmd == 0x2)
    many = struct.pack(">2I", 0xCAFEBABE, 1000) + struct.pack(">5I", 0x01000007, 3, 0x1000, 64, 12)
    past = struct.pack(">2I", 0xCAFEBABE, 1) + struct.pack(
        ">5I", 0x01000007, 3, 0x1000, 1 << 30, 12
    )
    return {
        "sections": (_edited(chain, {text + 64: struct.pack("<I", 0xFFFFFFFF)}), "sections"),
        "commands": (_edited(chain, {16: struct.pack("<I", 0xFFFFFFFF)}), "load commands"),
        "command size": (_edited(chain, {36: struct.pack("<I", 0x7FFFFFF0)}), "bad size"),
        "slices": (many.ljust(0x1000, b"\0") + chain, "1000 slices"),
        "slice past the end": (past.ljust(0x1000, b"\0") + chain, "past the end"),
        "symbols": (_edited(chain, {symtab + 12: struct.pack("<I", 0x0FFFFFFF)}), "symbol table"),
        "truncated": (chain[:24], "too short"),
    }


def test_crafted_files_are_one_line_and_exit_code_2(macho_build: Path, tmp_path: Path) -> None:
    chain = (macho_build / "chain-x86_64").read_bytes()
    address = MachOImage(str(macho_build / "chain-x86_64")).section("__TEXT", "__text")
    assert address is not None
    for name, (data, words) in _crafted(chain).items():
        path = tmp_path / name.replace(" ", "-")
        path.write_bytes(data)
        started = time.monotonic()
        # --pc names the frame: the symbol table is read too.
        result = run_cli("unwind-info", str(path), "--pc", hex(address.address + 16))
        assert time.monotonic() - started < 20, name
        assert_one_line_error(result, 2, words)


def test_a_corrupt_symbol_table_costs_the_names_not_the_image(
    macho_build: Path, tmp_path: Path
) -> None:
    """A module whose symbol table runs past its file still unwinds; the problem says why."""
    from liveunwind.modules.macho import MachOModule

    path = tmp_path / "symbols"
    path.write_bytes(_crafted((macho_build / "chain-x86_64").read_bytes())["symbols"][0])
    module = MachOModule(str(path), 0x100000000, [(0x100000000, 0x100010000)])
    assert module.unwind_sources["compact"] and module.symbols is None
    assert any("symbol table" in problem for problem in module.problems), module.problems


def test_a_file_truncated_after_it_was_opened_reads_as_it_was(
    macho_build: Path, tmp_path: Path
) -> None:
    """Read into memory of our own, never mapped: truncating the file cannot raise SIGBUS, and
    what was read (the first 64 KiB chunk, these whole programs) reads on as it was."""
    original = macho_build / "chain-x86_64"
    path = tmp_path / "chain"
    shutil.copy(original, path)
    image = MachOImage(str(path))
    with open(path, "r+b") as stream:
        stream.truncate(100)
    pristine = MachOImage(str(original))
    assert image.section_data("__TEXT", "__unwind_info") == pristine.section_data(
        "__TEXT", "__unwind_info"
    )
    assert image._symbol_records() == pristine._symbol_records()
