"""The reads of one walk of an interpreter: fetched ahead in batches, served from where they lie.

A walk follows pointers level by level (thread states, frame stacks, code
objects, names); :class:`Memory` lets a target fetch a whole level in one
request, and, for a live process, the stop fetch everything the walk before
it read — its *plan* (:mod:`~liveunwind.cpython.plan`) — with one system
call.  Ranges that nearly touch are fetched as one (:func:`coalesce`): a few
larger requests cost less than many small ones.
"""

from __future__ import annotations

import bisect

from liveunwind.arch.base import WORD_MASK
from liveunwind.errors import MemoryReadError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    Read = Callable[[int, int], bytes]
    ReadMany = Callable[[list[tuple[int, int]]], list[bytes | None]]
    #: Memory as fetched: bytes, or the bytearray the kernel wrote into.
    Data = bytes | bytearray
    #: Ranges and what was read of each (None: unreadable).
    Fetched = tuple[list[tuple[int, int]], Sequence[Data | None]]

#: Largest used part of a thread's frame stack chunk fetched in one piece.
MAX_CHUNK_PREFETCH = 1 << 20


class Memory:
    """The reads of one walk: ranges fetched ahead in batches, single reads otherwise.

    ``read_many(ranges)`` (one result per ``(address, size)`` range: its
    bytes, or None where it cannot be read) lets a target fetch a whole
    level of the walk — every thread's frame stack, every code object — in
    one request instead of one per object.  Without it every read goes to
    ``read`` as it comes.  A range fetched ahead serves any read inside it;
    ranges closer than :data:`COALESCE_GAP` are fetched as one.
    """

    def __init__(self, read: Read, read_many: ReadMany | None = None) -> None:
        self._read = read
        self._read_many = read_many
        self._starts: list[int] = []
        self._blocks: list[tuple[int, Data]] = []
        self._last: tuple[int, Data] = (0, b"")
        #: Reads :meth:`after_stop`'s reader had to take from the running process.
        self.late = 0

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Fetches ``ranges`` in one request, leaving out those already fetched."""
        if self._read_many is None or not ranges:
            return
        self.fetch(
            coalesce(
                [
                    (start, size)
                    for start, size in ranges
                    if start + size <= END and not self.holds(start, size)
                ]
            )
        )

    def fetch(self, ranges: list[tuple[int, int]]) -> None:
        """Fetches ``ranges`` — sorted, coalesced, in the address space — as they are.

        The plan a walk leaves for the next one is all that already: in the
        stop it goes to the target without being looked at again.
        """
        if self._read_many is not None and ranges:
            self.take(ranges, self._read_many(ranges))

    def take(self, ranges: list[tuple[int, int]], results: Sequence[Data | None]) -> None:
        """Keeps what was read of ``ranges`` (sorted, disjoint): one result per range, or None."""
        fetched = [(start, data) for (start, _), data in zip(ranges, results) if data is not None]
        self._blocks = sorted([*self._blocks, *fetched]) if self._blocks else fetched
        self._starts = [start for start, _ in self._blocks]

    def locate_kept(self, address: int, size: int) -> tuple[Data, int]:
        """``locate``, keeping what was not fetched yet: later reads inside it see these bytes."""
        if not self.holds(address, size):
            data = self._read(address, size)
            self._blocks = sorted([*self._blocks, (address, data)])
            self._starts = [start for start, _ in self._blocks]
        return self.locate(address, size)

    def after_stop(self, frozen: Read, live: Read, frozen_many: ReadMany) -> None:
        """From now on reads the stop's copy (``frozen``), and what it lacks from ``live``.

        Each read the copy could not answer counts in :attr:`late`, for the
        walk to say which of what it shows is not of the stop's instant.
        """

        def read(address: int, size: int) -> bytes:
            try:
                return frozen(address, size)
            except MemoryReadError:
                self.late += 1
                return live(address, size)

        self._read = read
        self._read_many = frozen_many

    def holds(self, address: int, size: int) -> bool:
        """Whether a fetched block holds all of the range (the nearest block below it)."""
        index = bisect.bisect_right(self._starts, address) - 1
        if index < 0:
            return False
        start, data = self._blocks[index]
        return address + size <= start + len(data)

    def read(self, address: int, size: int) -> bytes:
        data, offset = self.locate(address, size)
        if type(data) is not bytes:
            return bytes(memoryview(data)[offset : offset + size])
        return data[offset : offset + size] if offset or len(data) != size else data

    def locate(self, address: int, size: int) -> tuple[Data, int]:
        """Where the ``size`` bytes at ``address`` are: a fetched block and their offset in it.

        Lets a walk unpack a structure where it lies instead of copying it out first.
        """
        start, data = self._last
        offset = address - start
        if offset >= 0 and offset + size <= len(data):
            return data, offset
        if address + size > END:  # a pointer plus an offset, from corrupt memory
            raise MemoryReadError(address & WORD_MASK, size, "beyond the address space")
        index = bisect.bisect_right(self._starts, address) - 1
        while index >= 0:  # blocks may overlap: the nearest ones below ``address`` first
            start, data = self._blocks[index]
            offset = address - start
            if offset + size <= len(data):
                self._last = self._blocks[index]
                return data, offset
            if offset >= MAX_CHUNK_PREFETCH:
                break
            index -= 1
        return self._read(address, size), 0


#: One past the last address: pointers read from the target plus offsets may pass it.
END = WORD_MASK + 1
#: Ranges this close are fetched as one: fewer, larger requests cost less than many.
COALESCE_GAP = 1024
#: Largest range coalescing may make.
MAX_COALESCED = 64 << 10


def coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` sorted, with those that overlap or nearly touch joined (up to MAX_COALESCED)."""
    joined: list[list[int]] = []
    for start, size in sorted(set(ranges)):
        end = start + size
        if (
            joined
            and start - joined[-1][1] <= COALESCE_GAP
            and end - joined[-1][0] <= MAX_COALESCED
        ):
            joined[-1][1] = max(joined[-1][1], end)
        else:
            joined.append([start, end])
    return [(start, end - start) for start, end in joined]
