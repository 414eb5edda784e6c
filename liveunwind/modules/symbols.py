"""Symbol tables: address → function name, and demangling of C++ and Rust names.

A table is built once per module, lazily, the first time a pc in it is
symbolized.  libc's ``.symtab`` alone holds ~10,000 symbols, so a table is
built from whole columns (values, st_info bytes, …) with C-speed operations
rather than an object per symbol, keeps only function-like symbols, and
decodes a name only when an address lands in its function.
"""

from __future__ import annotations

import bisect
import struct
import sys
from itertools import accumulate, compress

from liveunwind.errors import FormatError
from liveunwind.formats.elf import SHT_NOBITS, SHT_SYMTAB, ElfImage, c_string
from liveunwind.modules import symbolindex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from functools import lru_cache

    from liveunwind.formats.dwarf.info import DebugInfo
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import lru_cache


_STT_FUNC = 2
_STT_GNU_IFUNC = 10
_STB_GLOBAL = 1
_STB_WEAK = 2
_SYMBOL_SIZE = 24
#: A symbol's location (see _SymbolSection): its image's place above this bit, its offset below.
_PLACE_SHIFT = 56
_OFFSET_MASK = (1 << _PLACE_SHIFT) - 1
#: The host's byte order as ElfImage spells it: symbols in it can be read by casts.
_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"
#: Byte translations: nonzero → 0xFF (a mask), and for each class c: c → 1, others → 0.
_NONZERO = b"\0" + b"\xff" * 255
_ONLY = [bytes(c) + b"\1" + bytes(255 - c) for c in range(4)]


def _function_classes() -> bytes:
    """st_info → 0 unless a function (STT_FUNC, STT_GNU_IFUNC), else 1 + its binding's rank.

    Global ranks over weak over anything else (local, GNU unique), as debuggers do.
    """
    table = bytearray(256)
    for binding in range(16):
        rank = 2 if binding == _STB_GLOBAL else 1 if binding == _STB_WEAK else 0
        for kind in (_STT_FUNC, _STT_GNU_IFUNC):
            table[binding << 4 | kind] = 1 + rank
    return bytes(table)


_FUNCTION_CLASS = _function_classes()


class SymbolMatch:
    """The function containing an address, and the distance from its start."""

    __slots__ = ("name", "offset", "size")

    def __init__(self, name: str, offset: int, size: int) -> None:
        self.name = name
        self.offset = offset
        self.size = size


class _SymbolSection:
    """One ``.symtab`` or ``.dynsym`` as columns indexed by symbol number.

    ``classes`` holds a byte per symbol: 0 for anything but a function defined
    in a section, else 1 + the rank of its binding.  ``location`` says where
    its first symbol is: the image's place among the table's images in the
    top byte, its file offset below (what an index keeps of each function,
    to check it against the file: :meth:`SymbolTable.lookup`).
    """

    __slots__ = ("classes", "location", "names", "sizes", "strings", "symtab", "values")

    def __init__(
        self,
        columns: tuple[bytes, Sequence[int], Sequence[int], Sequence[int]],
        strings: memoryview,
        symtab: bool,
        location: int,
    ) -> None:
        self.classes, self.values, self.sizes, self.names = columns
        self.strings = strings
        self.symtab = symtab
        self.location = location


