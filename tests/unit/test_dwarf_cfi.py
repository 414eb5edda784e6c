"""The DWARF CFI decoder on random bytes: only FormatError may come out.

The decoder against readelf, on objects built from tests/data/cfi/*.s and on
this machine's libraries, is tests/system/test_dwarf_cfi.py.
"""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from liveunwind.errors import FormatError
from liveunwind.formats.unwind.dwarf_cfi import CfiTable, Fde


def _exercise(table: CfiTable) -> None:
    """Everything a consumer might call; only FormatError may come out."""
    for entry in table.entries():
        if isinstance(entry, Fde):
            table.rows(entry)
            table.rule_for(entry.pc_begin)
    for pc in range(0x1000, 0x1100, 7):
        table.rule_for(pc)


@settings(max_examples=200, deadline=2000)
@given(data=st.binary(max_size=300), kind=st.sampled_from(["eh_frame", "debug_frame"]))
def test_random_sections(data: bytes, kind: str) -> None:
    with contextlib.suppress(FormatError):
        _exercise(CfiTable(data, 0x1000, kind=kind))
