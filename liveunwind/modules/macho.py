"""Mach-O images: segments, sections, unwind tables, symbols and LC_UUID.

The file is read by :mod:`liveunwind.formats.macho` (no third-party parser:
issue 29).  A :class:`MachOImage` answers in link-time addresses;
:class:`MachOModule` places an image at its load address in a target and
is the :class:`~liveunwind.modules.module.Module` the stepper and the
symbolizer ask.
"""

from __future__ import annotations

import bisect
import os
from functools import cached_property
from typing import TYPE_CHECKING, Any

from liveunwind.arch import Arch, arch_by_macho_cpu_type
from liveunwind.errors import FormatError
from liveunwind.formats.macho import (
    HEADER,
    MAX_COMMAND_BYTES,
    MachOHeader,
    MachOSection,
    MachOSegment,
    fat_slices,
)
from liveunwind.modules.module import Module
from liveunwind.modules.sources import UnwindSource
from liveunwind.modules.symbols import SymbolMatch
from liveunwind.targets.files import FileContents, FileError, open_file

if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.formats.unwind.compact import CompactUnwindTable
    from liveunwind.formats.unwind.rules import UnwindRule

_N_STAB = 0xE0
_N_TYPE = 0x0E
_N_SECT = 0x0E
#: Largest Mach-O file opened.
MAX_FILE_SIZE = 1 << 30