class SymbolTable:
    """The function symbols of one module, searchable by link-time address.

    Several images can contribute: the module's own file and its separate
    debug file or MiniDebugInfo, which share link-time addresses.  For each
    address the highest-ranked symbol stands: global over weak over local,
    and a ``.symtab`` symbol two ranks over a ``.dynsym`` one of the same
    binding (``.symtab`` has local functions too); of equal ranks, the first
    seen.

    In the command, a table the last run built is read from its index
    instead (modules/symbolindex.py); an answer a walk decides by
    (``checked``) is then first confirmed against the file's own symbol.
    """

    def __init__(self, *images: ElfImage) -> None:
        self._images = images
        #: Size and name of each address's symbol, by its index, once asked for.
        self._found: dict[int, tuple[int, str]] = {}
        #: What the command's last run kept of this table (modules/symbolindex.py), if usable.
        self._stored = symbolindex.load(images)
        #: The indexes of the stored functions confirmed against their files.
        self._confirmed: set[int] = set()
        self._addresses: Sequence[int]
        if self._stored is not None:
            self._addresses = self._stored.addresses
        else:
            self._build()

    def _build(self) -> None:
        """The table from the images' symbol sections (offered to be kept as an index)."""
        self._stored = None
        self._found.clear()
        self._sections = [
            section
            for place, image in enumerate(self._images)
            for section in _symbol_sections(image, place)
        ]
        #: Symbols are numbered across sections: the first number of each section.
        self._bases = list(accumulate((len(s.classes) for s in self._sections), initial=0))
        #: The number of the symbol that stands for each address.
        self._numbers: dict[int, int] = {}
        for group in self._ranked_groups():
            self._numbers.update(group)
        self._numbers.pop(0, None)  # no loaded function is at 0 (an object file's first is)
        self._addresses = sorted(self._numbers)
        if len(self._addresses) >= symbolindex.MIN_SYMBOLS:
            symbolindex.offer(self._images, self._functions)

    def _ranked_groups(self) -> list[Iterator[tuple[int, int]]]:
        """(address, symbol number) pairs of the function symbols, worst-ranked group first.

        A group is one binding class of one section, walked backwards, so that
        a dict fed the groups in this order keeps, for every address, the
        best-ranked and, of equal ones, the first-seen symbol.
        """
        keyed = []
        for order, (section, base) in enumerate(zip(self._sections, self._bases)):
            classes = section.classes[::-1]
            values = section.values[::-1]
            numbers = range(base + len(classes) - 1, base - 1, -1)
            for kind in (1, 2, 3):
                first = classes.find(kind)
                if first < 0:
                    continue
                # The span from its first to its last symbol: ELF puts locals first,
                # so that is usually a fraction of the section.
                span = slice(first, classes.rfind(kind) + 1)
                group = _of_class(classes[span], kind, values[span], numbers[span])
                rank = kind - 1 + (2 if section.symtab else 0)
                keyed.append((rank, -order, group))
        keyed.sort(key=lambda item: item[:2])
        return [group for _, _, group in keyed]

    def lookup(self, address: int, *, checked: bool = False) -> SymbolMatch | None:
        """The function whose range holds ``address`` (a sized symbol, or the nearest unsized).

        ``checked``: the answer decides a walk (where a function starts and
        ends), so one from an index is confirmed against the file first; an
        index the file contradicts is dropped, and the table built anew.
        """
        index = bisect.bisect_right(self._addresses, address) - 1
        if index < 0:
            return None
        if checked and self._stored is not None and not self._confirm(index):
            self._build()
            return self.lookup(address)
        start = self._addresses[index]
        size, name = self._symbol(index)
        if size and address >= start + size:
            return None
        return SymbolMatch(name, address - start, size)

    def _symbol(self, index: int) -> tuple[int, str]:
        """Size and name of the ``index``-th address's symbol, its name decoded once."""
        found = self._found.get(index)
        if found is None and self._stored is not None:
            found = self._found[index] = (self._stored.sizes[index], self._stored.name(index))
        elif found is None:
            number = self._numbers[self._addresses[index]]
            which = bisect.bisect_right(self._bases, number) - 1
            section = self._sections[which]
            symbol = number - self._bases[which]
            name = c_string(section.strings, section.names[symbol], missing="?")
            found = self._found[index] = (section.sizes[symbol], name)
        return found

    def _functions(self) -> Iterator[tuple[int, int, int, str]]:
        """Every function as (address, size, location, name), in address order: an index's rows."""
        for index, address in enumerate(self._addresses):
            number = self._numbers[address]
            which = bisect.bisect_right(self._bases, number) - 1
            location = self._sections[which].location + (number - self._bases[which]) * _SYMBOL_SIZE
            size, name = self._symbol(index)
            yield address, size, location, name

    def _confirm(self, index: int) -> bool:
        """Whether the file's own symbol at the stored location is the stored function."""
        if index in self._confirmed:
            return True
        stored = self._stored
        assert stored is not None
        location = stored.locations[index]
        place, offset = location >> _PLACE_SHIFT, location & _OFFSET_MASK
        try:
            image = self._images[place]
            section = next(
                section
                for section, strings in image.symbol_table_headers()
                if section.offset <= offset <= section.offset + section.size - _SYMBOL_SIZE
                and (offset - section.offset) % _SYMBOL_SIZE == 0
            )
            record = image.slice(offset, _SYMBOL_SIZE)
            name_at, info, _other, shndx, value, size = struct.unpack_from(
                image.byte_order + "IBBHQQ", record
            )
            strings = image.section_headers[section.link]
            name = "?"
            if name_at < strings.size:
                text = image.slice(strings.offset + name_at, min(4096, strings.size - name_at))
                name = c_string(text, 0, missing="?")
        except (FormatError, IndexError, StopIteration):
            return False
        confirmed = (
            value == stored.addresses[index]
            and size == stored.sizes[index]
            and bool(shndx and _FUNCTION_CLASS[info])
            and name == stored.name(index)
        )
        if confirmed:
            self._confirmed.add(index)
        return confirmed

    def __len__(self) -> int:
        return len(self._addresses)


