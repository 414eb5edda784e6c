"""A frozen copy of a live process: registers and the live part of every stack.

The process only has to stay stopped while this copy is taken — a handful of
system calls — and runs again while liveunwind does the slow part, the
unwinding.  Reads outside the copied stacks go to the (running) process:
they are code, read-only data and unwind tables, which do not change while
it runs.  The one blind spot is writable memory outside the stacks, which
the stepper reads only for unusual frames (e.g. a stack switched by
``sigaltstack``); ``--no-snapshot`` keeps the process stopped instead.
"""

from __future__ import annotations

import bisect
import struct

from liveunwind.errors import MemoryReadError
from liveunwind.targets import syscalls

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

    from liveunwind.targets.base import Mapping, ThreadState
    from liveunwind.targets.ptrace import PtraceProcess

#: Default cap on the bytes copied per thread stack.
DEFAULT_STACK_CAP = 16 << 20
_unpack_word = struct.Struct("<Q").unpack_from


class StackCopy:
    """The bytes of target memory from ``start`` on, as they were at the snapshot."""

    __slots__ = ("data", "end", "start")

    def __init__(self, start: int, data: bytes) -> None:
        self.start = start
        self.data = data
        self.end = start + len(data)


class Snapshot:
    """AddressSpace of a process as it was at one instant."""

    def __init__(
        self,
        live: PtraceProcess,
        threads: list[ThreadState],
        mappings: list[Mapping],
        stacks: list[StackCopy],
    ) -> None:
        self.pid = live.pid
        self.arch = live.arch
        self._live = live
        self._threads = threads
        self._mappings = mappings
        self._stacks = sorted(stacks, key=lambda copy: copy.start)
        self._starts = [copy.start for copy in self._stacks]
        #: The copy the last word came from: the stepper reads one stack at a time.
        self._last = StackCopy(0, b"")

    @classmethod
    def capture(cls, live: PtraceProcess, *, stack_cap: int = DEFAULT_STACK_CAP) -> Snapshot:
        """Copies registers, mappings and every thread's live stack with one batch of reads."""
        threads = live.threads()
        mappings = live.mappings()
        starts = [mapping.start for mapping in mappings]
        ranges = []
        for thread in threads:
            sp = thread.registers.get(live.arch.sp, 0)
            index = bisect.bisect_right(starts, sp) - 1
            if index < 0 or sp >= mappings[index].end:
                continue
            mapping = mappings[index]
            start = max(mapping.start, sp - live.arch.red_zone)
            end = min(mapping.end, sp + stack_cap)
            ranges.append((start, end - start))
        ranges = _merge(ranges)
        copies = [
            StackCopy(start, data)
            for (start, _), data in zip(ranges, syscalls.read_remote(live.pid, ranges))
            if data is not None
        ]
        return cls(live, threads, mappings, copies)

    def threads(self) -> list[ThreadState]:
        return self._threads

    def mappings(self) -> list[Mapping]:
        return self._mappings

    def read(self, address: int, size: int) -> bytes:
        index = bisect.bisect_right(self._starts, address) - 1
        if index >= 0:
            copy = self._stacks[index]
            if address + size <= copy.end:
                offset = address - copy.start
                return copy.data[offset : offset + size]
            if address < copy.end:
                raise MemoryReadError(address, size, "beyond the copied part of the stack")
        return self._live.read(address, size)

    def read_word(self, address: int) -> int:
        """The little-endian word at ``address``; the stepper's fast path for saved registers."""
        copy = self._last
        if not (copy.start <= address and address + 8 <= copy.end):
            index = bisect.bisect_right(self._starts, address) - 1
            if index < 0 or address + 8 > self._stacks[index].end:
                return _unpack_word(self.read(address, 8))[0]
            copy = self._last = self._stacks[index]
        return _unpack_word(copy.data, address - copy.start)[0]

    def open_mapped_file(self, mapping: Mapping) -> BinaryIO | None:
        return self._live.open_mapped_file(mapping)

    @property
    def copied_bytes(self) -> int:
        return sum(len(copy.data) for copy in self._stacks)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merges overlapping (start, size) ranges so no byte is copied twice."""
    merged: list[list[int]] = []
    for start, size in sorted(ranges):
        end = start + size
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end - start) for start, end in merged]
