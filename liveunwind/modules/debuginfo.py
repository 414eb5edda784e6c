"""Separate debug information: where a stripped image's symbols and ``.debug_frame`` went.

Distributions strip binaries and ship what was removed elsewhere; a module
looks, in the order debuggers do, for:

1. a build-id file, ``DEBUGDIR/.build-id/xx/rest.debug`` (Debian ``-dbgsym``,
   Fedora ``-debuginfo``, ``libc6-dbg``), whose own build-id must match;
2. the file named by ``.gnu_debuglink`` (name + CRC-32 of the whole debug
   file, the standard zlib CRC) in the image's directory, its ``.debug/``
   subdirectory and ``DEBUGDIR/<image's directory>/``; a file whose CRC
   differs belongs to another build and is refused;
3. MiniDebugInfo, ``.gnu_debugdata``: an xz-compressed ELF image inside the
   stripped file holding the ``.symtab`` of the functions ``.dynsym`` lacks
   (Fedora, and what systemd's stack traces rely on).

Debug files keep link-time addresses, so the module's load bias applies to
them unchanged.  Their debug sections may be compressed (``SHF_COMPRESSED``,
as Debian ships them, or the older ``.zdebug_*`` form): :func:`section_data`
returns them decompressed.

Everything read here is untrusted: only regular files are opened (a FIFO
planted at a debug path must not hang us), names from ``.gnu_debuglink`` must
be plain file names, and every decompression is bounded.
"""

from __future__ import annotations

import os
import struct

from liveunwind.errors import FormatError
from liveunwind.formats.elf import ElfImage
from liveunwind.targets.files import ABSENT, FileError, open_elf

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap
    from collections.abc import Sequence

DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)
#: Largest decompressed MiniDebugInfo image; Fedora's are a few hundred KiB.
MAX_MINI_DEBUGINFO = 64 << 20
#: Largest decompressed debug section (``.debug_frame`` of big libraries is tens of MiB).
MAX_DECOMPRESSED_SECTION = 512 << 20

SHF_COMPRESSED = 0x800
ELFCOMPRESS_ZLIB = 1
ELFCOMPRESS_ZSTD = 2
_CHDR64 = struct.Struct("IIQQ")  # ch_type, ch_reserved, ch_size, ch_addralign
_CRC_CHUNK = 1 << 20


class DebugFile:
    """A separate debug image and how it was found."""

    __slots__ = ("how", "image", "path")

    def __init__(self, image: ElfImage, path: str, how: str) -> None:
        self.image = image
        #: The file it came from (for MiniDebugInfo: the stripped file itself).
        self.path = path
        #: ``build-id``, ``debuglink``, ``gnu_debugdata`` or ``debuginfod``.
        self.how = how


def find_debug_file(
    image: ElfImage,
    path: str,
    build_id: bytes | None,
    debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
    problems: list[str] | None = None,
) -> DebugFile | None:
    """The best separate debug image of ``image`` (loaded from ``path``), or None.

    A full debug file (by build-id, then by debuglink) wins over
    MiniDebugInfo, which only has symbols.  Files that exist but are refused
    (wrong CRC or build-id, corrupt) are explained in ``problems``.
    """
    problems = [] if problems is None else problems
    try:
        if build_id:
            found = by_build_id(build_id, debug_dirs, problems)
            if found is not None:
                return found
        found = by_debuglink(image, path, build_id, debug_dirs, problems)
        if found is not None:
            return found
        return mini_debuginfo(image, path, problems)
    except FormatError as error:  # the sections of ``image`` itself are corrupt
        problems.append(str(error))
        return None


def build_id_paths(build_id: bytes, debug_dirs: Sequence[str]) -> list[str]:
    """``DEBUGDIR/.build-id/xx/rest.debug`` for each debug directory."""
    text = build_id.hex()
    if len(text) < 4:
        return []
    return [os.path.join(d, ".build-id", text[:2], text[2:] + ".debug") for d in debug_dirs]