def has_symtab(image: ElfImage) -> bool:
    """Whether ``image`` has a ``.symtab`` with symbols (stripped files keep ``.dynsym`` only)."""
    return any(
        section.type == SHT_SYMTAB and strings.type != SHT_NOBITS
        for section, strings in image.symbol_table_headers()
    )


class DwarfFunctions:
    """Function names from DWARF, for a module whose files have no ``.symtab``.

    A debug file can come without a symbol table (``objcopy --only-keep-debug``
    of a stripped file, a table removed, a dwz'd file); its
    ``DW_TAG_subprogram`` DIEs still name every function.  They are asked
    first, the ELF symbols (``.dynsym``'s exports) where DWARF has no
    function.  ``debug_info`` opens the DWARF the first time a pc is looked
    up (the module's ``lines``, shared with ``--lines``); DWARF that cannot
    be read names nothing, and the ELF symbols stand.
    """

    def __init__(self, debug_info: Callable[[], DebugInfo], elf: SymbolTable | None) -> None:
        self._debug_info = debug_info
        self._elf = elf
        self._found: dict[int, SymbolMatch | None] = {}

    def lookup(self, address: int, *, checked: bool = False) -> SymbolMatch | None:
        """The DWARF function holding ``address``, else the ELF symbol's (``checked`` as asked)."""
        if address in self._found and not checked:
            return self._found[address]
        match = self._dwarf(address)
        if match is None and self._elf is not None:
            match = self._elf.lookup(address, checked=checked)
        if len(self._found) >= _MAX_DWARF_ANSWERS:
            self._found.clear()
        self._found[address] = match
        return match

    def _dwarf(self, address: int) -> SymbolMatch | None:
        try:
            found = self._debug_info().function_at(address)
        except FormatError:
            return None
        if found is None:
            return None
        name, start, end = found
        return SymbolMatch(name, address - start, end - start)


#: Answers a DwarfFunctions keeps; emptied when full (a session's long run).
_MAX_DWARF_ANSWERS = 1 << 14


def _of_class(
    classes: bytes, kind: int, values: Sequence[int], numbers: range
) -> Iterator[tuple[int, int]]:
    """The (value, symbol number) pairs whose class is ``kind``, filtered at C speed."""
    pairs = zip(values, numbers)
    if classes.count(kind) == len(classes):
        return pairs
    return compress(pairs, classes.translate(_ONLY[kind]))


def _symbol_sections(image: ElfImage, place: int) -> Iterator[_SymbolSection]:
    """The image's symbol tables with their string tables (stripped ones have none).

    ``place`` is the image's among the table's images.
    """
    for section, symbols, strings in image.symbol_tables():
        if len(symbols) < _SYMBOL_SIZE:
            continue
        symbols = symbols[: len(symbols) - len(symbols) % _SYMBOL_SIZE]
        if image.byte_order == _NATIVE_ORDER:
            columns = _cast_columns(symbols)
        else:
            columns = _unpacked_columns(symbols, image.byte_order)
        location = place << _PLACE_SHIFT | section.offset
        yield _SymbolSection(columns, strings, section.type == SHT_SYMTAB, location)


def _cast_columns(
    symbols: memoryview,
) -> tuple[bytes, Sequence[int], Sequence[int], Sequence[int]]:
    """Classes, values, sizes and name offsets of symbols in the host's byte order.

    Elf64_Sym is (st_name u32, st_info u8, st_other u8, st_shndx u16,
    st_value u64, st_size u64): three 64-bit words, read by casting the
    section (CPython's casts do not need aligned data).  Values and sizes
    stay views into the file; only the first word of each symbol is copied,
    because stepping through bytes is ~10x faster than through a memoryview.
    """
    words = symbols.cast("Q")
    header = bytes(words[::3])  # st_name, st_info, st_other, st_shndx: 8 bytes per symbol
    # st_shndx is 0 (undefined) when both of its bytes are: byte order does not matter.
    classes = _classes(header[4::8], header[6::8], header[7::8])
    return classes, words[1::3], words[2::3], memoryview(header).cast("I")[::2]


