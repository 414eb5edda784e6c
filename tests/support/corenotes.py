"""Editing one note of a real core: the paths its NT_FILE records, as other machines write them.

Cores made in a container, or passed through tools, can record relative
paths (or paths that do not exist where the core is read).  The tests make
such cores from real kernel cores: a copy whose NT_FILE names are rewritten
in place, everything else byte for byte the kernel's.  A new name may not
be longer than the one it replaces (the note keeps its size, so no offset
in the core moves); the bytes a shorter name frees are zeros after the last
name, which readers of the note (gdb, eu-stack, liveunwind) never look at.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

NT_FILE = 0x46494C45
PT_NOTE = 4


def rewrite_file_note(core: Path, copy: Path, rename: Callable[[str], str]) -> list[str]:
    """Writes ``core`` to ``copy`` with every NT_FILE path ``p`` recorded as ``rename(p)``.

    Returns the new names, in the note's order.
    """
    data = bytearray(core.read_bytes())
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "a 64-bit little-endian ELF"
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for index in range(phnum):
        ptype, _flags, offset, _vaddr, _paddr, filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + index * phentsize
        )
        if ptype == PT_NOTE:
            names = _rewrite_notes(data, offset, offset + filesz, rename)
            if names is not None:
                copy.write_bytes(bytes(data))
                return names
    raise AssertionError(f"{core} has no NT_FILE note")


def _rewrite_notes(
    data: bytearray, position: int, end: int, rename: Callable[[str], str]
) -> list[str] | None:
    while position + 12 <= end:
        namesz, descsz, note_type = struct.unpack_from("<III", data, position)
        desc = position + 12 + (namesz + 3) // 4 * 4
        if note_type == NT_FILE:
            _rewrite_paths(data, desc, desc + descsz, rename)
            return _paths(data, desc, desc + descsz)
        position = desc + (descsz + 3) // 4 * 4
    return None


def _rewrite_paths(data: bytearray, start: int, end: int, rename: Callable[[str], str]) -> None:
    old = _paths(data, start, end)
    count = len(old)
    strings = start + 16 + 24 * count
    new = b"".join(rename(path).encode() + b"\0" for path in old)
    room = end - strings
    assert len(new) <= room, "a new name may not be longer than the one it replaces"
    data[strings:end] = new + bytes(room - len(new))


def _paths(data: bytearray, start: int, end: int) -> list[str]:
    (count,) = struct.unpack_from("<Q", data, start)
    strings = bytes(data[start + 16 + 24 * count : end])
    return [name.decode() for name in strings.split(b"\0")[:count]]
