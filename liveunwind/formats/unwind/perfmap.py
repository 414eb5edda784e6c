"""perf maps: the ``/tmp/perf-PID.map`` a JIT writes to name its code, and the record it gives.

Each line is ``START SIZE name`` with hex numbers.  A perf map names code and
nothing more (no unwind info); :class:`JitRange` is the record every way of
announcing JIT code produces, the perf map being the plainest of them.

A JIT appends to its perf map for as long as it runs (tens of thousands of
lines after minutes), so a session keeps what it parsed in a :class:`PerfMap`
and adds only the lines appended since: the map is never parsed or sorted
whole again, and a lookup stays a few binary searches however long it grows.
"""

from __future__ import annotations

import bisect
import itertools
from collections import namedtuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: Lines read at most, well-formed or not (the file is written by the target and may be huge).
MAX_PERF_MAP_LINES = 1 << 20
#: Entries a :class:`PerfMap` keeps: about 50 MB of them.  Lines past it are not read,
#: and the registry says so (the code they name goes unnamed, never misnamed).
MAX_PERF_MAP_ENTRIES = 1 << 18
_ADDRESS_END = 1 << 64
_SOURCE = "perf-map"


class JitRange(namedtuple("JitRange", "start end name source")):
    """Code a JIT announced: ``[start, end)``, its name and who announced it."""

    __slots__ = ()
    start: int
    end: int
    name: str
    #: ``libunwind`` (a DYNAMIC procedure), ``libunwind-table`` (a table of FDEs, named
    #: as a whole), ``gdb-jit`` (a function of a JIT object) or ``perf-map``.
    source: str


def parse_perf_line(line: str) -> JitRange | None:
    """The entry of one line, or None for a malformed one (the file is written by the target)."""
    parts = line.strip().split(None, 2)
    if len(parts) != 3:
        return None
    try:
        start, size = int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None
    if size <= 0 or start < 0 or start + size >= _ADDRESS_END:
        return None
    return JitRange(start, start + size, parts[2], _SOURCE)


def parse_perf_map(text: str) -> list[JitRange]:
    """The entries of a perf map's text, in file order.

    Malformed lines are skipped; at most :data:`MAX_PERF_MAP_LINES` lines are read.
    """
    found = (parse_perf_line(line) for line in text.splitlines()[:MAX_PERF_MAP_LINES])
    return [entry for entry in found if entry is not None]


class _Block:
    """Entries sorted by (start, line number), searchable by address.

    ``max_ends[i]`` is the highest end among the first ``i + 1``: a search
    walks back from the last start at or below the address while an earlier
    entry can still reach it.
    """

    __slots__ = ("entries", "max_ends", "numbers", "starts")

    def __init__(self, numbered: list[tuple[int, JitRange]]) -> None:
        # (start, number) is unique, so the sort never compares the entries themselves.
        ordered = sorted((entry.start, number, entry) for number, entry in numbered)
        self.starts = [start for start, _, _ in ordered]
        self.numbers = [number for _, number, _ in ordered]
        self.entries = [entry for _, _, entry in ordered]
        self.max_ends = list(itertools.accumulate((entry.end for entry in self.entries), max))

    def __len__(self) -> int:
        return len(self.entries)

    def numbered(self) -> list[tuple[int, JitRange]]:
        return list(zip(self.numbers, self.entries, strict=True))

    def best(self, pc: int, visible: int) -> tuple[int, int, JitRange] | None:
        """(start, number, entry) of the latest-starting entry holding ``pc``, latest line first.

        Only lines numbered below ``visible`` count.
        """
        index = bisect.bisect_right(self.starts, pc) - 1
        while index >= 0 and self.max_ends[index] > pc:
            entry, number = self.entries[index], self.numbers[index]
            if pc < entry.end and number < visible:
                return entry.start, number, entry
            index -= 1
        return None


