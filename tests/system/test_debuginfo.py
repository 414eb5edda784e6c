"""Separate debug files: build-id directories, .gnu_debuglink, MiniDebugInfo, compressed sections.

The files are made at test time the way distributions make them: a C program
built with ``.debug_frame``-only CFI, split with ``objcopy --only-keep-debug``
and ``strip``, linked back with ``objcopy --add-gnu-debuglink``, and a
MiniDebugInfo section made as Fedora's find-debuginfo does.  The symbols
found must match ``nm`` on the unstripped program, and ``.debug_frame`` must
be the unstripped program's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from liveunwind.errors import FormatError
from liveunwind.formats.elf import ElfImage
from liveunwind.modules import debuginfo
from liveunwind.modules.debuginfo import find_debug_file, section_data
from liveunwind.modules.symbols import SymbolTable

_SHF_EXECINSTR = 4
PROGRAM = r"""
#include <stdio.h>
#define NOINLINE __attribute__((noinline))
volatile int sink;
static NOINLINE int hidden_static(int x) { sink += x; return x * VARIANT; }
NOINLINE int exported_leaf(int x) { sink += 2; return hidden_static(x) + 1; }
static NOINLINE int another_static(int x) { sink += 3; return exported_leaf(x) * 2; }
NOINLINE int exported_middle(int x) { sink += 4; return another_static(x) - 1; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", exported_middle(argc)); return 0; }
"""


@dataclass(frozen=True)
class Split:
    """One program, unstripped and split into a stripped file and its debug file."""

    full: Path
    stripped: Path  # without .gnu_debuglink
    debug: Path

    @property
    def build_id(self) -> bytes:
        build_id = image(self.full).build_id
        assert build_id is not None
        return build_id


def image(path: Path) -> ElfImage:
    return ElfImage(path.read_bytes(), origin=str(path))


def run(*command: str | Path, cwd: Path | None = None) -> str:
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def split(directory: Path, variant: int) -> Split:
    directory.mkdir()
    (directory / "prog.c").write_text(PROGRAM)
    full, stripped, debug = directory / "full", directory / "stripped", directory / "prog.debug"
    # Without unwind tables GCC writes the CFI to .debug_frame, which strip removes.
    run(
        "gcc", "-g", "-O1", "-rdynamic", "-fno-asynchronous-unwind-tables", f"-DVARIANT={variant}",
        "-Wl,--build-id=sha1", "-o", full, directory / "prog.c",
    )  # fmt: skip
    run("objcopy", "--only-keep-debug", full, debug)
    run("strip", "--strip-debug", "--strip-unneeded", "-o", stripped, full)
    return Split(full, stripped, debug)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Split, Split]:
    """Two builds of the program that differ in one constant (so in CRC and build-id)."""
    for tool in ("gcc", "objcopy", "strip", "nm", "xz"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    root = tmp_path_factory.mktemp("debuginfo")
    return split(root / "one", 3), split(root / "two", 5)


@pytest.fixture
def program(programs: tuple[Split, Split]) -> Split:
    return programs[0]


def with_debuglink(stripped: Path, debug: Path, into: Path) -> Path:
    """A copy of ``stripped`` in directory ``into`` whose debuglink names ``debug``."""
    into.mkdir(parents=True, exist_ok=True)
    linked = into / "prog"
    run("objcopy", f"--add-gnu-debuglink={debug.name}", stripped, linked, cwd=debug.parent)
    return linked


def nm_functions(path: Path) -> dict[int, set[str]]:
    """Function symbols by address, as nm lists them: text (global, local, weak) and ifuncs.

    nm's ``W`` also covers weak data without a type (``data_start``), so only
    addresses inside executable sections count.
    """
    executable = [
        (section.address, section.address + section.size)
        for section in image(path).section_headers
        if section.flags & _SHF_EXECINSTR
    ]
    functions: dict[int, set[str]] = {}
    for line in run("nm", "--defined-only", path).splitlines():
        address, kind, name = line.split(maxsplit=2)
        value = int(address, 16)
        if kind in "TtWi" and any(start <= value < end for start, end in executable):
            functions.setdefault(value, set()).add(name)
    return functions


def assert_symbols_match_nm(tables: list[SymbolTable], full: Path) -> None:
    expected = nm_functions(full)
    assert {"hidden_static", "another_static", "exported_leaf", "main"} <= set().union(
        *expected.values()
    )
    for address, names in expected.items():
        found = {match.name for table in tables if (match := table.lookup(address)) is not None}
        assert found & names, f"{address:#x}: expected one of {names}, found {found}"


def test_stripped_program_really_lost_its_symbols_and_cfi(program: Split) -> None:
    stripped = image(program.stripped)
    assert ".symtab" not in stripped.sections
    assert section_data(stripped, ".debug_frame") is None
    assert stripped.build_id == program.build_id


def test_found_by_build_id(program: Split, tmp_path: Path) -> None:
    hexid = program.build_id.hex()
    target = tmp_path / "debug" / ".build-id" / hexid[:2] / f"{hexid[2:]}.debug"
    target.parent.mkdir(parents=True)
    shutil.copy(program.debug, target)
    stripped = image(program.stripped)
    dirs = [str(tmp_path / "empty"), str(tmp_path / "debug")]
    found = find_debug_file(stripped, str(program.stripped), program.build_id, dirs)
    assert found is not None
    assert (found.how, found.path) == ("build-id", str(target))
    assert_symbols_match_nm([SymbolTable(found.image)], program.full)
    expected = section_data(image(program.full), ".debug_frame")
    assert expected
    assert bytes(section_data(found.image, ".debug_frame") or b"") == bytes(expected)


def test_build_id_file_of_another_build_is_refused(
    programs: tuple[Split, Split], tmp_path: Path
) -> None:
    one, two = programs
    hexid = one.build_id.hex()
    target = tmp_path / ".build-id" / hexid[:2] / f"{hexid[2:]}.debug"
    target.parent.mkdir(parents=True)
    shutil.copy(two.debug, target)
    problems: list[str] = []
    assert debuginfo.by_build_id(one.build_id, [str(tmp_path)], problems) is None
    assert "does not match" in problems[0]


def test_found_by_debuglink_after_a_wrong_crc_decoy(program: Split, tmp_path: Path) -> None:
    binary = with_debuglink(program.stripped, program.debug, tmp_path / "bin")
    # The first place searched holds a file of the right name but other contents.
    decoy = tmp_path / "bin" / "prog.debug"
    decoy.write_bytes(program.debug.read_bytes() + b"\0" * 16)
    (tmp_path / "bin" / ".debug").mkdir()
    real = tmp_path / "bin" / ".debug" / "prog.debug"
    shutil.copy(program.debug, real)
    problems: list[str] = []
    found = find_debug_file(
        image(binary), str(binary), program.build_id, [str(tmp_path / "nodebug")], problems
    )
    assert found is not None
    assert (found.how, found.path) == ("debuglink", str(real))
    assert len(problems) == 1
    assert str(decoy) in problems[0] and "CRC" in problems[0]
    assert_symbols_match_nm([SymbolTable(found.image)], program.full)
    assert section_data(found.image, ".debug_frame")


def test_debuglink_in_global_debug_dir(program: Split, tmp_path: Path) -> None:
    binary = with_debuglink(program.stripped, program.debug, tmp_path / "usr" / "bin")
    mirrored = Path(str(tmp_path / "debug") + str(binary.parent)) / "prog.debug"
    mirrored.parent.mkdir(parents=True)
    shutil.copy(program.debug, mirrored)
    found = find_debug_file(image(binary), str(binary), None, [str(tmp_path / "debug")])
    assert found is not None
    assert (found.how, found.path) == ("debuglink", str(mirrored))


def test_debuglink_with_right_crc_but_other_build_id(
    programs: tuple[Split, Split], tmp_path: Path
) -> None:
    one, two = programs
    # one's stripped file, linked (CRC and all) to two's debug file.
    binary = with_debuglink(one.stripped, two.debug, tmp_path / "bin")
    shutil.copy(two.debug, tmp_path / "bin" / "prog.debug")
    problems: list[str] = []
    found = find_debug_file(image(binary), str(binary), one.build_id, [], problems)
    assert found is None
    assert "build-id" in problems[0]


def test_hostile_debuglink_names_are_ignored(program: Split, tmp_path: Path) -> None:
    for index, name in enumerate((b"../prog.debug", b"..", b"")):
        content = tmp_path / f"link{index}"
        content.write_bytes(name + b"\0" * (4 - len(name) % 4) + b"\0\0\0\0")
        binary = tmp_path / f"prog{index}"
        run("objcopy", f"--add-section=.gnu_debuglink={content}", program.stripped, binary)
        assert debuginfo.debuglink(image(binary)) is None


def test_fifo_at_a_debug_path_is_not_opened(program: Split, tmp_path: Path) -> None:
    hexid = program.build_id.hex()
    fifo = tmp_path / ".build-id" / hexid[:2] / f"{hexid[2:]}.debug"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    problems: list[str] = []
    assert debuginfo.by_build_id(program.build_id, [str(tmp_path)], problems) is None
    assert "not a regular file" in problems[0]


# -- MiniDebugInfo ------------------------------------------------------------


def make_mini_debuginfo(program: Split, directory: Path) -> Path:
    """Fedora's recipe: the .symtab of functions .dynsym lacks, xz'd into .gnu_debugdata."""
    dynamic = set(run("nm", "-D", "--defined-only", "--format=posix", program.stripped).split())
    functions = [
        line.split()[0]
        for line in run("nm", "--defined-only", "--format=posix", program.full).splitlines()
        if line.split()[1] in ("T", "t")
    ]
    keep = directory / "keep_symbols"
    keep.write_text("".join(f"{name}\n" for name in functions if name not in dynamic))
    mini = directory / "mini_debuginfo"
    run(
        "objcopy", "-S", "--remove-section", ".gdb_index", "--remove-section", ".comment",
        f"--keep-symbols={keep}", program.debug, mini,
    )  # fmt: skip
    run("xz", "-f", mini)
    result = directory / "prog"
    run("objcopy", f"--add-section=.gnu_debugdata={mini}.xz", program.stripped, result)
    return result


def test_mini_debuginfo(program: Split, tmp_path: Path) -> None:
    binary = make_mini_debuginfo(program, tmp_path)
    stripped = image(binary)
    found = find_debug_file(stripped, str(binary), program.build_id, [str(tmp_path / "none")])
    assert found is not None
    assert (found.how, found.path) == ("gnu_debugdata", str(binary))
    mini = SymbolTable(found.image)
    # The static functions are only in the MiniDebugInfo, the exported ones only in .dynsym.
    assert mini.lookup(min(nm_functions(program.full))) is not None
    names = {
        match.name for address in nm_functions(program.full) if (match := mini.lookup(address))
    }
    assert {"hidden_static", "another_static"} <= names
    assert "exported_leaf" not in names
    assert_symbols_match_nm([SymbolTable(stripped), mini], program.full)


def test_full_debug_file_wins_over_mini_debuginfo(program: Split, tmp_path: Path) -> None:
    binary = make_mini_debuginfo(program, tmp_path)
    hexid = program.build_id.hex()
    target = tmp_path / "debug" / ".build-id" / hexid[:2] / f"{hexid[2:]}.debug"
    target.parent.mkdir(parents=True)
    shutil.copy(program.debug, target)
    found = find_debug_file(image(binary), str(binary), program.build_id, [str(tmp_path / "debug")])
    assert found is not None and found.how == "build-id"


def test_mini_debuginfo_bounds(
    program: Split, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = make_mini_debuginfo(program, tmp_path)
    xz = tmp_path / "mini_debuginfo.xz"
    truncated_xz = tmp_path / "truncated.xz"
    truncated_xz.write_bytes(xz.read_bytes()[: xz.stat().st_size // 2])
    truncated = tmp_path / "truncated"
    run("objcopy", f"--add-section=.gnu_debugdata={truncated_xz}", program.stripped, truncated)
    problems: list[str] = []
    assert debuginfo.mini_debuginfo(image(truncated), str(truncated), problems) is None
    assert "is truncated" in problems[0]
    monkeypatch.setattr(debuginfo, "MAX_MINI_DEBUGINFO", 1024)
    assert debuginfo.mini_debuginfo(image(good), str(good), problems) is None
    assert "exceeds 1024 bytes" in problems[1]


# -- compressed sections ------------------------------------------------------


@pytest.mark.parametrize("method", ["zlib", "zlib-gnu"])
def test_compressed_debug_frame(program: Split, tmp_path: Path, method: str) -> None:
    compressed = tmp_path / f"prog-{method}.debug"
    run("objcopy", f"--compress-debug-sections={method}", program.debug, compressed)
    packed = image(compressed)
    expected = bytes(section_data(image(program.debug), ".debug_frame") or b"")
    assert expected
    stored = ".zdebug_frame" if method == "zlib-gnu" else ".debug_frame"
    assert bytes(packed.section_data(stored) or b"") != expected  # really compressed
    assert section_data(packed, ".debug_frame") == expected


def test_zstd_section_is_decompressed(program: Split, tmp_path: Path) -> None:
    compressed = tmp_path / "prog-zstd.debug"
    result = subprocess.run(
        ["objcopy", "--compress-debug-sections=zstd", program.debug, compressed],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip("this objcopy cannot write zstd")
    plain = section_data(image(program.debug), ".debug_frame")
    assert plain and bytes(section_data(image(compressed), ".debug_frame") or b"") == bytes(plain)


def test_compressed_section_claiming_a_huge_size(program: Split, tmp_path: Path) -> None:
    compressed = tmp_path / "prog-z.debug"
    run("objcopy", "--compress-debug-sections=zlib", program.debug, compressed)
    data = bytearray(compressed.read_bytes())
    section = image(compressed).sections[".debug_frame"]
    data[section.offset + 8 : section.offset + 16] = (1 << 40).to_bytes(8, "little")
    with pytest.raises(FormatError, match="above the limit"):
        section_data(ElfImage(bytes(data)), ".debug_frame")
    data[section.offset + 8 : section.offset + 16] = (7).to_bytes(8, "little")
    with pytest.raises(FormatError, match="differs"):
        section_data(ElfImage(bytes(data)), ".debug_frame")


# -- this machine's own debug files -------------------------------------------


LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")


def test_installed_libc_debug_file(tmp_path: Path) -> None:
    """libc6-dbg (Debian): found by build-id; its symbols and compressed sections are usable."""
    if not LIBC.exists():
        pytest.skip(f"no {LIBC}")
    libc = image(LIBC)
    build_id = libc.build_id
    assert build_id is not None
    if not any(
        Path(path).exists() for path in debuginfo.build_id_paths(build_id, ["/usr/lib/debug"])
    ):
        pytest.skip("libc's debug file is not installed (libc6-dbg)")
    found = find_debug_file(libc, str(LIBC), build_id)
    assert found is not None and found.how == "build-id"
    table = SymbolTable(found.image)
    assert len(table) > len(SymbolTable(libc))  # local functions the .dynsym lacks
    expected = nm_functions(Path(found.path))
    sample = sorted(expected)[:: max(1, len(expected) // 200)]
    assert_symbols_subset(table, expected, sample)
    # Debian compresses the debug sections: compare with objcopy's decompression.
    compressed = [
        section.name
        for section in found.image.section_headers
        if section.flags & debuginfo.SHF_COMPRESSED
    ]
    if not compressed:
        pytest.skip("this libc debug file has no compressed sections")
    plain = tmp_path / "libc.debug"
    run("objcopy", "--decompress-debug-sections", found.path, plain)
    name = min(compressed, key=lambda name: found.image.sections[name].size)
    assert section_data(found.image, name) == bytes(image(plain).section_data(name) or b"")


def assert_symbols_subset(
    table: SymbolTable, expected: dict[int, set[str]], sample: list[int]
) -> None:
    for address in sample:
        match = table.lookup(address)
        assert match is not None and match.name in expected[address], hex(address)
