"""perf maps: the ``/tmp/perf-PID.map`` a JIT writes to name its code, and the record it gives.

Each line is ``START SIZE name`` with hex numbers.  A perf map names code and
nothing more (no unwind info); :class:`JitRange` is the record every way of
announcing JIT code produces, the perf map being the plainest of them.
"""

from __future__ import annotations

from collections import namedtuple

#: Lines read at most (the file is written by the target and may be huge).
MAX_PERF_MAP_LINES = 1 << 20
_ADDRESS_END = 1 << 64


class JitRange(namedtuple("JitRange", "start end name source")):
    """Code a JIT announced: ``[start, end)``, its name and who announced it."""

    __slots__ = ()
    start: int
    end: int
    name: str
    #: ``libunwind`` (a DYNAMIC procedure), ``libunwind-table`` (a table of FDEs, named
    #: as a whole), ``gdb-jit`` (a function of a JIT object) or ``perf-map``.
    source: str


def parse_perf_map(text: str) -> list[JitRange]:
    """The entries of a perf map's text, in file order.

    Malformed lines are skipped (the file is written by the target); at most
    :data:`MAX_PERF_MAP_LINES` lines are read.
    """
    ranges = []
    for count, line in enumerate(text.splitlines()):
        if count >= MAX_PERF_MAP_LINES:
            break
        parts = line.strip().split(None, 2)
        if len(parts) != 3:
            continue
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            continue
        if size <= 0 or start < 0 or start + size >= _ADDRESS_END:
            continue
        ranges.append(JitRange(start, start + size, parts[2], "perf-map"))
    return ranges
