"""Mach-O images: segments, sections, unwind tables, symbols and LC_UUID, through lief.

Only Mach-O code paths import this module, and lief is imported inside it
only when an image is actually opened, so an ELF backtrace never pays for
lief.  A :class:`MachOImage` answers in link-time addresses;
:class:`MachOModule` places an image at its load address in a target and
is the :class:`~liveunwind.modules.module.Module` the stepper and the
symbolizer ask.
"""

from __future__ import annotations

import bisect
import os
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from liveunwind.arch import Arch, arch_by_macho_cpu_type
from liveunwind.errors import FormatError
from liveunwind.modules.module import Module
from liveunwind.modules.sources import UnwindSource
from liveunwind.modules.symbols import SymbolMatch
from liveunwind.targets.files import FileError, open_file

if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.formats.unwind.compact import CompactUnwindTable
    from liveunwind.formats.unwind.rules import UnwindRule

_N_STAB = 0xE0
_N_TYPE = 0x0E
_N_SECT = 0x0E
_INSTRUCTION_FLAGS = frozenset(("PURE_INSTRUCTIONS", "SOME_INSTRUCTIONS"))
#: Largest Mach-O file opened: lief reads the whole file into memory.
MAX_FILE_SIZE = 1 << 30


@dataclass(frozen=True, slots=True)
class MachOSegment:
    name: str
    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int


@dataclass(frozen=True, slots=True)
class MachOSection:
    segment: str
    name: str
    address: int
    size: int
    executable: bool


class MachOImage:
    """One Mach-O file (the slice for ``arch`` of a universal file), in link-time addresses."""

    def __init__(self, path: str, *, arch: Arch | None = None) -> None:
        import lief

        self.path = path
        try:
            file = open_file(path)
        except FileError as error:
            raise FormatError(str(error)) from None
        with file:
            if file.size > MAX_FILE_SIZE:
                raise FormatError(
                    f"{path}: {file.size} bytes, more than the {MAX_FILE_SIZE >> 20} MiB "
                    "a Mach-O image may have"
                )
            lief.logging.disable()
            # lief opens what it is given by name: give it the very inode checked above.
            fat = lief.MachO.parse(f"/proc/self/fd/{file.fd}")
        if fat is None or fat.size == 0:
            raise FormatError(f"{path}: not a Mach-O file")
        binary, found = None, None
        for index in range(fat.size):
            candidate = fat.at(index)
            if candidate is None:
                continue
            found = arch_by_macho_cpu_type(_cpu_type(candidate.header))
            if found is not None and (arch is None or found is arch):
                binary = candidate
                break
        if binary is None or found is None:
            raise FormatError(f"{path}: no {arch.name if arch else 'x86_64 or arm64'} slice")
        # The FatBinary owns the slices: keep it alive as long as the slice is used.
        self._fat = fat
        self._binary: Any = binary
        self.arch: Arch = found
        self.segments = [
            MachOSegment(
                _text(s.name), s.virtual_address, s.virtual_size, s.file_offset, s.file_size
            )
            for s in binary.segments
        ]
        try:  # lief decodes a section's segment name itself, and fails on bytes that are not UTF-8
            named = [(s.segment_name, _text(s.name), s) for s in binary.sections]
        except UnicodeDecodeError as error:
            raise FormatError(f"{path}: a section's segment name is not UTF-8 ({error})") from None
        self.section_list = [
            MachOSection(
                segment,
                name,
                s.virtual_address,
                s.size,
                any(getattr(flag, "name", "") in _INSTRUCTION_FLAGS for flag in s.flags_list),
            )
            for segment, name, s in named
        ]
        self._lief_sections = {(segment, name): s for segment, name, s in named}
        text = next((s for s in self.segments if s.name == "__TEXT"), None)
        if text is None:
            raise FormatError(f"{path}: no __TEXT segment")
        #: The link-time address of the Mach-O header: the base of __unwind_info offsets.
        self.text_base = text.vmaddr
        uuid_command = binary.uuid if binary.has_uuid else None
        self.uuid = None if uuid_command is None else bytes(uuid_command.uuid)

    @property
    def build_id(self) -> bytes | None:
        """The UUID, under the name ELF modules use for their identity."""
        return self.uuid

    def section_data(self, segment: str, name: str) -> bytes | None:
        section = self._lief_sections.get((segment, name))
        if section is None or section.size == 0:
            return None
        data = bytes(section.content)
        if len(data) != section.size:
            raise FormatError(f"{self.path}: {segment},{name} is truncated")
        return data

    def section(self, segment: str, name: str) -> MachOSection | None:
        for section in self.section_list:
            if section.segment == segment and section.name == name:
                return section
        return None

    def read(self, address: int, size: int) -> bytes:
        """``size`` file-backed bytes at link-time ``address`` (the code STACK_IND reads)."""
        for index, segment in enumerate(self.segments):
            if segment.vmaddr <= address and address + size <= segment.vmaddr + segment.filesize:
                content = self._segment_contents[index]
                start = address - segment.vmaddr
                return bytes(content[start : start + size])
        raise FormatError(f"{self.path}: {address:#x}+{size} is not in the file")

    @cached_property
    def _segment_contents(self) -> list[memoryview]:
        """Each segment's bytes, in the order of ``segments``.

        By position, not by name: a crafted name that is not UTF-8 reads one way
        through ``_text`` and another through lief (fuzz finding macho-file
        585933173/2104, a KeyError).
        """
        return [memoryview(bytes(s.content)) for s in self._binary.segments]

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
        records = []
        for symbol in self._binary.symbols:
            raw = symbol.raw_type
            if raw & _N_STAB or raw & _N_TYPE != _N_SECT:
                continue
            index = symbol.numberof_sections - 1
            if not 0 <= index < len(self.section_list) or not self.section_list[index].executable:
                continue
            records.append((symbol.value, _text(symbol.name), index))
        return records


def _cpu_type(header: Any) -> int:
    """The header's cputype: lief gives an enum member, or a bare int for one it does not know."""
    with warnings.catch_warnings():  # and warns on stderr, which is for one-line errors
        warnings.simplefilter("ignore")
        value = header.cpu_type
    return int(getattr(value, "value", value))


def _text(name: str | bytes) -> str:
    """A name lief gives as bytes when they are not UTF-8, as text."""
    return name if isinstance(name, str) else name.decode("utf-8", "replace")


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

    def lookup(self, address: int) -> SymbolMatch | None:
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
        return None if self.image is None else self.image.symbols

    @cached_property
    def unwind_sources(self) -> dict[str, list[UnwindSource]]:
        sources: dict[str, list[UnwindSource]] = {}
        if self.image is not None:
            for source in self.image.unwind_tables(self.problems):
                sources.setdefault(source.name, []).append(source)
        return sources