class PerfMap:
    """The entries of one perf map, added as the file grows; numbered in file order.

    Each addition becomes a sorted block; blocks are merged like a binary
    counter (a block is merged into the one before it once it is as large),
    so there are at most about log2(entries) of them and each entry is
    re-sorted about log2(entries) times over the map's life.  An addition
    made while the target is stopped can leave the merging for later
    (``settle=False``): a merge can touch every entry.  At most
    :data:`MAX_PERF_MAP_ENTRIES` entries and :data:`MAX_PERF_MAP_LINES`
    lines are taken; past either the map is :attr:`full` and takes no more.
    """

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        #: Entries taken, and lines read (malformed ones too).
        self.count = 0
        self.lines = 0

    @property
    def full(self) -> bool:
        return self.count >= MAX_PERF_MAP_ENTRIES or self.lines >= MAX_PERF_MAP_LINES

    def add_text(self, text: str, *, settle: bool = True) -> None:
        """Adds the entries of complete lines ``text`` (up to the bounds)."""
        lines = text.splitlines()[: max(MAX_PERF_MAP_LINES - self.lines, 0)]
        self.lines += len(lines)
        found = (parse_perf_line(line) for line in lines)
        self.add([entry for entry in found if entry is not None], settle=settle)

    def add(self, entries: Iterable[JitRange], *, settle: bool = True) -> None:
        """Adds ``entries``, the next ones in file order (up to the bound)."""
        room = max(MAX_PERF_MAP_ENTRIES - self.count, 0)
        numbered = list(enumerate(list(entries)[:room], start=self.count))
        if numbered:
            self.count += len(numbered)
            self._blocks.append(_Block(numbered))
        if settle:
            self.settle()

    def settle(self) -> None:
        """Merges the last blocks while the last is as large as the one before it."""
        blocks = self._blocks
        while len(blocks) >= 2 and len(blocks[-1]) >= len(blocks[-2]):
            last = blocks.pop()
            blocks[-1] = _Block(blocks[-1].numbered() + last.numbered())

    def view(self) -> PerfMapView:
        """The entries taken so far, as one backtrace sees them (later additions unseen)."""
        return PerfMapView(self, self.count)

    def range_for(self, pc: int, visible: int) -> JitRange | None:
        """See :meth:`PerfMapView.range_for`; only lines numbered below ``visible`` count."""
        found = [block.best(pc, visible) for block in self._blocks]
        best = max((hit for hit in found if hit is not None), default=None)
        return None if best is None else best[2]

    def entries(self, visible: int) -> list[JitRange]:
        """The entries numbered below ``visible``, in file order."""
        numbered = [pair for block in self._blocks for pair in block.numbered()]
        return [entry for number, entry in sorted(numbered) if number < visible]


class PerfMapView:
    """The first ``count`` entries of a :class:`PerfMap`: what one backtrace names code with."""

    __slots__ = ("_perf_map", "count")

    def __init__(self, perf_map: PerfMap, count: int) -> None:
        self._perf_map = perf_map
        self.count = count

    @classmethod
    def of(cls, entries: Iterable[JitRange]) -> PerfMapView:
        """A view of just ``entries`` (a perf map parsed whole)."""
        perf_map = PerfMap()
        perf_map.add(entries)
        return perf_map.view()

    def __len__(self) -> int:
        return self.count

    def range_for(self, pc: int) -> JitRange | None:
        """The entry naming ``pc``: the latest-starting one holding it, of those the latest line.

        A JIT that frees code and puts new code at the same address appends
        a new line for it: the later line names the code there now.
        """
        return self._perf_map.range_for(pc, self.count) if self.count else None

    def entries(self) -> list[JitRange]:
        """Every entry, in file order."""
        return self._perf_map.entries(self.count)

    @property
    def problems(self) -> list[str]:
        perf_map = self._perf_map
        if not perf_map.full:
            return []
        return [
            f"perf map: {perf_map.count} entries in {perf_map.lines} lines read, "
            f"the rest not (at most {MAX_PERF_MAP_ENTRIES} entries, {MAX_PERF_MAP_LINES} lines)"
        ]