def by_build_id(
    build_id: bytes, debug_dirs: Sequence[str], problems: list[str]
) -> DebugFile | None:
    """The debug file filed under ``build_id``; its own build-id must agree."""
    for candidate in build_id_paths(build_id, debug_dirs):
        debug = _open_image(candidate, problems)
        if debug is None:
            continue
        if debug.build_id is not None and debug.build_id != build_id:
            problems.append(
                f"{candidate}: build-id {debug.build_id.hex()} does not match {build_id.hex()}"
            )
            continue
        return DebugFile(debug, candidate, "build-id")
    return None


def debuglink(image: ElfImage) -> tuple[str, int] | None:
    """The file name and CRC-32 recorded in ``.gnu_debuglink``, if valid."""
    data = image.section_data(".gnu_debuglink")
    if data is None:
        return None
    raw = bytes(data)
    end = raw.find(b"\0")
    if end <= 0:
        return None
    crc_offset = (end + 4) & ~3  # the name's NUL, then padding to 4
    if crc_offset + 4 > len(raw):
        return None
    name = raw[:end].decode("utf-8", "replace")
    if "/" in name or name in (".", ".."):
        return None
    (crc,) = struct.unpack_from(image.byte_order + "I", raw, crc_offset)
    return name, crc


def debuglink_paths(path: str, name: str, debug_dirs: Sequence[str]) -> list[str]:
    """Where a debuglink name is looked for, in order (as gdb does)."""
    directory = os.path.dirname(os.path.abspath(path))
    candidates = [os.path.join(directory, name), os.path.join(directory, ".debug", name)]
    candidates += [d.rstrip("/") + os.path.join(directory, name) for d in debug_dirs]
    return candidates


def by_debuglink(
    image: ElfImage,
    path: str,
    build_id: bytes | None,
    debug_dirs: Sequence[str],
    problems: list[str],
) -> DebugFile | None:
    """The file ``.gnu_debuglink`` names, if its CRC (and build-id, if both have one) match."""
    link = debuglink(image)
    if link is None:
        return None
    name, crc = link
    own = _identity(path)
    for candidate in debuglink_paths(path, name, debug_dirs):
        if own is not None and _identity(candidate) == own:
            continue  # a link to the stripped file itself
        debug = _open_image(candidate, problems)
        if debug is None:
            continue
        try:
            actual = _crc32(debug.slice(0, len(debug.data)))
        except FormatError as error:  # the file changed while it was read
            problems.append(str(error))
            continue
        if actual != crc:
            problems.append(
                f"{candidate}: CRC {actual:#010x} differs from the debuglink's {crc:#010x}"
            )
            continue
        if build_id and debug.build_id is not None and debug.build_id != build_id:
            problems.append(f"{candidate}: build-id {debug.build_id.hex()} does not match")
            continue
        return DebugFile(debug, candidate, "debuglink")
    return None


def mini_debuginfo(image: ElfImage, path: str, problems: list[str]) -> DebugFile | None:
    """The ELF image inside ``.gnu_debugdata`` (xz), decompressed within a bound."""
    data = image.section_data(".gnu_debugdata")
    if not data:
        return None
    import lzma

    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        raw = decompressor.decompress(bytes(data), max_length=MAX_MINI_DEBUGINFO)
    except lzma.LZMAError as error:
        problems.append(f"{path}: .gnu_debugdata: {error}")
        return None
    if not decompressor.eof:
        too_big = len(raw) >= MAX_MINI_DEBUGINFO
        problems.append(
            f"{path}: .gnu_debugdata "
            + (f"exceeds {MAX_MINI_DEBUGINFO} bytes" if too_big else "is truncated")
        )
        return None
    try:
        return DebugFile(ElfImage(raw, origin=f"{path} .gnu_debugdata"), path, "gnu_debugdata")
    except FormatError as error:
        problems.append(str(error))
        return None


# -- what an image carries ------------------------------------------------------

#: Sections holding call-frame information: DWARF's two, and Go's own (see sources.py).
_CFI_SECTIONS = (".eh_frame", ".debug_frame", ".zdebug_frame", ".gopclntab")
_DWARF_INFO_SECTIONS = (".debug_info", ".zdebug_info")


def has_cfi(image: ElfImage) -> bool:
    """Whether ``image`` carries call-frame information with contents (not stripped to NOBITS)."""
    return _has_contents(image, _CFI_SECTIONS)


