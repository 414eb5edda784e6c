"""A module's function symbols, ranked and sorted, kept on disk for the command's next run.

Why: the first backtrace of a process names its frames from the symbol
tables of the files it maps, and building a table means reading its
``.symtab`` and strings (libpython3.11's: 750 kB) into fresh memory and
ranking every function symbol: about 2.3 ms each for libpython and for
libc with its debug file, a fifth of a cold ``liveunwind pid`` of CPython's
work (docs/speed.md, "Fifth round: symbol indexes").  A debugger is run
again and again on the same installed files, so the command keeps what a
table holds — each function's address, size, name and where the file holds
its symbol, in address order — in one small file per module, and the next
run reads that instead (libpython's: 211 kB, one read, no ranking).

Only the command does this (:func:`enable`, from ``cli.run``), next to its
code bundle (``codebundle.cache_folder``), under the same rule: a file is
used only if it and its folder belong to the user running the command and
nobody else may write to them, so what it says is as trusted as the code
bundle the command runs.  A name is shown as the index has it; an answer a
walk decides by is confirmed against the file's own symbol first
(``SymbolTable.lookup``'s ``checked``).  Each index names what it was built from — every
image's device, inode, size, mtime (ns) and build-id, the host's byte order,
and this file's and ``symbols.py``'s source (size, mtime): the ranking rule
— and is used only when all of that still holds; a file of another format,
cut short, or whose parts do not fit together is not used, and the table is
built from the sections as without an index (and the index written anew).
Written to a temporary name and renamed over the old one, so a reader sees a
whole file.  Bounded: at most :data:`MAX_WRITES` indexes written a run, of
tables of at least :data:`MIN_SYMBOLS` functions (a small table costs
little to build), and none once the folder holds
:data:`MAX_INDEXES` of them.
"""

from __future__ import annotations

import marshal
import os
import struct
import sys

from liveunwind.codebundle import ABANDONED_AFTER, cache_folder, open_ours, owned_by_us

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any

    from liveunwind.formats.elf import ElfImage

    #: What an index must hold to be used (marshalled): see _place.
    Key = tuple[Any, ...]

    #: A table's functions as (address, size, location, name), in address order; a
    #: location is where the file holds the function's own symbol (modules/symbols.py).
    Functions = Callable[[], Iterator[tuple[int, int, int, str]]]

#: The first bytes of an index: this format.
FORMAT = b"liveunwind symbol index 1\n"
#: After FORMAT: the lengths of the key (marshalled), of the names, and the count of functions.
_HEADER = struct.Struct("<III")
#: Bytes of a function's row: address, size and location (64 bits each), and its name's end.
_ROW = 28
#: Bounds on what an index may claim.
MAX_FUNCTIONS = 1 << 22
MAX_NAMES_BYTES = 256 << 20
MAX_KEY_BYTES = 1 << 12
#: Tables smaller than this are not kept (a program's own few hundred functions cost little).
MIN_SYMBOLS = 1000
#: Indexes written by one run, and kept in the folder, at most.
MAX_WRITES = 16
MAX_INDEXES = 1024
#: The name of an index file: ``symbols-<device>-<inode>.bin`` of the module's own file.
_PREFIX = "symbols-"

#: Whether the command asked for indexes (a library caller's process writes none).
_enabled = False
#: Tables built this run that had no usable index: the index's path, its key, the functions.
_pending: list[tuple[str, Key, Functions]] = []


class StoredIndex:
    """A table's functions as an index holds them: columns in address order.

    ``addresses``, ``sizes`` and ``locations`` are views of 64-bit words,
    ``name_ends`` of 32-bit offsets into ``names``, where each function's
    name ends (the previous one's end is where it starts).
    """

    __slots__ = ("addresses", "locations", "name_ends", "names", "sizes")

    def __init__(
        self, words: memoryview, count: int, name_ends: Sequence[int], names: bytes
    ) -> None:
        self.addresses: Sequence[int] = words[:count]
        self.sizes: Sequence[int] = words[count : 2 * count]
        self.locations: Sequence[int] = words[2 * count :]
        self.name_ends = name_ends
        self.names = names

    def name(self, index: int) -> str:
        start = self.name_ends[index - 1] if index else 0
        return self.names[start : self.name_ends[index]].decode("utf-8", "replace")


def enable() -> None:
    """Read and write indexes in this process (the command's)."""
    global _enabled
    _enabled = True


def load(images: Sequence[ElfImage]) -> StoredIndex | None:
    """The usable index of a table built from ``images``, or None (build it, and it is offered)."""
    if not _enabled:
        return None
    place = _place(images)
    if place is None:
        return None
    return _read(*place)


def offer(images: Sequence[ElfImage], functions: Functions) -> None:
    """Keep the table built from ``images`` when the command ends, if worth it.

    ``functions`` gives its (address, size, location, name) rows in address
    order; it is called only as the index is written, after the command's output.
    """
    if not _enabled or len(_pending) >= MAX_WRITES:
        return
    place = _place(images)
    if place is not None:
        _pending.append((*place, functions))


