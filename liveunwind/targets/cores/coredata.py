"""Random access to the bytes of a core file: plain, gzip, xz, zstd, bzip2 or lz4.

A core is read at scattered offsets (headers, notes, then whatever pages the
walk touches), so every kind of core is served through ``read_at``.  A plain
file is read with ``pread``.  A compressed core (systemd-coredump writes
zstd, and lz4 before it) is never unpacked to disk: gzip, xz, zstd, bzip2 and
lz4 streams can only be
decompressed front to back, so it is read
forward once and the decompressed bytes are kept in 1 MiB blocks in a cache
bounded by :data:`CACHE_BUDGET`.  A core that decompresses to less than the
budget is decompressed at most once and costs its decompressed size in
memory; a larger one keeps the most recently used blocks, and a read behind
the stream's position that misses the cache restarts the stream (slow, but
memory stays bounded).  Walks read the notes first and then mostly stack
pages and a few module headers, so in practice a large core is read through
once or twice.

The core is opened once, as a regular file only
(:func:`~liveunwind.targets.files.open_file`: never a FIFO or a device);
plain reads never go past the size it had then, so an offset a corrupt
header makes up (2^63 and beyond) reads as nothing, and a compressed core's
stream is restarted on that same descriptor, never by path again.

An lz4 core (systemd-coredump's default before zstd: the lz4 frame format)
is read through the ``lz4`` package (python-lz4, bindings to the reference
liblz4), imported only for such a core.  The standard library has no lz4
decoder, and a hand-written one in Python was measured 24 times slower: a
frame decoder of the block format decompressed a 17 MB kernel core at
21 MB/s, ``lz4.frame`` at 506 MB/s (this machine, one core) — and the
package's ``LZ4FrameFile`` is the same bounded, block-at-a-time reader the
other streams use.
"""

from __future__ import annotations

from collections import OrderedDict

from liveunwind.errors import CoreFileError
from liveunwind.formats import zstd
from liveunwind.targets.files import FileError, RegularFile, open_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from io import BufferedIOBase
    from types import ModuleType
    from typing import BinaryIO, Protocol

#: Bytes per cached block of a compressed core.
BLOCK_SIZE = 1 << 20
#: Most decompressed bytes kept in memory for one compressed core.
CACHE_BUDGET = 512 << 20

_GZIP_MAGIC = b"\x1f\x8b"
_XZ_MAGIC = b"\xfd7zXZ\x00"
#: "BZh" and the block size digit 1-9 (bzip2's header).
_BZIP2_MAGIC = b"BZh"
#: An lz4 frame (``lz4`` and systemd-coredump's older ``.lz4`` cores).
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
#: The compressions a core may come in, as the messages name them.
ACCEPTED = "plain, .gz, .xz, .zst, .bz2 or .lz4"


if TYPE_CHECKING:

    class CoreData(Protocol):
        """The bytes of a core, by file offset (a protocol for type checkers only)."""

        #: What the core is called in messages (its path).
        name: str
        #: Its (decompressed) size when known without reading it all, else None.
        size: int | None
        #: "gzip", "xz", "zstd", "bzip2" or "lz4" for a compressed core, None for a plain one.
        compression: str | None

        def read_at(self, offset: int, size: int) -> bytes:
            """Up to ``size`` bytes at ``offset``; shorter only at the end of the data."""
            ...

        def close(self) -> None: ...


class PlainCoreData:
    """An uncompressed core file, read with ``pread``."""

    def __init__(self, name: str, file: RegularFile) -> None:
        self.name = name
        self._file = file
        self.size: int | None = file.size
        self.compression: str | None = None

    def read_at(self, offset: int, size: int) -> bytes:
        try:
            return self._file.pread(size, offset)
        except FileError as error:
            raise CoreFileError(f"cannot read core {self.name}: {error.reason}") from None

    def close(self) -> None:
        self._file.close()


