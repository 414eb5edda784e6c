"""perf maps kept as they grow: the sorted blocks, views, bounds, and the file read on.

The files are written here, in a temporary directory standing for the
target's root.  A session reading a real JIT's map as it grows is in
tests/system/test_jit.py.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from liveunwind.formats.unwind import perfmap
from liveunwind.formats.unwind.perfmap import JitRange, PerfMap, PerfMapView, parse_perf_map
from liveunwind.modules.perfmapfile import PerfMapFile
from liveunwind.targets import files

PATH = "/tmp/perf-42.map"


def line(start: int, size: int, name: str) -> str:
    return f"{start:x} {size:x} {name}\n"


def test_the_latest_start_names_a_pc_and_of_those_the_latest_line() -> None:
    perf = PerfMap()
    perf.add_text(line(0x1000, 0x1000, "outer") + line(0x1400, 0x100, "inner"))
    perf.add_text(line(0x3000, 0x100, "old"))
    perf.add_text(line(0x3000, 0x100, "new") + "garbage\n" + line(0x5000, 0, "empty"))
    view = perf.view()
    assert view.range_for(0x1410) == JitRange(0x1400, 0x1500, "inner", "perf-map")
    assert view.range_for(0x1500).name == "outer"  # type: ignore[union-attr]
    assert view.range_for(0x3010).name == "new"  # type: ignore[union-attr]
    assert view.range_for(0x3100) is None and view.range_for(0xFFF) is None
    assert [entry.name for entry in view.entries()] == ["outer", "inner", "old", "new"]
    assert perf.lines == 6 and perf.count == 4


def test_a_view_does_not_see_what_was_added_after_it() -> None:
    perf = PerfMap()
    perf.add_text(line(0x3000, 0x100, "before"))
    before = perf.view()
    for n in range(100):  # merges the block the view was taken over
        perf.add_text(line(0x3000, 0x100, f"after{n}"))
    assert before.range_for(0x3000).name == "before"  # type: ignore[union-attr]
    assert perf.view().range_for(0x3000).name == "after99"  # type: ignore[union-attr]
    assert len(before) == 1 and len(before.entries()) == 1


def test_blocks_stay_few_and_lookups_agree_with_a_whole_parse() -> None:
    perf = PerfMap()
    text = "".join(line(0x10000 + (n * 7919 % 5000) * 0x40, 0x40, f"f{n}") for n in range(5000))
    lines = text.splitlines(keepends=True)
    for first in range(0, len(lines), 3):  # appended three lines at a time
        perf.add_text("".join(lines[first : first + 3]))
    assert len(perf._blocks) <= 13  # about log2(5000): each block at most half the one before
    whole = parse_perf_map(text)
    view = perf.view()
    assert view.entries() == whole
    for pc in range(0x10000, 0x10000 + 5000 * 0x40, 0x1F3):
        covering = [entry for entry in whole if entry.start <= pc < entry.end]
        assert view.range_for(pc) == (covering[-1] if covering else None)


def test_overlapping_entries_added_in_pieces_agree_with_every_line_at_once() -> None:
    """Nested, overlapping, reused ranges: each view names a pc as a search of its lines would."""
    rng = random.Random(29)
    perf = PerfMap()
    lines: list[tuple[int, int, str]] = []
    views: list[tuple[PerfMapView, int]] = []
    for piece in range(300):
        added = [
            (start, rng.choice((1, 0x10, 0x100, 0x1000)), f"f{piece}.{n}")
            for n, start in enumerate(rng.sample(range(0, 0x4000, 8), rng.randint(1, 12)))
        ]
        lines.extend(added)
        perf.add_text("".join(line(*entry) for entry in added), settle=piece % 3 != 0)
        views.append((perf.view(), len(lines)))
    for view, visible in views[::37] + views[-1:]:
        for pc in range(0, 0x5000, 0x33):
            covering = [
                (start, number, name)
                for number, (start, size, name) in enumerate(lines[:visible])
                if start <= pc < start + size
            ]
            expected = max(covering)[2] if covering else None
            found = view.range_for(pc)
            assert (found and found.name) == expected, (hex(pc), visible)


def test_an_unsettled_addition_is_merged_by_the_next_settled_one() -> None:
    perf = PerfMap()
    perf.add_text("".join(line(n * 0x100, 0x10, f"f{n}") for n in range(64)))
    for n in range(5):
        perf.add_text(line(0x9000 + n, 1, f"tail{n}"), settle=False)
    assert len(perf._blocks) == 6
    perf.add_text(line(0xA000, 1, "next"))
    assert len(perf._blocks) <= 2
    assert perf.view().range_for(0x9004).name == "tail4"  # type: ignore[union-attr]


def test_past_the_bound_no_more_is_taken_and_the_view_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(perfmap, "MAX_PERF_MAP_ENTRIES", 10)
    perf = PerfMap()
    perf.add_text("".join(line(n * 0x100, 0x10, f"f{n}") for n in range(8)))
    perf.add_text("".join(line(n * 0x100, 0x10, f"g{n}") for n in range(8, 16)))
    assert perf.full and perf.count == 10
    view = perf.view()
    assert view.range_for(0x900).name == "g9"  # type: ignore[union-attr]
    assert view.range_for(0xA00) is None  # unnamed, not misnamed
    assert view.problems == [
        "perf map: 10 entries in 16 lines read, the rest not (at most 10 entries, 1048576 lines)"
    ]


def test_a_view_of_ranges_parsed_whole() -> None:
    view = PerfMapView.of(parse_perf_map(line(0x10, 0x10, "a") + line(0x18, 4, "b")))
    assert view.range_for(0x19).name == "b" and view.range_for(0x1C).name == "a"  # type: ignore[union-attr]


# -- the file, read on --------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "tmp").mkdir()
    return tmp_path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(size asked, offset) of every read of a file opened by path."""
    found: list[tuple[int, int]] = []
    pread = files.RegularFile.pread

    def recorded(self: files.RegularFile, size: int, offset: int) -> bytes:
        found.append((size, offset))
        return pread(self, size, offset)

    monkeypatch.setattr(files.RegularFile, "pread", recorded)
    return found


