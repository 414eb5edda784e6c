"""A lean ELF64 reader over a buffer (a file's bytes read as needed, or bytes from memory).

pyelftools builds an object per header and costs ~38 ms to import; a
backtrace needs only program headers, a few sections by name and the
build-id, so this reader slices them straight out of the buffer with
``struct``.  All offsets come from untrusted files and are bounds-checked.

A file's buffer is filled as it is sliced: the image is given
:class:`LazyBytes`, whose ``fill`` makes a range of the buffer hold the
file's bytes before it is looked at (``targets.files.FileContents``, where
the reading is), so that the reader does no I/O of its own and reads no more
of a file than it decodes.
"""

from __future__ import annotations

import struct

from liveunwind.arch import arch_by_elf_machine
from liveunwind.errors import FormatError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap
    from collections.abc import Callable, Iterator
    from functools import cached_property
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import cached_property


ELF_MAGIC = b"\x7fELF"
PT_LOAD = 1
PT_DYNAMIC = 2
PT_NOTE = 4
PT_GNU_EH_FRAME = 0x6474E550
PT_GNU_SFRAME = 0x6474E554
NT_GNU_BUILD_ID = 3
SHT_SYMTAB = 2
SHT_NOBITS = 8
SHT_DYNSYM = 11
_MAX_HEADERS = 65535
#: Names of the machines liveunwind does not unwind (those it does are named by their Arch).
_OTHER_MACHINES = {2: "SPARC", 3: "i386", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390",
                   40: "ARM", 43: "SPARC64", 243: "RISC-V", 258: "LoongArch"}  # fmt: skip
#: Longest symbol name decoded (a corrupt string table could have no NUL for megabytes).
MAX_SYMBOL_NAME = 512
#: Elf64_Sym (st_name, st_info, st_other, st_shndx, st_value, st_size) in each byte order.
_SYMBOL = {order: struct.Struct(order + "IBBHQQ") for order in "<>"}


class ProgramHeader:
    """One program header: a segment of the image.

    This and :class:`Section` are plain classes rather than named tuples (as
    :class:`ElfSymbol` is): a named tuple's class costs 70–170 µs of every cold start.
    """

    __slots__ = ("align", "filesz", "flags", "memsz", "offset", "type", "vaddr")

    def __init__(
        self, type: int, flags: int, offset: int, vaddr: int, filesz: int, memsz: int, align: int
    ) -> None:
        self.type = type
        self.flags = flags
        self.offset = offset
        self.vaddr = vaddr
        self.filesz = filesz
        self.memsz = memsz
        self.align = align


class Section:
    """One section header, its name resolved."""

    __slots__ = ("address", "entsize", "flags", "link", "name", "offset", "size", "type")

    def __init__(
        self,
        name: str,
        type: int,
        flags: int,
        address: int,
        offset: int,
        size: int,
        link: int,
        entsize: int,
    ) -> None:
        self.name = name
        self.type = type
        self.flags = flags
        self.address = address
        self.offset = offset
        self.size = size
        self.link = link
        self.entsize = entsize


class ElfSymbol:
    """One ELF symbol: its name, ``st_value``, ``st_size``, type (STT_*) and section index.

    A plain class rather than a named tuple: this module is on every
    backtrace's import path, where a named tuple's class costs 70 µs.
    """

    __slots__ = ("kind", "name", "shndx", "size", "value")

    def __init__(self, name: str, value: int, size: int, kind: int, shndx: int) -> None:
        self.name = name
        self.value = value
        self.size = size
        self.kind = kind
        self.shndx = shndx


class LazyBytes:
    """A buffer of a file's size that holds the file's bytes only where :meth:`fill` put them.

    The contract between this reader and the one who reads the file
    (``targets.files.FileContents``): ``data`` is the buffer, ``fill`` is
    called before a range of it is looked at (and raises FormatError when
    the file is no longer what it was), ``changed`` says whether it still is.
    """

    data: bytes | mmap.mmap

    def fill(self, offset: int, size: int) -> None:
        raise NotImplementedError

    def changed(self) -> str | None:
        """Why the file is no longer what was first read of it, or None if it still is."""
        raise NotImplementedError

    def identity(self) -> tuple[int, int, int, int] | None:
        """The file as opened: (device, inode, size, mtime ns); None when that is not known."""
        return None