class CompressedCoreData:
    """A compressed core, decompressed forward on demand into a bounded block cache."""

    def __init__(
        self,
        name: str,
        kind: str,
        *,
        budget: int = CACHE_BUDGET,
        file: RegularFile | None = None,
    ) -> None:
        """``file`` is the core opened already; without it ``name`` is opened."""
        self.name = name
        self.kind = kind
        self.compression: str | None = kind
        self.size: int | None = None
        if file is None:
            try:
                file = open_file(name)
            except FileError as error:
                raise CoreFileError(f"cannot open core {name}: {error.reason}") from None
        self._file = file
        #: The compressed bytes, rewound for every restart of the stream.
        self._raw: BinaryIO | None = None
        self._budget_blocks = max(1, budget // BLOCK_SIZE)
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._stream: BufferedIOBase | BinaryIO | None = None
        #: Index of the next block the open stream will produce.
        self._next_block = 0
        #: Number of blocks in the data, once the end has been seen.
        self._block_count: int | None = None
        #: What the decompressor raises for a cut or corrupt stream.
        self._stream_errors: tuple[type[Exception], ...] = (EOFError, OSError)

    def read_at(self, offset: int, size: int) -> bytes:
        if offset < 0 or size <= 0:
            return b""
        pieces = []
        position, end = offset, offset + size
        while position < end:
            block = self._block(position // BLOCK_SIZE)
            start = position % BLOCK_SIZE
            piece = block[start : start + end - position]
            if not piece:
                break
            pieces.append(piece)
            position += len(piece)
            if len(block) < BLOCK_SIZE:
                break  # the last block: the data ends here
        return b"".join(pieces)

    def _block(self, index: int) -> bytes:
        cached = self._blocks.get(index)
        if cached is not None:
            self._blocks.move_to_end(index)
            return cached
        if self._block_count is not None and index >= self._block_count:
            return b""
        if self._stream is None or index < self._next_block:
            self._restart()
        data = b""
        while self._next_block <= index:
            data = self._read_block()
            self._remember(self._next_block, data)
            self._next_block += 1
            if len(data) < BLOCK_SIZE:
                self._block_count = self._next_block
                self.size = (self._next_block - 1) * BLOCK_SIZE + len(data)
                return data if self._next_block - 1 == index else b""
        return data

    def _read_block(self) -> bytes:
        """The next block of the stream; a corrupt or cut stream ends the data there."""
        assert self._stream is not None
        chunks, wanted = [], BLOCK_SIZE
        try:
            while wanted:
                chunk = self._stream.read(wanted)
                if not chunk:
                    break
                chunks.append(chunk)
                wanted -= len(chunk)
        except self._stream_errors:
            pass  # a cut or corrupt stream: the data ends where it became unreadable
        return b"".join(chunks)

    def _remember(self, index: int, data: bytes) -> None:
        self._blocks[index] = data
        self._blocks.move_to_end(index)
        while len(self._blocks) > self._budget_blocks:
            self._blocks.popitem(last=False)

    def _restart(self) -> None:
        self._close_stream()
        if self._raw is None:
            self._raw = open(self._file.fd, "rb", closefd=False)  # noqa: SIM115 - kept open
        self._raw.seek(0)
        if self.kind == "gzip":
            import gzip
            import zlib

            self._stream = gzip.GzipFile(fileobj=self._raw, mode="rb")
            self._stream_errors = (EOFError, OSError, zlib.error)
        elif self.kind == "zstd":
            self._stream = zstd.reader(self._raw)
            self._stream_errors = zstd.stream_errors()
        elif self.kind == "bzip2":
            import bz2

            # BZ2File reads the compressed bytes in buffer-sized pieces and
            # returns at most what each read asks for: a block at a time.
            self._stream = bz2.BZ2File(self._raw, "rb")
            self._stream_errors = (EOFError, OSError)
        elif self.kind == "lz4":
            # LZ4FrameFile, like BZ2File, decompresses at most what a read asks
            # for; liblz4 reports a corrupt frame as RuntimeError.
            self._stream = _lz4_frame().LZ4FrameFile(self._raw, "rb")
            self._stream_errors = (EOFError, OSError, RuntimeError)
        else:
            import lzma

            self._stream = lzma.LZMAFile(self._raw, "rb")  # noqa: SIM115 - kept open
            self._stream_errors = (EOFError, OSError, lzma.LZMAError)
        self._next_block = 0

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()  # leaves the raw file open: it was handed over as an object
            self._stream = None

    def close(self) -> None:
        self._close_stream()
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self._file.close()


def _lz4_frame() -> ModuleType:
    """``lz4.frame``; CoreFileError saying what to install when the package is missing."""
    try:
        import lz4.frame  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise CoreFileError(
            "an lz4-compressed core needs the lz4 Python package (pip install lz4), "
            "or unpack it first with `lz4 -d`"
        ) from None
    return lz4.frame


def open_core_data(path: str) -> CoreData:
    """Opens a core as plain, gzip, xz, zstd, bzip2 or lz4 data, told apart by magic bytes."""
    try:
        file = open_file(path)
    except FileError as error:
        raise CoreFileError(f"cannot open core {path}: {error.reason}") from None
    try:
        magic = file.pread(6, 0)
    except FileError as error:
        file.close()
        raise CoreFileError(f"cannot read core {path}: {error.reason}") from None
    kind = compression_of(magic)
    if kind is not None:
        return CompressedCoreData(path, kind, file=file)
    return PlainCoreData(path, file)


def compression_of(magic: bytes) -> str | None:
    """The compression a file's first 6 bytes announce ("gzip", "zstd", ...), or None."""
    kinds = {_GZIP_MAGIC: "gzip", _XZ_MAGIC: "xz", zstd.MAGIC: "zstd", _LZ4_MAGIC: "lz4"}
    kind = next((kind for start, kind in kinds.items() if magic.startswith(start)), None)
    if kind is None and magic.startswith(_BZIP2_MAGIC) and magic[3:4] in b"123456789":
        kind = "bzip2"
    return kind