def names(view: PerfMapView) -> list[str]:
    return [entry.name for entry in view.entries()]


def test_only_what_was_appended_is_read(root: Path, reads: list[tuple[int, int]]) -> None:
    perf_map = root / PATH.lstrip("/")
    perf_map.write_text(line(0x1000, 0x10, "a") + line(0x2000, 0x10, "b"))
    known = PerfMapFile(str(root), PATH)
    assert names(known.update(1 << 20)) == ["a", "b"]
    first = perf_map.stat().st_size
    with perf_map.open("a") as appending:
        appending.write(line(0x3000, 0x10, "c"))
    assert names(known.update(1 << 20)) == ["a", "b", "c"]
    assert names(known.update(1 << 20)) == ["a", "b", "c"]  # nothing new: nothing parsed
    # The second read starts just before where the first ended (the bytes
    # checked to be unchanged), not at the start.
    assert reads[0] == (1 << 20, 0) and reads[1][1] == first - perfmap_checked(first)


def perfmap_checked(offset: int) -> int:
    from liveunwind.modules.perfmapfile import PERF_MAP_CHECKED

    return min(offset, PERF_MAP_CHECKED)


def test_a_line_being_written_is_taken_once_complete(root: Path) -> None:
    perf_map = root / PATH.lstrip("/")
    perf_map.write_text(line(0x1000, 0x10, "a") + "2000 1")  # "2000 10 b" half written
    known = PerfMapFile(str(root), PATH)
    view = known.update(1 << 20)
    assert names(view) == ["a"] and view.range_for(0x2000) is None
    with perf_map.open("a") as appending:
        appending.write("0 b\n")
    assert known.update(1 << 20).range_for(0x200F).name == "b"  # type: ignore[union-attr]


def test_each_update_reads_at_most_its_limit(root: Path) -> None:
    perf_map = root / PATH.lstrip("/")
    text = "".join(line(0x1000 + n * 0x10, 0x10, f"f{n:03}") for n in range(100))
    perf_map.write_text(text)
    known = PerfMapFile(str(root), PATH)
    counts = [len(known.update(100)) for _ in range(3)]
    assert counts == [7, 14, 21]  # 14-byte lines, a partial one left for the next read
    assert len(known.update(len(text))) == 100


def test_a_line_longer_than_a_read_is_skipped(root: Path) -> None:
    perf_map = root / PATH.lstrip("/")
    perf_map.write_text("x" * 500 + "\n" + line(0x1000, 0x10, "a"))
    known = PerfMapFile(str(root), PATH)
    for _ in range(8):
        view = known.update(100)
    assert names(view) == ["a"]


@pytest.mark.parametrize("how", ["shrunk", "replaced", "rewritten in place"])
def test_a_map_that_is_not_just_appended_to_is_read_anew(root: Path, how: str) -> None:
    perf_map = root / PATH.lstrip("/")
    # Lines enough that the bytes checked before the read position are all the same ones.
    same = "".join(line(0x8000 + n * 0x10, 0x10, f"same{n}") for n in range(8))
    perf_map.write_text(line(0x1000, 0x10, "old") + same)
    known = PerfMapFile(str(root), PATH)
    assert names(known.update(1 << 20))[0] == "old"
    if how == "shrunk":
        perf_map.write_text(line(0x1000, 0x10, "new"))
    elif how == "replaced":  # another file, the same bytes before the read position
        other = root / "tmp" / "next"
        other.write_text(line(0x1000, 0x10, "new") + same + line(0x2000, 0x10, "more"))
        os.replace(other, perf_map)
    else:  # the same file, other bytes just before the read position
        with perf_map.open("r+") as rewriting:
            rewriting.write(line(0x1000, 0x10, "new") + same[:-2] + "X\n" + line(0x2000, 1, "more"))
    view = known.update(1 << 20)
    assert view.range_for(0x1000).name == "new"  # type: ignore[union-attr]
    assert names(view).count("new") == 1 and "old" not in names(view)


@pytest.mark.parametrize("how", ["removed", "a fifo", "a directory"])
def test_a_map_that_is_gone_names_nothing(root: Path, how: str) -> None:
    perf_map = root / PATH.lstrip("/")
    perf_map.write_text(line(0x1000, 0x10, "a"))
    known = PerfMapFile(str(root), PATH)
    assert len(known.update(1 << 20)) == 1
    perf_map.unlink()
    if how == "a fifo":
        os.mkfifo(perf_map)
    elif how == "a directory":
        perf_map.mkdir()
    assert len(known.update(1 << 20)) == 0
    assert len(PerfMapFile(str(root), None).update(1 << 20)) == 0  # no path could be told
