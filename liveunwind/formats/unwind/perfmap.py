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
from array import array
from collections import namedtuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: Lines read at most, well-formed or not (the file is written by the target and may be huge).
MAX_PERF_MAP_LINES = 1 << 20
#: Entries a :class:`PerfMap` keeps: 35 MiB of them with 45-character names (a merge
#: needs about 50 MiB more for a moment).  Lines past it are not read,
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
    fields = _fields(line)
    return None if fields is None else JitRange(*fields, _SOURCE)


def _fields(line: str) -> tuple[int, int, str] | None:
    """(start, end, name) of one line, or None."""
    parts = line.strip().split(None, 2)
    if len(parts) != 3:
        return None
    try:
        start, size = int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None
    if size <= 0 or start < 0 or start + size >= _ADDRESS_END:
        return None
    return start, start + size, parts[2]


def parse_perf_map(text: str) -> list[JitRange]:
    """The entries of a perf map's text, in file order.

    Malformed lines are skipped; at most :data:`MAX_PERF_MAP_LINES` lines are read.
    """
    found = (parse_perf_line(line) for line in text.splitlines()[:MAX_PERF_MAP_LINES])
    return [entry for entry in found if entry is not None]


#: One entry as a block keeps it: (start, line number, end, name).
_Row = tuple[int, int, int, str]


class _Block:
    """Entries sorted by (start, line number), searchable by address.

    ``max_ends[i]`` is the highest end among the first ``i + 1``: a search
    walks back from the last start at or below the address while an earlier
    entry can still reach it.  Numbers are kept in arrays, a name per entry
    as its string: about 130 bytes an entry with a 45-character name, where
    a list of JitRange took 300.
    """

    __slots__ = ("ends", "max_ends", "names", "numbers", "starts")

    def __init__(self, rows: list[_Row]) -> None:
        rows.sort()  # (start, number) is unique: ends and names are never compared
        self.starts = array("Q", [row[0] for row in rows])
        self.numbers = array("Q", [row[1] for row in rows])
        self.ends = array("Q", [row[2] for row in rows])
        self.names = [row[3] for row in rows]
        self.max_ends = array("Q", itertools.accumulate(self.ends, max))

    def __len__(self) -> int:
        return len(self.names)

    def rows(self) -> list[_Row]:
        return list(zip(self.starts, self.numbers, self.ends, self.names, strict=True))

    def best(self, pc: int, visible: int) -> tuple[int, int, int] | None:
        """(start, number, index) of the latest-starting entry holding ``pc``, latest line first.

        Only lines numbered below ``visible`` count.
        """
        index = bisect.bisect_right(self.starts, pc) - 1
        while index >= 0 and self.max_ends[index] > pc:
            number = self.numbers[index]
            if pc < self.ends[index] and number < visible:
                return self.starts[index], number, index
            index -= 1
        return None

    def entry(self, index: int) -> JitRange:
        return JitRange(self.starts[index], self.ends[index], self.names[index], _SOURCE)


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
        found = (_fields(line) for line in lines)
        self._add([fields for fields in found if fields is not None], settle)

    def add(self, entries: Iterable[JitRange], *, settle: bool = True) -> None:
        """Adds ``entries``, the next ones in file order (up to the bound)."""
        self._add([(entry.start, entry.end, entry.name) for entry in entries], settle)

    def _add(self, found: list[tuple[int, int, str]], settle: bool) -> None:
        room = max(MAX_PERF_MAP_ENTRIES - self.count, 0)
        rows = [
            (start, number, end, name)
            for number, (start, end, name) in enumerate(found[:room], start=self.count)
        ]
        if rows:
            self.count += len(rows)
            self._blocks.append(_Block(rows))
        if settle:
            self.settle()

    def settle(self) -> None:
        """Merges the last blocks while the last is as large as the one before it."""
        blocks = self._blocks
        while len(blocks) >= 2 and len(blocks[-1]) >= len(blocks[-2]):
            last = blocks.pop()
            blocks[-1] = _Block(blocks[-1].rows() + last.rows())

    def view(self) -> PerfMapView:
        """The entries taken so far, as one backtrace sees them (later additions unseen)."""
        return PerfMapView(self, self.count)

    def range_for(self, pc: int, visible: int) -> JitRange | None:
        """See :meth:`PerfMapView.range_for`; only lines numbered below ``visible`` count."""
        best: tuple[int, int, _Block, int] | None = None
        for block in self._blocks:
            hit = block.best(pc, visible)
            if hit is not None and (best is None or hit[:2] > best[:2]):
                best = (hit[0], hit[1], block, hit[2])
        return None if best is None else best[2].entry(best[3])

    def entries(self, visible: int) -> list[JitRange]:
        """The entries numbered below ``visible``, in file order."""
        rows = sorted((row[1], row) for block in self._blocks for row in block.rows())
        return [
            JitRange(start, end, name, _SOURCE)
            for number, (start, _, end, name) in rows
            if number < visible
        ]


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
