"""What was loaded where, for cores without NT_FILE: the dynamic linker's own list.

QEMU user-mode cores and some gdb cores carry no NT_FILE note.  The program
still says what it loaded: its dynamic section's DT_DEBUG entry points to the
``struct r_debug`` of the dynamic linker (glibc ``<link.h>``), whose
``r_map`` starts the ``struct link_map`` chain with every object's name, load
base (``l_addr``) and dynamic section (``l_ld``).  All of it is read from core
memory, so the walk is bounded and stops on a cycle.  The files found for
these objects are turned into :class:`Mapping` records from their PT_LOAD
headers, so the rest of liveunwind sees the same kind of mappings as from
/proc/PID/maps.
"""

from __future__ import annotations

import struct
from collections import namedtuple

from liveunwind.arch import ReadMemory
from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.formats.elf import PT_DYNAMIC, PT_LOAD, ElfImage
from liveunwind.targets import linkedlist
from liveunwind.targets.base import Mapping

DT_NULL = 0
DT_DEBUG = 21
PAGE_SIZE = 4096
#: Most link_map entries followed (real programs load at most a few thousand objects).
MAX_OBJECTS = 8192
#: Most dynamic-section entries read looking for DT_DEBUG.
_MAX_DYNAMIC_ENTRIES = 4096
_MAX_NAME = 4096
#: ``struct r_debug``: int r_version (padded to 8), then ``struct link_map *r_map``.
_R_MAP = 8
#: ``struct link_map``: l_addr, l_name, l_ld, l_next (and l_prev, not needed).
_LINK_MAP = struct.Struct("<QQQQ")


class LoadedObject(namedtuple("LoadedObject", "name base dynamic")):
    """One entry of the dynamic linker's list."""

    __slots__ = ()
    name: str
    #: ``l_addr``: the load bias (runtime minus link-time addresses).
    base: int
    #: ``l_ld``: the runtime address of its dynamic section.
    dynamic: int


def first_link_map(read: ReadMemory, image: ElfImage, bias: int) -> int | None:
    """The head of the link_map chain, via the executable's DT_DEBUG, or None.

    None means there is no chain to walk: a static executable (no PT_DYNAMIC),
    no DT_DEBUG entry, or a dynamic linker that had not filled it in.
    """
    dynamic = image.segments_of_type(PT_DYNAMIC)
    if not dynamic:
        return None
    address = dynamic[0].vaddr + bias
    count = min(dynamic[0].memsz // 16, _MAX_DYNAMIC_ENTRIES)
    try:
        raw = read(address, count * 16)
    except MemoryReadError:
        return None
    for index in range(count):
        tag, value = struct.unpack_from("<qQ", raw, index * 16)
        if tag == DT_NULL:
            return None
        if tag == DT_DEBUG:
            if value == 0:
                return None
            try:
                (head,) = struct.unpack("<Q", read(value + _R_MAP, 8))
            except MemoryReadError:
                return None
            return head or None
    return None


def follow_link_map(read: ReadMemory, head: int) -> tuple[list[LoadedObject], list[str]]:
    """Every object on the chain starting at ``head``, and what went wrong on the way."""
    problems: list[str] = []
    objects = [
        LoadedObject(read_c_string(read, name_address), base, dynamic)
        for _, (base, name_address, dynamic, _next) in linkedlist.follow(
            read,
            head,
            _LINK_MAP,
            3,
            limit=MAX_OBJECTS,
            label="the link_map list",
            problems=problems,
        )
    ]
    return objects, problems


def read_c_string(read: ReadMemory, address: int, limit: int = _MAX_NAME) -> str:
    """A NUL-terminated string at ``address`` ("" if unreadable), read page by page."""
    collected = b""
    position = address
    while address and len(collected) < limit:
        size = min(PAGE_SIZE - position % PAGE_SIZE, limit - len(collected))
        try:
            chunk = read(position, size)
        except MemoryReadError:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            return (collected + chunk[:end]).decode("utf-8", "surrogateescape")
        collected += chunk
        position += size
    return collected.decode("utf-8", "surrogateescape")


def mappings_of_image(image: ElfImage, bias: int, path: str, inode: int) -> list[Mapping]:
    """The mappings the loader makes for ``image`` at ``bias``: its PT_LOADs, page-aligned.

    Each covers only the file-backed part of its segment (``p_filesz``): the
    rest (.bss) is anonymous memory, which the core holds when it matters.
    """
    mappings = []
    try:
        loads = image.segments_of_type(PT_LOAD)
    except FormatError:
        return []
    for header in loads:
        if header.filesz == 0:
            continue
        start = header.vaddr + bias
        page_start = start - start % PAGE_SIZE
        end = start + header.filesz
        page_end = end + (-end % PAGE_SIZE)
        if header.offset < start - page_start or page_end > 1 << 64:
            continue
        perms = "".join(
            letter if header.flags & bit else "-" for letter, bit in (("r", 4), ("w", 2), ("x", 1))
        )
        offset = header.offset - (start - page_start)
        mappings.append(Mapping(page_start, page_end, perms + "p", offset, inode, path))
    return mappings