class ElfImage:
    """Headers and sections of one ELF64 image held in ``data``: bytes, or a file's LazyBytes."""

    def __init__(
        self, data: bytes | memoryview | mmap.mmap | LazyBytes, *, origin: str = ""
    ) -> None:
        self.origin = origin or "ELF image"
        #: The file's bytes as read, when they are (None: all of ``data`` is there).
        self.source: LazyBytes | None = None
        self._fill: Callable[[int, int], None] | None = None
        if isinstance(data, LazyBytes):
            self.source = data
            self._fill = data.fill
            data.fill(0, 64)
            data = data.data
        self.data = data
        if len(data) < 64 or bytes(data[:4]) != ELF_MAGIC:
            raise FormatError(f"{self.origin}: not an ELF file")
        if data[4] != 2:
            raise FormatError(f"{self.origin}: only 64-bit ELF is supported")
        if data[5] not in (1, 2):
            raise FormatError(f"{self.origin}: bad ELF byte order {data[5]}")
        self.byte_order = "<" if data[5] == 1 else ">"
        (
            self.type,
            self.machine,
            _version,
            self.entry,
            self._phoff,
            self._shoff,
            _flags,
            _ehsize,
            self._phentsize,
            self._phnum,
            self._shentsize,
            self._shnum,
            self._shstrndx,
        ) = struct.unpack_from(self.byte_order + "HHIQQQIHHHHHH", data, 16)

    # -- bounds -------------------------------------------------------------

    def slice(self, offset: int, size: int) -> memoryview:
        """``size`` bytes at file offset ``offset``; FormatError if outside the image."""
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise FormatError(
                f"{self.origin}: range {offset:#x}+{size:#x} is outside the file "
                f"({len(self.data):#x} bytes)"
            )
        if self._fill is not None:
            self._fill(offset, size)
        return memoryview(self.data)[offset : offset + size]

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at file offset ``offset``: fewer where the file ends."""
        size = min(size, len(self.data) - offset)
        return bytes(self.slice(offset, size)) if size > 0 and offset >= 0 else b""

    # -- program headers ----------------------------------------------------

    @cached_property
    def segments(self) -> list[ProgramHeader]:
        if self._phnum == 0:
            return []
        if self._phentsize < 56 or self._phnum > _MAX_HEADERS:
            raise FormatError(f"{self.origin}: bad program header table")
        table = self.slice(self._phoff, self._phentsize * self._phnum)
        headers = []
        for index in range(self._phnum):
            ptype, flags, offset, vaddr, _paddr, filesz, memsz, align = struct.unpack_from(
                self.byte_order + "IIQQQQQQ", table, index * self._phentsize
            )
            headers.append(ProgramHeader(ptype, flags, offset, vaddr, filesz, memsz, align))
        return headers

    def segments_of_type(self, ptype: int) -> list[ProgramHeader]:
        return [header for header in self.segments if header.type == ptype]

    def segment_data(self, header: ProgramHeader) -> memoryview:
        return self.slice(header.offset, header.filesz)

    def vaddr_for_offset(self, offset: int) -> int | None:
        """The link-time address that maps file offset ``offset``, if a PT_LOAD covers it."""
        for header in self.segments_of_type(PT_LOAD):
            start = header.offset - header.offset % 4096
            if start <= offset < header.offset + max(header.filesz, 1):
                return header.vaddr - (header.offset - offset)
        return None

    def offset_for_vaddr(self, vaddr: int, size: int = 1) -> int | None:
        """File offset holding link-time address ``vaddr``, if its bytes are in the file."""
        for header in self.segments_of_type(PT_LOAD):
            if header.vaddr <= vaddr and vaddr + size <= header.vaddr + header.filesz:
                return header.offset + (vaddr - header.vaddr)
        return None

    # -- sections -----------------------------------------------------------

    @cached_property
    def section_headers(self) -> list[Section]:
        """Section headers in index order (empty when stripped)."""
        if self._shnum == 0 or self._shoff == 0:
            return []
        if self._shentsize < 64 or self._shnum > _MAX_HEADERS:
            raise FormatError(f"{self.origin}: bad section header table")
        table = self.slice(self._shoff, self._shentsize * self._shnum)
        raw = [
            struct.unpack_from(self.byte_order + "IIQQQQIIQQ", table, index * self._shentsize)
            for index in range(self._shnum)
        ]
        if self._shstrndx >= len(raw):
            raise FormatError(f"{self.origin}: bad section name table index")
        names_header = raw[self._shstrndx]
        names = self.slice(names_header[4], names_header[5])
        return [
            Section(c_string(names, name), stype, flags, address, offset, size, link, entsize)
            for name, stype, flags, address, offset, size, link, _info, _align, entsize in raw
        ]

    @cached_property
    def sections(self) -> dict[str, Section]:
        """Sections by name; the first of a name wins."""
        sections: dict[str, Section] = {}
        for section in self.section_headers:
            if section.name:
                sections.setdefault(section.name, section)
        return sections

    def section_data(self, name: str) -> memoryview | None:
        section = self.sections.get(name)
        return None if section is None else self.contents(section)

    def symbol_table_headers(self) -> Iterator[tuple[Section, Section]]:
        """Each symbol table's header with its string table's: ``.symtab`` first, then ``.dynsym``.

        Read from the section headers alone.  A table whose string-table link
        is out of range is left out.
        """
        headers = self.section_headers
        for kind in (SHT_SYMTAB, SHT_DYNSYM):
            for section in headers:
                if section.type == kind and section.link < len(headers):
                    yield section, headers[section.link]

    def symbol_tables(self) -> Iterator[tuple[Section, memoryview, memoryview]]:
        """Each symbol table with its string table, as :meth:`symbol_table_headers` orders them.

        A table without contents (stripped, SHT_NOBITS) is left out.
        """
        for section, string_section in self.symbol_table_headers():
            symbols = self.contents(section)
            strings = self.contents(string_section)
            if symbols is not None and strings is not None:
                yield section, symbols, strings

    def symbols(self) -> Iterator[ElfSymbol]:
        """Every named symbol of ``.symtab`` then ``.dynsym``, of any type, names decoded.

        :class:`~liveunwind.modules.symbols.SymbolTable` keeps only functions
        and builds its columns without an object per symbol; this is for the
        few small images read symbol by symbol (JIT objects, whose values are
        section-relative when they are relocatable).
        """
        record = _SYMBOL[self.byte_order]
        for _section, table, strings in self.symbol_tables():
            raw_strings = bytes(strings)
            usable = len(table) - len(table) % record.size
            for name_offset, info, _other, shndx, value, size in record.iter_unpack(table[:usable]):
                if not name_offset or name_offset >= len(raw_strings):
                    continue
                end = raw_strings.find(b"\0", name_offset, name_offset + MAX_SYMBOL_NAME)
                name = raw_strings[name_offset : end if end >= 0 else name_offset + MAX_SYMBOL_NAME]
                yield ElfSymbol(name.decode("utf-8", "replace"), value, size, info & 0xF, shndx)

    def find_symbol(self, name: str) -> ElfSymbol | None:
        """The first defined symbol called ``name`` in ``.dynsym``, then ``.symtab``.

        ``.dynsym`` first: what is looked up by name (``_PyRuntime``, the JIT
        registries' heads) is exported, and the dynamic tables are a fraction
        of ``.symtab`` (35 MB of it in a debug build of CPython).  Searched
        without decoding every symbol or copying a table: the name is found
        in the string table with ``find`` on the image's own bytes, then the
        symbol whose name field holds that offset.  A name found inside a
        longer string still counts, as linkers share string tails between
        symbols.
        """
        needle = name.encode() + b"\0"
        headers = self.section_headers
        for kind in (SHT_DYNSYM, SHT_SYMTAB):
            for section in headers:
                if section.type != kind or section.link >= len(headers):
                    continue
                strings = headers[section.link]
                if strings.type == SHT_NOBITS:
                    continue
                self.slice(section.offset, section.size)  # both inside the file, or FormatError
                self.slice(strings.offset, strings.size)
                symbol = self._find_in_table(section, strings, needle, name)
                if symbol is not None:
                    return symbol
        return None

    @cached_property
    def _haystack(self) -> bytes | mmap.mmap:
        """The image's bytes as something with ``find``: a memoryview is copied, once.

        Only the ranges :meth:`find_symbol` has sliced (so filled) are searched.
        """
        data = self.data
        return bytes(data) if isinstance(data, memoryview) else data

    def _find_in_table(
        self, table: Section, strings: Section, needle: bytes, name: str
    ) -> ElfSymbol | None:
        """The defined symbol of ``table`` named ``needle`` (NUL included) in ``strings``."""
        search = self._haystack
        start, end = strings.offset, strings.offset + strings.size
        position = search.find(needle, start + 1, end)
        while position > 0:
            symbol = self._symbol_named(search, table, position - start, name)
            if symbol is not None:
                return symbol
            position = search.find(needle, position + 1, end)
        return None

    def _symbol_named(
        self, search: bytes | mmap.mmap, table: Section, name_offset: int, name: str
    ) -> ElfSymbol | None:
        """The defined symbol of ``table`` whose name starts at ``name_offset``, if any."""
        record = _SYMBOL[self.byte_order]
        key = name_offset.to_bytes(4, "little" if self.byte_order == "<" else "big")
        first, end = table.offset, table.offset + table.size
        at = search.find(key, first, end)
        while 0 <= at <= end - record.size:
            if (at - first) % record.size == 0:
                _, info, _other, shndx, value, size = record.unpack_from(search, at)
                if shndx != 0:
                    return ElfSymbol(name, value, size, info & 0xF, shndx)
            at = search.find(key, at + 1, end)
        return None

    def contents(self, section: Section) -> memoryview | None:
        """The bytes of a section, or None for SHT_NOBITS (e.g. .bss, stripped debug files)."""
        if section.type == SHT_NOBITS:
            return None
        return self.slice(section.offset, section.size)

    # -- notes --------------------------------------------------------------

    @cached_property
    def build_id(self) -> bytes | None:
        """The GNU build-id, from PT_NOTE (present even when sections are stripped)."""
        for header in self.segments_of_type(PT_NOTE):
            found = _find_build_id(self.segment_data(header), self.byte_order)
            if found is not None:
                return found
        note = self.section_data(".note.gnu.build-id")
        return _find_build_id(note, self.byte_order) if note is not None else None


def _find_build_id(notes: memoryview, order: str) -> bytes | None:
    position = 0
    for _ in range(256):
        if position + 12 > len(notes):
            return None
        namesz, descsz, ntype = struct.unpack_from(order + "III", notes, position)
        name_start = position + 12
        desc_start = name_start + _align4(namesz)
        desc_end = desc_start + descsz
        if desc_end > len(notes):
            return None
        if ntype == NT_GNU_BUILD_ID and bytes(notes[name_start : name_start + namesz]) == b"GNU\0":
            return bytes(notes[desc_start:desc_end])
        position = desc_start + _align4(descsz)
    return None


def machine_name(machine: int) -> str:
    """The usual name of ELF machine ``machine``, for messages."""
    try:
        return arch_by_elf_machine(machine).name
    except UsageError:
        return _OTHER_MACHINES.get(machine, f"ELF machine {machine}")


def _align4(value: int) -> int:
    return (value + 3) & ~3


def c_string(table: memoryview, offset: int, missing: str = "") -> str:
    """The NUL-terminated name at ``offset`` of a string table (at most 4 KiB of it).

    An offset outside the table (corrupt input) gives ``missing``.
    """
    if offset >= len(table):
        return missing
    raw = bytes(table[offset : offset + 4096])
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
