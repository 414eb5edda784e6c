"""zstd: ``ELFCOMPRESS_ZSTD`` debug sections and zstd streams (systemd-coredump's cores).

The decoder is the standard library's ``compression.zstd`` (Python 3.14,
PEP 784) where Python has it, otherwise ``backports.zstd``, its backport to
older Pythons by the same authors with the same API.  That one module serves
both needs (one-shot, bounded decompression and a file-like stream reader),
ships wheels bundling libzstd, and disappears as a dependency once the
project requires Python 3.14.  (``zstandard`` predates PEP 784 and has an
API of its own; ``pyzstd`` is what the standard library module grew from.)

Pure: bytes in, bytes out; the stream reader reads a file object its caller
opened.  Every decompression is bounded: a section must inflate to exactly
the size its header declares, below a limit the caller sets.
"""

from __future__ import annotations

from liveunwind.errors import FormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import BinaryIO

#: The four bytes every zstd frame starts with.
MAGIC = b"\x28\xb5\x2f\xfd"


def library() -> ModuleType:
    """``compression.zstd`` or ``backports.zstd``; FormatError if Python has neither."""
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        try:
            from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            raise FormatError(
                "zstd-compressed data needs Python 3.14 or the backports.zstd package"
            ) from None
    return zstd


def decompress(stream: bytes | memoryview, size: int, limit: int, where: str) -> bytes:
    """Exactly ``size`` bytes from the zstd frames in ``stream``; FormatError otherwise.

    ``size`` is what the compressed section's header declares; more than
    ``limit`` is refused before any work, and the decompressor never
    produces more than ``size`` bytes, whatever the frames claim.
    """
    if size > limit:
        raise FormatError(f"{where}: claims {size} bytes decompressed, above the limit")
    zstd = library()
    decompressor = zstd.ZstdDecompressor()
    try:
        raw = decompressor.decompress(bytes(stream), max_length=size)
    except zstd.ZstdError as error:
        raise FormatError(f"{where}: {error}") from None
    if len(raw) != size or not decompressor.eof:
        raise FormatError(f"{where}: decompressed size differs from the {size} bytes declared")
    return raw


class StreamDecompressor:
    """One zstd stream given in pieces (perf's compressed records), each piece's bytes out.

    A frame may go on from one piece to the next; a new one starts after it
    ends.  Each piece may give at most ``limit`` bytes (FormatError beyond).
    """

    def __init__(self, where: str) -> None:
        self._zstd = library()
        self._where = where
        self._decompressor = self._zstd.ZstdDecompressor()

    def feed(self, piece: bytes | memoryview, limit: int) -> bytes:
        zstd, out = self._zstd, []
        data, produced = bytes(piece), 0
        while True:
            try:
                part = self._decompressor.decompress(data, max_length=limit - produced + 1)
            except zstd.ZstdError as error:
                raise FormatError(f"{self._where}: {error}") from None
            data = b""  # taken in: what it holds comes out of the later calls
            produced += len(part)
            out.append(part)
            if produced > limit:
                raise FormatError(f"{self._where}: a piece inflates beyond {limit} bytes")
            if self._decompressor.eof:  # the frame ended; the next may start in this piece
                data = self._decompressor.unused_data
                self._decompressor = zstd.ZstdDecompressor()
                if not data:
                    break
            elif self._decompressor.needs_input:
                break
        return b"".join(out)


def reader(raw: BinaryIO) -> BinaryIO:
    """A file-like reader of the decompressed bytes of the zstd stream ``raw`` (read forward).

    What a compressed core needs: ``read(n)`` front to back, like
    ``gzip.open``/``lzma.open``.  A cut or corrupt stream raises one of
    :func:`stream_errors` from ``read``.
    """
    zstd = library()
    stream: BinaryIO = zstd.ZstdFile(raw, "rb")
    return stream


def stream_errors() -> tuple[type[Exception], ...]:
    """What reading a cut or corrupt zstd stream raises."""
    return (EOFError, OSError, library().ZstdError)
