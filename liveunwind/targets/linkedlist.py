"""Following a singly linked list of records in untrusted target memory.

Loaders, libunwind and the GDB JIT interface all chain their records
through ``next`` pointers in the target. A corrupt or hostile list may loop,
be endless or point at unmapped memory: following it stops at a repeated
address, at ``limit`` records, or where memory cannot be read, and says
which in ``problems``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from liveunwind.errors import MemoryReadError


def follow(
    read: Callable[[int, int], bytes],
    first: int,
    record: struct.Struct,
    next_field: int,
    *,
    limit: int,
    label: str,
    problems: list[str],
) -> Iterator[tuple[int, tuple[int, ...]]]:
    """Yields ``(address, fields)`` of each record from ``first`` on.

    ``fields[next_field]`` is the link to the next record; 0 ends the list.
    """
    seen: set[int] = set()
    address = first
    while address:
        if address in seen:
            problems.append(f"{label}: a cycle back to entry {address:#x}; stopped there")
            return
        if len(seen) >= limit:
            problems.append(f"{label}: more than {limit} entries; stopped")
            return
        seen.add(address)
        try:
            fields = record.unpack(read(address, record.size))
        except MemoryReadError as error:
            problems.append(f"{label}: cut at entry {address:#x}: {error}")
            return
        yield address, fields
        address = fields[next_field]