def _unpacked_columns(
    symbols: memoryview, order: str
) -> tuple[bytes, Sequence[int], Sequence[int], Sequence[int]]:
    """The same columns for symbols in the other byte order, through ``struct``."""
    names, infos, _others, shndx, values, sizes = zip(
        *struct.iter_unpack(order + "IBBHQQ", symbols)
    )
    return _classes(bytes(infos), bytes(map(bool, shndx))), values, sizes, names


def _classes(infos: bytes, *shndx: bytes) -> bytes:
    """A class byte per symbol (see :class:`_SymbolSection`) from its st_info and st_shndx.

    ``shndx`` are byte strings that are all 0 where a symbol is undefined;
    they mask the function classes through big integers, which combine whole
    columns bytewise at C speed.
    """
    defined = 0
    for part in shndx:
        defined |= int.from_bytes(part.translate(_NONZERO), "little")
    functions = int.from_bytes(infos.translate(_FUNCTION_CLASS), "little")
    return (functions & defined).to_bytes(len(infos), "little")


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """Readable form of an Itanium C++ or Rust name, without a symbol version (``@GLIBC_2.34``).

    Uses the C++ runtime's own ``__cxa_demangle`` (libstdc++), which also
    reads Rust's legacy mangling (the trailing Rust hash is dropped), and our
    own reader of Rust's v0 mangling.
    """
    name = name.partition("@")[0]
    if name.startswith("_R"):
        from liveunwind.modules.rust_demangle import demangle_v0

        return demangle_v0(name)
    if not name.startswith("_Z"):
        return name
    readable = _cxa_demangle(_without_llvm_suffix(name))
    if readable is None:
        return name
    path = _without_rust_hash(readable)
    return readable if path is None else _unescape_rust_legacy(path)


def _without_llvm_suffix(name: str) -> str:
    """``name`` without LLVM's tag on internal-linkage copies (``.llvm.123…``), noise to readers."""
    head, tag, number = name.rpartition(".llvm.")
    return head if tag and number.isdigit() and number.isascii() else name


def _without_rust_hash(readable: str) -> str | None:
    """A legacy Rust path without its trailing ``::h`` + 16 hex digits; None if it has none."""
    digits = readable[-16:]
    if readable[-19:-16] != "::h" or len(digits) != 16 or digits.strip("0123456789abcdef"):
        return None
    return readable[:-19]


#: Rust's legacy mangling spells characters an Itanium name cannot hold as ``$..$``.
_RUST_ESCAPES = {
    "SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ",",
}  # fmt: skip
_RUST_ESCAPE = r"\$(SP|BP|RF|LT|GT|LP|RP|C|u[0-9a-f]{2,6})\$"


def _unescape_rust_legacy(text: str) -> str:
    """Decodes ``$LT$``, ``$u7b$``… and ``..`` (``::``) in a demangled legacy Rust path.

    Only Rust names get here, so only they pay for importing ``re``.
    """
    import re

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        return _RUST_ESCAPES.get(code) or chr(int(code[1:], 16))

    parts = []
    for part in text.split("::"):
        part = part.removeprefix("_") if part.startswith("_$") else part
        parts.append(re.sub(_RUST_ESCAPE, replace, part).replace("..", "::"))
    return "::".join(parts)


@lru_cache(maxsize=1)
def _demangler() -> tuple[Callable[..., int | None], Callable[[int], object]] | None:
    """``__cxa_demangle`` and ``free`` from the C++ runtime, or None if there is none."""
    import ctypes
    import ctypes.util

    for candidate in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        if not candidate:
            continue
        try:
            library = ctypes.CDLL(candidate)
        except OSError:
            continue
        function = library.__cxa_demangle
        function.restype = ctypes.c_void_p
        function.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_int),
        ]
        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
        return function, free
    return None


def _cxa_demangle(mangled: str) -> str | None:
    import ctypes

    functions = _demangler()
    if functions is None:
        return None
    function, free = functions
    status = ctypes.c_int(0)
    pointer = function(mangled.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not pointer:
        return None
    try:
        return ctypes.string_at(pointer).decode("utf-8", "replace")
    finally:
        free(pointer)
