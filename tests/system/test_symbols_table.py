"""Symbol tables against ``readelf -s``: every function symbol is found where readelf puts it.

SymbolTable reads symbols as whole columns (casts of the section when the
image is in the host's byte order, ``struct`` otherwise).  The oracle is
binutils' readelf on real binaries — libc with its separate debug file,
test programs, and a big-endian aarch64 program built with clang and lld,
which takes the ``struct`` path — and both paths must build the same table
from the same image.

Where several symbols share an address the table keeps one, ranked as
debuggers do: global over weak over local, and ``.symtab`` two ranks over
``.dynsym``.  The oracle ranks the same way and accepts any of the names
tied for first place.
"""

from __future__ import annotations

import bisect
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from liveunwind.formats.elf import ElfImage
from liveunwind.modules import symbols
from liveunwind.modules.debuginfo import build_id_paths
from liveunwind.modules.symbols import SymbolTable

LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")
#: One line of ``readelf -sW``: number, value, size, type, binding, visibility
#: (perhaps followed by ``[...]`` details), section index, name.
_SYMBOL_LINE = re.compile(
    r"\s*\d+: ([0-9a-f]+)\s+(\S+) (\w+)\s+(\w+)\s+\w+(?:\s+\[[^]]*\])?\s+(\S+) ?(.*)"
)
_BINDING_RANK = {"GLOBAL": 2, "WEAK": 1}

BIG_ENDIAN_PROGRAM = """
#define NOINLINE __attribute__((noinline, used))
volatile int sink;
{functions}
int alias_global(int) __attribute__((alias("global_0")));
int alias_weak(int) __attribute__((weak, alias("global_0")));
static int alias_local(int) __attribute__((alias("local_1"), used));
void _start(void) {{ for (;;) sink += global_0(1) + weak_1(2); }}
"""
BIG_ENDIAN_FUNCTIONS = (
    "static NOINLINE int local_{n}(int x) {{ sink += {n}; return x * {n}; }}",
    "NOINLINE int global_{n}(int x) {{ sink += {n}; return local_{n}(x) + 1; }}",
    "__attribute__((weak)) NOINLINE int weak_{n}(int x) {{ sink -= {n}; return x - {n}; }}",
)


class Oracle:
    """What readelf says a SymbolTable of ``paths`` must hold, built independently of it."""

    def __init__(self, *paths: Path) -> None:
        #: Per address: the best rank seen and the names (unversioned) that have it.
        self.best: dict[int, tuple[int, set[str]]] = {}
        #: Every function symbol: (address, size).
        self.symbols: list[tuple[int, int]] = []
        #: Per address: the sizes of the symbols that have the best rank.
        self.sizes: dict[int, set[int]] = {}
        #: Addresses of undefined functions (a non-PIE program's PLT entries): no function there.
        self.undefined: set[int] = set()
        for path in paths:
            for table, value, size, binding, name in readelf_functions(path):
                if table:
                    self._add(table, value, size, binding, name)
                else:
                    self.undefined.add(value)
        self.starts = sorted(self.best)

    def _add(self, table: str, value: int, size: int, binding: str, name: str) -> None:
        rank = (2 if table == ".symtab" else 0) + _BINDING_RANK.get(binding, 0)
        self.symbols.append((value, size))
        current = self.best.get(value)
        if current is None or rank > current[0]:
            self.best[value] = (rank, {name})
            self.sizes[value] = {size}
        elif rank == current[0]:
            current[1].add(name)
            self.sizes[value].add(size)

    def check(self, table: SymbolTable, address: int) -> None:
        """``table.lookup(address)`` is the function readelf puts there, or None if it has none.

        A function holds the addresses up to its size, or all up to the next
        function when it has no size.
        """
        start = self.starts[bisect.bisect_right(self.starts, address) - 1]
        sizes = self.sizes[start]
        holds = {size for size in sizes if not size or address < start + size}
        match = table.lookup(address)
        where = f"{address:#x} (function at {start:#x}: {self.best[start][1]})"
        if match is None:
            assert holds != sizes, f"{where}: not found"
            return
        assert unversioned(match.name) in self.best[start][1], f"{where}: found {match.name}"
        assert match.offset == address - start, where
        assert match.size in holds, f"{where}: found with size {match.size}"

    def probes(self) -> list[int]:
        """The first and last byte of every function symbol, the byte after it, undefined ones."""
        edges = set(self.undefined)
        for value, size in self.symbols:
            end = value + max(size, 1)
            edges.update((value, end - 1, end))
        return sorted(address for address in edges if address >= self.starts[0])


