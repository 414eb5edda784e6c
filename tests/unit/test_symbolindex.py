"""Symbol indexes (modules/symbolindex.py): a table read back answers as the table built.

Each test keeps indexes in its own cache folder, of the C library this
process maps (a real, large table: its function symbols are the subject);
tests/system/test_symbolindex.py runs the command twice against a real process.
"""

from __future__ import annotations

import os
import shutil

import pytest

from liveunwind.modules import symbolindex
from liveunwind.modules.symbols import SymbolTable
from liveunwind.targets.files import open_elf


def _libc() -> str:
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip()
            if os.path.basename(path).startswith("libc.so"):
                return path
    raise AssertionError("this process maps no libc")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """Indexes enabled, kept under the test's folder; nothing pending from another test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(symbolindex, "_enabled", True)
    monkeypatch.setattr(symbolindex, "_pending", [])
    return tmp_path / "cache" / "liveunwind"


@pytest.fixture
def library(tmp_path) -> str:
    """A copy of libc of the test's own: its times and contents may be changed."""
    return shutil.copy(_libc(), tmp_path / "libc.so")


def _written(path: str) -> SymbolTable:
    """The table of ``path`` built from its sections, its index written as the command would."""
    table = SymbolTable(open_elf(path))
    assert table._stored is None
    symbolindex.write_pending()
    return table


def _answers(table: SymbolTable, addresses: list[int]) -> list[tuple[str, int, int] | None]:
    found = []
    for address in addresses:
        match = table.lookup(address)
        found.append(None if match is None else (match.name, match.offset, match.size))
    return found


def test_a_table_read_back_answers_every_address_as_the_table_built(cache, library) -> None:
    built = _written(library)
    (index,) = cache.glob("symbols-*.bin")
    stored = SymbolTable(open_elf(library))
    assert stored._stored is not None  # read from the index, not built
    assert len(stored) == len(built) >= symbolindex.MIN_SYMBOLS
    starts = list(built._addresses)
    # Every function's first byte, its next, its last, one past its end, and before the first.
    probes = [starts[0] - 1]
    for start in starts:
        size = built.lookup(start).size  # type: ignore[union-attr]
        probes += [start, start + 1, start + max(size, 1) - 1, start + size]
    assert _answers(stored, probes) == _answers(built, probes)
    assert index.stat().st_size < os.path.getsize(library)


def test_a_changed_file_is_not_answered_from_its_old_index(cache, library) -> None:
    _written(library)
    status = os.stat(library)
    os.utime(library, ns=(status.st_atime_ns, status.st_mtime_ns + 1))
    table = SymbolTable(open_elf(library))
    assert table._stored is None  # built again: the key names the file's mtime
    symbolindex.write_pending()
    assert SymbolTable(open_elf(library))._stored is not None  # and written anew


@pytest.mark.parametrize(
    "damage",
    ["cut short", "another format", "names end elsewhere", "a folder others may write to"],
)
def test_a_damaged_or_foreign_index_is_not_used(cache, library, damage) -> None:
    built = _written(library)
    (index,) = cache.glob("symbols-*.bin")
    data = bytearray(index.read_bytes())
    if damage == "cut short":
        index.write_bytes(data[:-1])
    elif damage == "another format":
        data[len(symbolindex.FORMAT) - 2] ^= 1
        index.write_bytes(data)
    elif damage == "names end elsewhere":
        data[-1:] = b""  # the names one byte shorter than the last name's end says
        key_size, names_size, count = symbolindex._HEADER.unpack_from(data, len(symbolindex.FORMAT))
        symbolindex._HEADER.pack_into(
            data, len(symbolindex.FORMAT), key_size, names_size - 1, count
        )
        index.write_bytes(data)
    else:
        cache.chmod(0o777)
    table = SymbolTable(open_elf(library))
    assert table._stored is None
    address = built._addresses[len(built) // 2]
    assert _answers(table, [address]) == _answers(built, [address])


def test_an_index_of_another_owner_is_not_used(cache, library) -> None:
    _written(library)
    (index,) = cache.glob("symbols-*.bin")
    os.chown(index, 1, 1)  # the tests run as root (tests/README.md)
    assert SymbolTable(open_elf(library))._stored is None


def test_nothing_is_read_or_written_unless_the_command_enables_it(
    cache, library, monkeypatch
) -> None:
    monkeypatch.setattr(symbolindex, "_enabled", False)
    SymbolTable(open_elf(library))
    symbolindex.write_pending()
    assert not cache.exists()


@pytest.mark.parametrize("column", ["size", "location"])
def test_an_answer_a_walk_decides_by_is_confirmed_against_the_file(cache, library, column) -> None:
    """An index saying what the file does not (a function's size, or where its symbol is):
    a checked lookup (the stepper's, modules/module.py) finds it out and builds the table."""
    built = _written(library)
    (index,) = cache.glob("symbols-*.bin")
    data = bytearray(index.read_bytes())
    key_size, _names_size, count = symbolindex._HEADER.unpack_from(data, len(symbolindex.FORMAT))
    rows = len(symbolindex.FORMAT) + symbolindex._HEADER.size + key_size
    chosen = len(built) // 2
    column_start = rows + (8 * count if column == "size" else 16 * count)
    at = column_start + 8 * chosen
    data[at : at + 8] = (int.from_bytes(data[at : at + 8], "little") + 24).to_bytes(8, "little")
    index.write_bytes(data)
    address = built._addresses[chosen]
    table = SymbolTable(open_elf(library))
    assert table._stored is not None
    if column == "size":  # unchecked, a name's size is taken from the index as it is
        assert _answers(table, [address]) != _answers(built, [address])
    table = SymbolTable(open_elf(library))
    match = table.lookup(address, checked=True)
    assert table._stored is None  # built from the sections
    assert match is not None
    assert (match.name, match.offset, match.size) == _answers(built, [address])[0]


def test_a_confirmed_answer_is_the_files(cache, library) -> None:
    built = _written(library)
    table = SymbolTable(open_elf(library))
    for address in built._addresses[:: len(built) // 50]:
        assert _answers(table, [address]) == _answers(built, [address])
        assert table.lookup(address, checked=True) is not None
    assert table._stored is not None  # every answer confirmed: the index stays