class MachOImage:
    """One Mach-O file (the slice for ``arch`` of a universal file), in link-time addresses."""

    def __init__(self, path: str, *, arch: Arch | None = None) -> None:
        self.path = path
        try:
            file = open_file(path)
        except FileError as error:
            raise FormatError(str(error)) from None
        if file.size > MAX_FILE_SIZE:
            file.close()
            raise FormatError(
                f"{path}: {file.size} bytes, more than the {MAX_FILE_SIZE >> 20} MiB "
                "a Mach-O image may have"
            )
        try:  # read as needed into memory of our own: never an mmap of the file (SIGBUS)
            self._contents = FileContents(file)
        except FileError as error:
            raise FormatError(str(error)) from None
        #: Where the slice starts in the file.
        self._base = 0
        try:
            self._data, header, found = self._slice_for(memoryview(self._contents.data), arch)
        except FormatError as error:
            raise FormatError(f"{path}: {error}") from None
        if header is None or found is None:
            raise FormatError(f"{path}: no {arch.name if arch else 'x86_64 or arm64'} slice")
        self._header = header
        self.arch: Arch = found
        self.segments: list[MachOSegment] = header.segments
        self.section_list: list[MachOSection] = header.sections
        text = next((s for s in self.segments if s.name == "__TEXT"), None)
        if text is None:
            raise FormatError(f"{path}: no __TEXT segment")
        #: The link-time address of the Mach-O header: the base of __unwind_info offsets.
        self.text_base = text.vmaddr
        self.uuid = header.uuid

    def _fill(self, offset: int, size: int) -> None:
        """Makes ``size`` bytes at ``offset`` of the slice hold the file's (FormatError if not)."""
        try:
            self._contents.fill(self._base + offset, size)
        except FileError as error:
            raise FormatError(str(error)) from None

    def _slice_for(
        self, whole: memoryview, arch: Arch | None
    ) -> tuple[memoryview, MachOHeader | None, Arch | None]:
        """The bytes, header and Arch of the slice for ``arch`` (the first known one if None)."""
        self._fill(0, 8 + 64 * 32)  # a universal header's most
        slices = fat_slices(whole)
        if slices is None:
            header = self._header_at(whole)
            found = arch_by_macho_cpu_type(header.cpu_type)
            if found is not None and (arch is None or found is arch):
                return whole, header, found
            return whole, None, None
        for piece in slices:
            found = arch_by_macho_cpu_type(piece.cpu_type)
            if found is None or (arch is not None and found is not arch):
                continue
            if piece.offset + piece.size > len(whole):
                raise FormatError(f"the {found.name} slice runs past the end of the file")
            self._base = piece.offset
            view = whole[piece.offset : piece.offset + piece.size]
            header = self._header_at(view)
            if header.cpu_type != piece.cpu_type:
                raise FormatError(f"the {found.name} slice holds another CPU type's header")
            return view, header, found
        return whole, None, None

    def _header_at(self, view: memoryview) -> MachOHeader:
        """The header at the start of ``view`` (the slice), its load commands read first."""
        self._fill(0, HEADER.size)
        if len(view) >= HEADER.size:
            self._fill(HEADER.size, min(HEADER.unpack_from(view)[5], MAX_COMMAND_BYTES))
        return MachOHeader(view)

    @property
    def build_id(self) -> bytes | None:
        """The UUID, under the name ELF modules use for their identity."""
        return self.uuid

    def section_data(self, segment: str, name: str) -> bytes | None:
        section = self.section(segment, name)
        if section is None or section.size == 0 or not section.in_file:
            return None
        if section.offset + section.size > len(self._data):
            raise FormatError(f"{self.path}: {segment},{name} is truncated")
        self._fill(section.offset, section.size)
        return bytes(self._data[section.offset : section.offset + section.size])

    def section(self, segment: str, name: str) -> MachOSection | None:
        return self._header.section(segment, name)

    def read(self, address: int, size: int) -> bytes:
        """``size`` file-backed bytes at link-time ``address`` (the code STACK_IND reads)."""
        for segment in self.segments:
            if segment.vmaddr <= address and address + size <= segment.vmaddr + segment.filesize:
                start = segment.fileoff + address - segment.vmaddr
                if start + size <= len(self._data):
                    self._fill(start, size)
                    return bytes(self._data[start : start + size])
        raise FormatError(f"{self.path}: {address:#x}+{size} is not in the file")

    # -- unwind tables --------------------------------------------------------------

    @cached_property
    def compact_table(self) -> CompactUnwindTable | None:
        """``__TEXT,__unwind_info`` with its DWARF escape into ``__eh_frame``."""
        from liveunwind.formats.unwind.compact import CompactUnwindTable

        section = self.section("__TEXT", "__unwind_info")
        data = self.section_data("__TEXT", "__unwind_info")
        if section is None or data is None:
            return None
        return CompactUnwindTable(
            data,
            section.address,
            arch=self.arch,
            image_base=self.text_base,
            eh_frame=self.eh_frame,
            read_code=self.read,
        )

    @cached_property
    def eh_frame(self) -> Any:
        """``__TEXT,__eh_frame`` as a CfiTable, or None."""
        from liveunwind.formats.unwind.dwarf_cfi import CfiTable

        section = self.section("__TEXT", "__eh_frame")
        data = self.section_data("__TEXT", "__eh_frame")
        if section is None or data is None:
            return None
        return CfiTable(data, section.address, kind="eh_frame", text_base=self.text_base)

    def unwind_tables(self, problems: list[str]) -> list[UnwindSource]:
        """The image's unwind sources, best first; a corrupt table is noted in ``problems``.

        ``compact`` answers for functions with a compact encoding; DWARF-mode
        entries are answered by a ``cfi`` source that follows the escape's FDE
        offset (so those frames say ``cfi``), then the whole ``__eh_frame``
        serves functions ``__unwind_info`` does not list.
        """
        sources = []
        try:
            compact = self.compact_table
        except FormatError as error:
            problems.append(f"{self.path}: __unwind_info: {error}")
            compact = None
        if compact is not None:
            sources.append(
                UnwindSource(
                    "compact", "__unwind_info", _RuleView(compact, compact.compact_rule_for)
                )
            )
            sources.append(
                UnwindSource(
                    "cfi", "__unwind_info→__eh_frame", _RuleView(compact, compact.dwarf_rule_for)
                )
            )
        try:
            eh_frame = self.eh_frame
        except FormatError as error:
            problems.append(f"{self.path}: __eh_frame: {error}")
            eh_frame = None
        if eh_frame is not None:
            sources.append(UnwindSource("cfi", "__eh_frame", eh_frame))
        return sources

    # -- symbols --------------------------------------------------------------------

    @cached_property
    def symbols(self) -> MachOSymbolTable:
        return MachOSymbolTable(self)

    def _symbol_records(self) -> list[tuple[int, str, int]]:
        """(address, name, section index) of defined, non-debug symbols in code sections."""
        table = self._header.symtab
        try:
            if table is not None:
                self._fill(table.offset, table.count * 16)
                self._fill(table.strings, table.strings_size)
            symbols = self._header.symbols(self._data)
        except FormatError as error:
            raise FormatError(f"{self.path}: {error}") from None
        records = []
        for symbol in symbols:
            if symbol.type & _N_STAB or symbol.type & _N_TYPE != _N_SECT:
                continue
            index = symbol.section - 1
            if not 0 <= index < len(self.section_list) or not self.section_list[index].executable:
                continue
            records.append((symbol.value, symbol.name, index))
        return records


