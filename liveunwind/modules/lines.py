"""Source lines and inlined calls of a module's pcs: what ``--lines`` adds to each frame.

``locate(module, pc, exact)`` answers, for one physical frame, the logical
frames at its pc, innermost first: for each the function, source file and
line.  The last is the function the frame physically runs in; the ones
before it are calls inlined into it.  A physical frame's own ``file`` and
``line`` are those of the last entry, and ``inlined`` the entries before it.
Caller frames look up ``pc - 1`` (their pc is a return address, and the call
may be the last instruction of an inlined body), as gdb does; frame 0 and a
frame interrupted by a signal (``exact``) look up the pc itself.

The DWARF comes from the module's own image when it kept its debug
sections, else from its separate debug file (build-id, debuglink), else —
when ``DEBUGINFOD_URLS`` is set — from a debuginfod server by build-id.
Everything is read the first time a pc lands in the module and kept on a
:class:`ModuleLines` that lives as long as the module does; nothing here is
imported by a backtrace without ``--lines``.
"""

from __future__ import annotations

import os
import struct

from liveunwind.errors import FormatError
from liveunwind.formats.dwarf_info import (
    DebugInfo,
    DW_TAG_inlined_subroutine,
    Sections,
)
from liveunwind.formats.dwarf_line import LineTable, parse_header
from liveunwind.frames import SourceLocation
from liveunwind.modules.debuginfo import (
    ELFCOMPRESS_ZLIB,
    MAX_DECOMPRESSED_SECTION,
    SHF_COMPRESSED,
    section_data,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Protocol

    from liveunwind.formats.dwarf_forms import Buffer
    from liveunwind.formats.dwarf_info import Unit
    from liveunwind.formats.elf import ElfImage
    from liveunwind.modules.debuginfo import DebugFile

    class LocatingModule(Protocol):
        """What :func:`locate` asks of a module (``modules.module.Module`` has it all)."""

        path: str
        problems: list[str]

        @property
        def load_bias(self) -> int: ...
        @property
        def lines(self) -> ModuleLines | None: ...

    class LineModule(LocatingModule, Protocol):
        """What finding a module's DWARF needs (``modules.modulemap.ElfModule`` has it all)."""

        @property
        def image(self) -> ElfImage | None: ...
        @property
        def debug_file(self) -> DebugFile | None: ...
        @property
        def build_id(self) -> bytes | None: ...


#: The DWARF sections a lookup reads, by their field in :class:`Sections`.
DWARF_SECTIONS = {
    "info": ".debug_info",
    "abbrev": ".debug_abbrev",
    "aranges": ".debug_aranges",
    "line": ".debug_line",
    "str": ".debug_str",
    "line_str": ".debug_line_str",
    "str_offsets": ".debug_str_offsets",
    "addr": ".debug_addr",
    "ranges": ".debug_ranges",
    "rnglists": ".debug_rnglists",
}
#: Answers kept per module; a long session's cache is emptied when it fills.
_MAX_CACHED_ANSWERS = 1 << 14
_CHDR64 = struct.Struct("IIQQ")


class ModuleLines:
    """The line tables and function scopes of one ELF image with DWARF, read lazily."""

    def __init__(self, image: ElfImage, sections: Sections | None = None) -> None:
        """``sections`` are the image's DWARF sections if the caller has read them already."""
        self.image = image
        self._info: DebugInfo | None = None if sections is None else DebugInfo(sections)
        self._broken: FormatError | None = None
        #: Compressed sections inflated only as far as lookups reach, by field.
        self._growing: dict[str, GrowingSection] = {}
        self._tables: dict[int, LineTable | None] = {}
        self._answers: dict[int, list[SourceLocation]] = {}

    @property
    def info(self) -> DebugInfo:
        """The image's DWARF units; sections that cannot be read fail every lookup, read once."""
        if self._info is None:
            if self._broken is not None:
                raise self._broken
            try:
                sections, self._growing = read_sections(self.image)
                info = self._growing.get("info")
                self._info = DebugInfo(sections, None if info is None else info.ensure)
            except FormatError as error:
                self._broken = error
                raise
        return self._info

    def locate(self, address: int) -> list[SourceLocation]:
        """The logical frames at link-time ``address``, innermost first ([] if unknown)."""
        answer = self._answers.get(address)
        if answer is None:
            answer = self._locate(address)
            if len(self._answers) >= _MAX_CACHED_ANSWERS:
                self._answers.clear()
            self._answers[address] = answer
        return answer

    def _locate(self, address: int) -> list[SourceLocation]:
        info = self.info
        unit = info.unit_for_pc(address)
        if unit is None:
            return []
        table = self.line_table(unit)
        found = table.lookup(address) if table is not None else None
        file, line = found if found is not None else (None, None)
        frames = []
        for die in reversed(info.scopes(unit, address)):
            name, linkage = info.function_names(die)
            frames.append(SourceLocation(_display_name(name, linkage), file, line))
            if die.tag == DW_TAG_inlined_subroutine:
                call_file, line = info.call_site(die)
                file = None
                if call_file is not None and table is not None:
                    file = table.file_name(call_file)
        if not frames and found is not None:
            frames.append(SourceLocation(None, file, line))
        return frames

    def line_table(self, unit: Unit) -> LineTable | None:
        """The line table of ``unit`` (its ``DW_AT_stmt_list``), decoded once."""
        if unit.offset in self._tables:
            return self._tables[unit.offset]
        table = None
        sections = self.info.sections
        if unit.stmt_list is not None and sections.line is not None:
            growing = self._growing.get("line")
            if growing is not None:
                growing.ensure_unit(unit.stmt_list, sections.byte_order)
            header = parse_header(
                sections.line,
                unit.stmt_list,
                byte_order=sections.byte_order,
                address_size=unit.format.address_size,
                comp_dir=unit.comp_dir,
                debug_str=sections.str,
                debug_line_str=sections.line_str,
            )
            table = LineTable(sections.line, header)
        self._tables[unit.offset] = table
        return table


def _display_name(name: str | None, linkage: str | None) -> str | None:
    """A function's name as liveunwind prints symbols: demangled linkage name, else DW_AT_name."""
    if linkage:
        from liveunwind.modules.symbols import demangle

        return demangle(linkage)
    return name


# -- which image has the DWARF ---------------------------------------------------


def read_lines(module: LineModule) -> ModuleLines | None:
    """The line information of ``module``, or None where no DWARF can be found for it.

    Called once per module (``ElfModule.lines`` keeps the answer, so the
    module owns this cache and it goes with the module).
    """
    image = dwarf_image(module)
    return None if image is None else ModuleLines(image)


def dwarf_image(module: LineModule) -> ElfImage | None:
    """The image holding the module's ``.debug_info``: its own, its debug file's, debuginfod's."""
    image = module.image
    if image is None:
        return None
    if has_dwarf(image):
        return image
    debug_file = module.debug_file
    if debug_file is not None and has_dwarf(debug_file.image):
        return debug_file.image
    build_id = module.build_id
    if build_id and os.environ.get("DEBUGINFOD_URLS"):
        from liveunwind.modules.debuginfod import debuginfo_image

        fetched = debuginfo_image(build_id, module.problems)
        if fetched is not None and has_dwarf(fetched):
            return fetched
    return None


def has_dwarf(image: ElfImage) -> bool:
    """Whether ``image`` carries ``.debug_info`` with contents (not stripped to NOBITS)."""
    try:
        for name in (".debug_info", ".zdebug_info"):
            section = image.sections.get(name)
            if section is not None and image.contents(section):
                return True
    except FormatError:
        return False
    return False


def read_sections(image: ElfImage) -> tuple[Sections, dict[str, GrowingSection]]:
    """The image's DWARF sections, decompressed, and those decompressed only on demand.

    Inflating is the bulk of a first lookup in a big library: Debian's libc
    debug file holds 9 MiB of zlib-compressed DWARF, 36 ms to inflate whole
    with zlib (27 of them ``.debug_info``; ISA-L's inflater, if installed, takes 12).
    ``.debug_info`` and ``.debug_line`` are read by offset, unit by unit, so
    they are inflated only as far as the units a backtrace needs (72% and
    76% of them for testprogs/lines).
    """
    fields: dict[str, Buffer | None] = {}
    growing: dict[str, GrowingSection] = {}
    for field, name in DWARF_SECTIONS.items():
        section = GrowingSection.of(image, name)
        if section is None:
            fields[field] = section_data(image, name)
            continue
        if field in ("info", "line"):
            growing[field] = section
        else:
            section.ensure(-1)
        fields[field] = section.data
    return Sections(image.byte_order, **fields), growing


def inflater() -> ModuleType:
    """ISA-L's zlib-compatible inflater when ``isal`` is installed, else zlib.

    On Debian's libc debug file ISA-L inflates ``.debug_info`` in 12 ms,
    zlib in 27: the difference is a third of what ``--lines`` adds to a
    backtrace of a program with frames in libc.
    """
    try:
        from isal import isal_zlib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        import zlib

        return zlib
    return isal_zlib


class GrowingSection:
    """A zlib-compressed (ELFCOMPRESS_ZLIB) section inflated front to back as far as asked."""

    def __init__(self, stream: Buffer, size: int, where: str) -> None:
        library = inflater()
        self.data = bytearray()
        self.size = size
        self.where = where
        self._input: Buffer = stream
        self._decompressor = library.decompressobj()
        self._error: type[Exception] = library.error

    @staticmethod
    def of(image: ElfImage, name: str) -> GrowingSection | None:
        """The section as a GrowingSection if it is zlib-compressed; None otherwise."""
        section = image.sections.get(name)
        if section is None or not section.flags & SHF_COMPRESSED:
            return None
        data = image.contents(section)
        if data is None or len(data) < _CHDR64.size:
            return None
        kind, _reserved, size, _align = struct.unpack_from(image.byte_order + _CHDR64.format, data)
        where = f"{image.origin}: {name}"
        if kind != ELFCOMPRESS_ZLIB:
            return None
        if size > MAX_DECOMPRESSED_SECTION:
            raise FormatError(f"{where}: claims {size} bytes decompressed, above the limit")
        return GrowingSection(data[_CHDR64.size :], size, where)

    def ensure(self, end: int) -> None:
        """Inflates at least up to ``end`` (all of it for -1), in steps of at least 1 MiB."""
        end = self.size if end < 0 else min(end, self.size)
        data = self.data
        while len(data) < end:
            try:
                chunk = self._decompressor.decompress(self._input, max(end - len(data), 1 << 20))
            except self._error as error:
                raise FormatError(f"{self.where}: {error}") from None
            self._input = self._decompressor.unconsumed_tail
            if not chunk or len(data) + len(chunk) > self.size:
                raise FormatError(
                    f"{self.where}: does not inflate to the {self.size} bytes declared"
                )
            data += chunk

    def ensure_unit(self, offset: int, byte_order: str) -> None:
        """Inflates the whole unit (length-prefixed, as line programs are) at ``offset``."""
        self.ensure(offset + 12)
        if offset + 4 > len(self.data):
            return  # the decoder reports the offset as outside the section
        (length,) = struct.unpack_from(byte_order + "I", self.data, offset)
        if length == 0xFFFFFFFF and offset + 12 <= len(self.data):
            (length,) = struct.unpack_from(byte_order + "Q", self.data, offset + 4)
            self.ensure(offset + 12 + length)
        else:
            self.ensure(offset + 4 + length)


# -- frames ------------------------------------------------------------------------


def locate(module: LocatingModule, pc: int, exact: bool) -> list[SourceLocation]:
    """The logical frames of a physical frame at runtime ``pc`` in ``module``, innermost first.

    ``exact`` is the frame's ``exact_pc``: frame 0 or a frame interrupted by a
    signal, looked up at ``pc``; any other frame at ``pc - 1``.  A module
    without DWARF, or DWARF that turns out corrupt (noted in the module's
    problems, once), gives [].
    """
    lines = module.lines
    if lines is None:
        return []
    address = pc - module.load_bias - (0 if exact else 1)
    try:
        return lines.locate(address)
    except FormatError as error:
        message = f"{module.path}: {error}"
        if message not in module.problems:
            module.problems.append(message)
        return []