def readelf_functions(path: Path) -> list[tuple[str, int, int, str, str]]:
    """(table, value, size, binding, name) of each function symbol readelf lists with an address.

    The table is "" for undefined symbols.
    """
    output = subprocess.run(
        ["readelf", "-sW", str(path)], capture_output=True, text=True, check=False
    ).stdout
    table = ""
    functions = []
    for line in output.splitlines():
        heading = re.match(r"Symbol table '([^']+)'", line)
        if heading:
            table = heading.group(1)
            continue
        fields = _SYMBOL_LINE.fullmatch(line)
        if fields is None:
            continue
        value, size, kind, binding, index, name = fields.groups()
        if kind in ("FUNC", "IFUNC") and int(value, 16):
            where = "" if index == "UND" else table
            functions.append((where, int(value, 16), int(size, 0), binding, unversioned(name)))
    return functions


def unversioned(name: str) -> str:
    """A name without its symbol version (readelf appends ``@GLIBC_2.2.5 (3)`` to .dynsym's)."""
    return name.partition("@")[0]


def image(path: Path) -> ElfImage:
    return ElfImage(path.read_bytes(), origin=str(path))


def assert_table_matches(table: SymbolTable, oracle: Oracle) -> None:
    assert len(table) == len(oracle.best)
    for address in oracle.probes():
        oracle.check(table, address)


def struct_path_table(monkeypatch: pytest.MonkeyPatch, *images: ElfImage) -> SymbolTable:
    """The table built through ``struct``, as for an image in the other byte order."""
    with monkeypatch.context() as patch:
        patch.setattr(symbols, "_NATIVE_ORDER", "?")
        return SymbolTable(*images)


@pytest.fixture(scope="module")
def libc_and_debug() -> tuple[Path, Path]:
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    if not LIBC.exists():
        pytest.skip(f"no {LIBC}")
    build_id = image(LIBC).build_id
    assert build_id is not None
    debug = next(
        (Path(p) for p in build_id_paths(build_id, ["/usr/lib/debug"]) if Path(p).exists()), None
    )
    if debug is None:
        pytest.skip("libc's debug file is not installed (libc6-dbg)")
    return LIBC, debug


@pytest.fixture(scope="module")
def big_endian_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A big-endian aarch64 program with local, global, weak and aliased functions."""
    for tool in ("clang-16", "ld.lld-16", "readelf"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    folder = tmp_path_factory.mktemp("big-endian")
    functions = "\n".join(line.format(n=n) for n in range(40) for line in BIG_ENDIAN_FUNCTIONS)
    source = folder / "program.c"
    source.write_text(BIG_ENDIAN_PROGRAM.format(functions=functions))
    binary = folder / "program"
    command = [
        "clang-16", "--target=aarch64_be-linux-gnu", "-O1", "-ffreestanding", "-nostdlib",
        "-fuse-ld=lld", "-o", str(binary), str(source),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    return binary


def test_libc_with_its_debug_file_matches_readelf(libc_and_debug: tuple[Path, Path]) -> None:
    libc, debug = libc_and_debug
    oracle = Oracle(libc, debug)
    assert len(oracle.best) > 2000
    assert_table_matches(SymbolTable(image(libc), image(debug)), oracle)


def test_libc_alone_matches_readelf(libc_and_debug: tuple[Path, Path]) -> None:
    libc, _ = libc_and_debug
    assert_table_matches(SymbolTable(image(libc)), Oracle(libc))


@pytest.mark.parametrize("program", ["threads-O2", "cxxthrow-O2", "libtpshared.so"])
def test_test_programs_match_readelf(testprogs_build: Path, program: str) -> None:
    path = testprogs_build / program
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    assert_table_matches(SymbolTable(image(path)), Oracle(path))


def test_undefined_functions_at_plt_entries_are_not_named(tmp_path: Path) -> None:
    """A non-PIE program taking a library function's address gives it a PLT address, undefined."""
    if shutil.which("gcc") is None or shutil.which("readelf") is None:
        pytest.skip("gcc or readelf is not installed")
    source = tmp_path / "plt.c"
    source.write_text('#include <stdio.h>\nint main(void) { printf("%p", (void *)puts); }\n')
    binary = tmp_path / "plt"
    subprocess.run(["gcc", "-O2", "-no-pie", "-fno-pic", "-o", binary, source], check=True)
    oracle = Oracle(binary)
    assert oracle.undefined, "puts should have a PLT address"
    table = SymbolTable(image(binary))
    assert_table_matches(table, oracle)
    for address in oracle.undefined:
        match = table.lookup(address)
        assert match is None or match.name != "puts"