def has_dwarf(image: ElfImage) -> bool:
    """Whether ``image`` carries ``.debug_info`` with contents (not stripped to NOBITS)."""
    try:
        return _has_contents(image, _DWARF_INFO_SECTIONS)
    except FormatError:
        return False


def _has_contents(image: ElfImage, names: tuple[str, ...]) -> bool:
    sections = image.sections
    for name in names:
        section = sections.get(name)
        if section is not None and section.size and image.contents(section):
            return True
    return False


# -- sections ------------------------------------------------------------------


def section_data(image: ElfImage, name: str) -> bytes | memoryview | None:
    """The contents of section ``name``, decompressed if need be; None if absent or NOBITS.

    Handles ``SHF_COMPRESSED`` sections with zlib or zstd (``ELFCOMPRESS_ZSTD``,
    ``objcopy --compress-debug-sections=zstd``) and the older GNU form
    (``.zdebug_*``: ``ZLIB``, a big-endian 64-bit size, a zlib stream).
    """
    section = image.sections.get(name)
    if section is not None:
        data = image.contents(section)
        if data is None or not section.flags & SHF_COMPRESSED:
            return data
        return _decompress_elf(image, name, data)
    if name.startswith(".debug_"):
        gnu = image.section_data(".z" + name[1:])
        if gnu is not None:
            return _decompress_gnu(image, name, gnu)
    return None


def _decompress_elf(image: ElfImage, name: str, data: memoryview) -> bytes:
    where = f"{image.origin}: {name}"
    if len(data) < _CHDR64.size:
        raise FormatError(f"{where}: compressed section shorter than its header")
    kind, _reserved, size, _align = struct.unpack_from(image.byte_order + _CHDR64.format, data)
    if kind == ELFCOMPRESS_ZSTD:
        from liveunwind.formats.zstd import decompress

        return decompress(data[_CHDR64.size :], size, MAX_DECOMPRESSED_SECTION, where)
    if kind != ELFCOMPRESS_ZLIB:
        raise FormatError(f"{where}: unknown compression type {kind}")
    return _inflate(where, data[_CHDR64.size :], size)


def _decompress_gnu(image: ElfImage, name: str, data: memoryview) -> bytes:
    where = f"{image.origin}: .z{name[1:]}"
    if len(data) < 12 or bytes(data[:4]) != b"ZLIB":
        raise FormatError(f"{where}: no ZLIB header")
    (size,) = struct.unpack_from(">Q", data, 4)
    return _inflate(where, data[12:], size)


def _inflate(where: str, stream: memoryview, size: int) -> bytes:
    """Exactly ``size`` bytes from a zlib stream, refusing sizes above the bound."""
    if size > MAX_DECOMPRESSED_SECTION:
        raise FormatError(f"{where}: claims {size} bytes decompressed, above the limit")
    import zlib

    decompressor = zlib.decompressobj()
    try:
        raw = decompressor.decompress(stream, size)
    except zlib.error as error:
        raise FormatError(f"{where}: {error}") from None
    if len(raw) != size or not decompressor.eof:
        raise FormatError(f"{where}: decompressed size differs from the {size} bytes declared")
    return raw


# -- files -----------------------------------------------------------------------


def _open_image(path: str, problems: list[str]) -> ElfImage | None:
    """The ELF image in the regular file at ``path``; None if absent, refused or corrupt.

    A file that is not there is the usual end of a search and says nothing;
    anything else (a FIFO or device where a debug file should be, a corrupt
    file) is a problem.
    """
    try:
        image = open_elf(path)
        _ = image.build_id  # reads the headers: a corrupt file is refused here, once
    except FileError as error:
        if error.errno not in ABSENT:
            problems.append(str(error))
        return None
    except FormatError as error:
        problems.append(str(error))
        return None
    return image


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _crc32(data: bytes | memoryview | mmap.mmap) -> int:
    import zlib

    view = memoryview(data)
    crc = 0
    for start in range(0, len(view), _CRC_CHUNK):
        crc = zlib.crc32(view[start : start + _CRC_CHUNK], crc)
    return crc