class _RuleView:
    """One side of a compact table (compact rules, or DWARF escapes) as an unwind table."""

    def __init__(self, table: CompactUnwindTable, rule_for: Callable[[int], UnwindRule | None]):
        self.table = table
        self.rule_for = rule_for


class MachOSymbolTable:
    """Function symbols of an image, searchable by link-time address.

    Mach-O symbols have no size: a function ends where the next symbol of its
    section starts, or with the section.  The C-level leading underscore is
    dropped, so names read (and demangle) as they do on ELF.
    """

    def __init__(self, image: MachOImage) -> None:
        ends = {i: s.address + s.size for i, s in enumerate(image.section_list)}
        starts = {i: s.address for i, s in enumerate(image.section_list)}
        named: dict[int, tuple[str, int]] = {}
        for address, name, section in image._symbol_records():
            if starts[section] <= address < ends[section]:
                current = named.get(address)
                if current is None or (current[0].startswith("l") and not name.startswith("l")):
                    named[address] = (name[1:] if name.startswith("_") else name, section)
        ordered = sorted(named.items())
        self._addresses = [address for address, _ in ordered]
        self._names = [name for _, (name, _) in ordered]
        self._ends = []
        for i, (address, (_, section)) in enumerate(ordered):
            end = ends[section]
            if i + 1 < len(ordered) and ordered[i + 1][1][1] == section:
                end = min(end, ordered[i + 1][0])
            self._ends.append(max(end, address))

    def lookup(self, address: int, *, checked: bool = False) -> SymbolMatch | None:
        """The function holding ``address`` (always read from the file: ``checked`` holds)."""
        index = bisect.bisect_right(self._addresses, address) - 1
        if index < 0 or address >= self._ends[index]:
            return None
        start = self._addresses[index]
        return SymbolMatch(self._names[index], address - start, self._ends[index] - start)

    def __len__(self) -> int:
        return len(self._addresses)


class MachOModule(Module):
    """A Mach-O image loaded at ``load_address`` in a target.

    ``ranges`` are the runtime address ranges of the image's segments in the
    target (the module map adds the target's mappings inside them to
    ``mappings``); the image file is opened the first time it is needed.
    """

    def __init__(
        self,
        path: str,
        load_address: int,
        ranges: list[tuple[int, int]],
        *,
        arch: Arch | None = None,
        uuid: bytes | None = None,
    ) -> None:
        self.ranges = sorted(ranges)
        start = self.ranges[0][0] if self.ranges else load_address
        end = self.ranges[-1][1] if self.ranges else load_address
        super().__init__(path, start, end, [])
        self.load_address = load_address
        self.arch = arch
        self.expected_uuid = uuid

    @property
    def name(self) -> str:
        """The file name, also of a relative path (an image found along a relative search path)."""
        return os.path.basename(self.path)

    @cached_property
    def image(self) -> MachOImage | None:
        try:
            image = MachOImage(self.path, arch=self.arch)
        except (FormatError, OSError) as error:
            self.problems.append(str(error))
            return None
        if self.expected_uuid is not None and image.uuid != self.expected_uuid:
            self.problems.append(f"{self.path}: UUID differs from the one the target loaded")
            return None
        return image

    @cached_property
    def load_bias(self) -> int:
        """Runtime address minus link-time address (the ASLR slide)."""
        image = self.image
        return self.load_address - (image.text_base if image is not None else self.load_address)

    @property
    def build_id(self) -> bytes | None:
        return self.expected_uuid if self.image is None else self.image.uuid

    @property
    def uuid(self) -> bytes | None:
        return self.build_id

    def contains(self, address: int) -> bool:
        return any(start <= address < end for start, end in self.ranges)

    @cached_property
    def symbols(self) -> MachOSymbolTable | None:
        """The image's symbols; a corrupt symbol table is a problem, and frames go unnamed."""
        if self.image is None:
            return None
        try:
            return self.image.symbols
        except FormatError as error:
            self.problems.append(str(error))
            return None

    @cached_property
    def unwind_sources(self) -> dict[str, list[UnwindSource]]:
        sources: dict[str, list[UnwindSource]] = {}
        if self.image is not None:
            for source in self.image.unwind_tables(self.problems):
                sources.setdefault(source.name, []).append(source)
        return sources