def test_object_file_has_no_function_at_address_zero(tmp_path: Path) -> None:
    """In a relocatable object the first function is at 0, like undefined symbols: left out."""
    if shutil.which("gcc") is None or shutil.which("readelf") is None:
        pytest.skip("gcc or readelf is not installed")
    source = tmp_path / "object.c"
    source.write_text("int first(int x) { return x + 1; }\nint second(int x) { return x * 2; }\n")
    subprocess.run(["gcc", "-O2", "-c", "-o", tmp_path / "object.o", source], check=True)
    oracle = Oracle(tmp_path / "object.o")
    assert len(oracle.best) == 1  # second: first is at 0
    assert_table_matches(SymbolTable(image(tmp_path / "object.o")), oracle)


def test_big_endian_program_matches_readelf(big_endian_program: Path) -> None:
    big = image(big_endian_program)
    assert big.byte_order == ">"
    oracle = Oracle(big_endian_program)
    assert {"local_1", "global_0", "weak_1", "alias_local"} <= set().union(
        *(names for _, names in oracle.best.values())
    )
    assert_table_matches(SymbolTable(big), oracle)


def test_struct_path_builds_the_same_table(
    libc_and_debug: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    libc, debug = image(libc_and_debug[0]), image(libc_and_debug[1])
    cast = SymbolTable(libc, debug)
    unpacked = struct_path_table(monkeypatch, libc, debug)
    oracle = Oracle(*libc_and_debug)
    assert len(unpacked) == len(cast)
    for address in oracle.probes():
        one, other = cast.lookup(address), unpacked.lookup(address)
        assert (one is None) == (other is None), hex(address)
        if one is not None and other is not None:
            assert (one.name, one.offset, one.size) == (other.name, other.offset, other.size)


def test_unaligned_symbol_table_is_read(testprogs_build: Path) -> None:
    """The casts read symbols at any alignment: an image copied to an odd offset."""
    path = testprogs_build / "threads-O2"
    data = path.read_bytes()
    shifted = memoryview(bytes(1) + data)[1:]
    assert_table_matches(SymbolTable(ElfImage(shifted, origin=str(path))), Oracle(path))


def test_symbol_table_cut_mid_symbol_loses_only_that_symbol(testprogs_build: Path) -> None:
    """A .symtab whose size is not a whole number of symbols is read up to its last whole one."""
    path = testprogs_build / "threads-O2"
    data = bytearray(path.read_bytes())
    (section_headers,) = struct.unpack_from("<Q", data, 0x28)
    (header_size,) = struct.unpack_from("<H", data, 0x3A)
    index = next(i for i, s in enumerate(image(path).section_headers) if s.name == ".symtab")
    size_field = section_headers + index * header_size + 32  # sh_size
    (size,) = struct.unpack_from("<Q", data, size_field)
    struct.pack_into("<Q", data, size_field, size - 5)
    whole = SymbolTable(image(path))
    cut = SymbolTable(ElfImage(bytes(data)))
    assert len(whole) - 1 <= len(cut) <= len(whole)
