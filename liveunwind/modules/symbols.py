"""Symbol tables: address → function name, and demangling of C++ and Rust names.

A table is built once per module, lazily, the first time a pc in it is
symbolized: only function-like symbols are kept, as parallel sorted lists
(addresses, ends, name offsets), and names are decoded only when asked for.
"""

from __future__ import annotations

import bisect
import re
import struct
from dataclasses import dataclass
from functools import lru_cache

from liveunwind.modules.elf import ElfImage, c_string

SHT_SYMTAB = 2
SHT_DYNSYM = 11
_STT_FUNC = 2
_STT_GNU_IFUNC = 10
_STB_GLOBAL = 1
_STB_WEAK = 2
_SYMBOL_SIZE = 24
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
#: LLVM's tag on internal-linkage copies (``.llvm.123…``): noise to a reader.
_LLVM_SUFFIX = re.compile(r"\.llvm\.\d+$")


@dataclass(frozen=True, slots=True)
class SymbolMatch:
    """The function containing an address, and the distance from its start."""

    name: str
    offset: int
    size: int


class SymbolTable:
    """The function symbols of one module, searchable by link-time address.

    Several images can contribute: the module's own file and its separate
    debug file or MiniDebugInfo, which share link-time addresses.
    """

    def __init__(self, *images: ElfImage) -> None:
        self._strings: dict[int, memoryview] = {}
        entries: dict[int, tuple[int, int, int, int]] = {}
        for image in images:
            self._collect_image(image, entries)
        ordered = sorted(entries.items())
        self._addresses = [address for address, _ in ordered]
        self._records = [record for _, record in ordered]

    def _collect_image(
        self, image: ElfImage, entries: dict[int, tuple[int, int, int, int]]
    ) -> None:
        headers = image.section_headers
        for section in headers:
            if section.type not in (SHT_SYMTAB, SHT_DYNSYM) or section.link >= len(headers):
                continue
            symbols = image.contents(section)
            strings = image.contents(headers[section.link])
            if symbols is None or strings is None:
                continue
            self._collect(image.byte_order, symbols, strings, section.type == SHT_SYMTAB, entries)

    def _collect(
        self,
        order: str,
        symbols: memoryview,
        strings: memoryview,
        is_symtab: bool,
        entries: dict[int, tuple[int, int, int, int]],
    ) -> None:
        """Adds function symbols; per address the best-ranked name wins.

        Rank prefers .symtab over .dynsym (it has local functions too), then
        global over weak over local bindings, as debuggers do.
        """
        usable = len(symbols) - len(symbols) % _SYMBOL_SIZE
        table_id = id(strings)
        self._strings[table_id] = strings
        for name, info, _other, shndx, value, size in struct.iter_unpack(
            order + "IBBHQQ", symbols[:usable]
        ):
            kind = info & 0xF
            if kind not in (_STT_FUNC, _STT_GNU_IFUNC) or shndx == 0 or value == 0:
                continue
            binding = info >> 4
            rank = (2 if is_symtab else 0) + (
                2 if binding == _STB_GLOBAL else 1 if binding == _STB_WEAK else 0
            )
            current = entries.get(value)
            if current is None or rank > current[3]:
                entries[value] = (size, name, table_id, rank)

    def lookup(self, address: int) -> SymbolMatch | None:
        """The function whose range holds ``address`` (a sized symbol, or the nearest unsized)."""
        index = bisect.bisect_right(self._addresses, address) - 1
        if index < 0:
            return None
        start = self._addresses[index]
        size, name_offset, table_id, _rank = self._records[index]
        if size and address >= start + size:
            return None
        name = c_string(self._strings[table_id], name_offset, missing="?")
        return SymbolMatch(name=name, offset=address - start, size=size)

    def __len__(self) -> int:
        return len(self._addresses)


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
    readable = _cxa_demangle(_LLVM_SUFFIX.sub("", name))
    if readable is None:
        return name
    if _RUST_HASH.search(readable):
        readable = _unescape_rust_legacy(_RUST_HASH.sub("", readable))
    return readable


#: Rust's legacy mangling spells characters an Itanium name cannot hold as ``$..$``.
_RUST_ESCAPES = {
    "SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ",",
}  # fmt: skip
_RUST_ESCAPE = re.compile(r"\$(SP|BP|RF|LT|GT|LP|RP|C|u[0-9a-f]{2,6})\$")


def _unescape_rust_legacy(text: str) -> str:
    """Decodes ``$LT$``, ``$u7b$``… and ``..`` (``::``) in a demangled legacy Rust path."""

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        return _RUST_ESCAPES.get(code) or chr(int(code[1:], 16))

    parts = []
    for part in text.split("::"):
        part = part.removeprefix("_") if part.startswith("_$") else part
        parts.append(_RUST_ESCAPE.sub(replace, part).replace("..", "::"))
    return "::".join(parts)


@lru_cache(maxsize=1)
def _demangler() -> tuple[object, object] | None:
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