def write_pending() -> None:
    """Write the indexes of this run's tables that had none (called as the command ends).

    Any failure writes nothing more and says nothing: the next run builds
    its tables as without an index.
    """
    if not _pending:
        return
    import contextlib  # only as indexes are written

    with contextlib.suppress(OSError, ValueError):
        folder = os.path.dirname(_pending[0][0])
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not owned_by_us(os.stat(folder)) or _count_indexes(folder) >= MAX_INDEXES:
            return
        for path, key, functions in _pending:
            _write(path, key, functions)
    _pending.clear()


def _place(images: Sequence[ElfImage]) -> tuple[str, Key] | None:
    """Where the index of these images' table lives, and the key it must hold; None: none."""
    folder = cache_folder()
    if folder is None:
        return None
    parts: list[Any] = [sys.byteorder, _SOURCES]
    for image in images:
        identity = None if image.source is None else image.source.identity()
        if identity is None:
            return None  # read from memory (the vDSO, a core's copy): nothing to key it by
        parts.append((*identity, image.build_id or b""))
    device, inode = parts[2][:2]
    return os.path.join(folder, f"{_PREFIX}{device:x}-{inode:x}.bin"), tuple(parts)


def _source_identity() -> tuple[tuple[int, int], ...]:
    """(size, mtime ns) of this file's and symbols.py's sources: what decides an index's content."""
    folder = os.path.dirname(os.path.abspath(__file__))
    found = []
    for name in ("symbolindex.py", "symbols.py"):
        try:
            status = os.stat(os.path.join(folder, name))
        except OSError:
            return ()
        found.append((status.st_size, status.st_mtime_ns))
    return tuple(found)


_SOURCES = _source_identity()


def _read(path: str, key: Key) -> StoredIndex | None:
    opened = open_ours(path)
    if opened is None:
        return None
    descriptor, status = opened
    try:
        head = os.pread(descriptor, len(FORMAT) + _HEADER.size, 0)
        if len(head) != len(FORMAT) + _HEADER.size or not head.startswith(FORMAT):
            return None
        key_size, names_size, count = _HEADER.unpack_from(head, len(FORMAT))
        if key_size > MAX_KEY_BYTES or names_size > MAX_NAMES_BYTES or count > MAX_FUNCTIONS:
            return None
        size = key_size + count * _ROW + names_size
        if status.st_size != len(head) + size:  # before reading what the header claims
            return None
        data = os.pread(descriptor, size, len(head))
        if len(data) != size:
            return None
        if marshal.loads(data[:key_size]) != key:
            return None
        return _columns(memoryview(data)[key_size:], count, names_size)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    finally:
        os.close(descriptor)


def _columns(view: memoryview, count: int, names_size: int) -> StoredIndex | None:
    """The index's columns, if they fit together (the last name ends where the names do).

    Name ends are not checked to rise, nor addresses to be sorted (a pass
    over every function, a tenth of what the index saves): the file is the
    command's own, written whole, and a damaged one could only name a frame
    wrong, never walk one (names and sizes are all it holds).
    """
    words = view[: count * 24].cast("Q")
    name_ends = view[count * 24 : count * _ROW].cast("I")
    names = bytes(view[count * _ROW :])
    if count and name_ends[-1] != names_size:
        return None
    return StoredIndex(words, count, name_ends, names)


def _write(path: str, key: Key, functions: Functions) -> None:
    addresses: list[int] = []
    sizes: list[int] = []
    locations: list[int] = []
    name_ends: list[int] = []
    names = bytearray()
    for address, size, location, name in functions():
        addresses.append(address)
        sizes.append(size)
        locations.append(location)
        names += name.encode("utf-8", "surrogateescape")
        name_ends.append(len(names))
    encoded_key = marshal.dumps(key)
    count = len(addresses)
    body = b"".join(
        [
            FORMAT,
            _HEADER.pack(len(encoded_key), len(names), count),
            encoded_key,
            struct.pack(f"={count}Q", *addresses),
            struct.pack(f"={count}Q", *sizes),
            struct.pack(f"={count}Q", *locations),
            struct.pack(f"={count}I", *name_ends),
            names,
        ]
    )
    temporary = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(body)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _count_indexes(folder: str) -> int:
    """How many indexes the folder holds (counting stops at MAX_INDEXES; a huge folder is full).

    A temporary file left by a writer that was killed (an hour old) is removed on the way.
    """
    import contextlib
    import time  # both only as indexes are written

    abandoned = time.time() - ABANDONED_AFTER
    count = 0
    with os.scandir(folder) as entries:
        for looked, entry in enumerate(entries):
            if not entry.name.startswith(_PREFIX):
                continue
            if not entry.name.endswith(".tmp"):
                count += 1
            elif entry.stat(follow_symlinks=False).st_mtime < abandoned:
                with contextlib.suppress(FileNotFoundError):  # another run removed it first
                    os.unlink(entry.path)
            if count >= MAX_INDEXES or looked >= 4 * MAX_INDEXES:
                return MAX_INDEXES
    return count
