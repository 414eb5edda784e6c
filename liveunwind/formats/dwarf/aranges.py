"""``.debug_aranges``: which compilation unit holds a pc (DWARF 2–5, §6.1.2).

A backtrace looks up a few dozen pcs, while a big library lists thousands
of ranges (Debian's libc debug file: 2,083 in 2,063 sets).  Building a
Python tuple per range and sorting them took 1.4 ms there (least of 50 on
this project's machine; medians 2.3–2.7 ms); so the usual layout — 32-bit
DWARF, 8-byte addresses in the host's byte order, no segments, sets padded
to 16 bytes, as GCC and clang write it — is read as one array of 16-byte
slots: the ranges' starts and lengths come out of it as two lists at C
speed (``memoryview.cast`` / ``tolist``), only the set headers are stepped
over in Python, and a lookup finds its slot by the sorted starts (0.77 ms
to read, least of 50).  Any other layout is read range by range.

A slot is a header, a range, a set's terminating (0, 0), or what follows it
(ignored); a lookup checks which before it answers.
"""

from __future__ import annotations

import bisect
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.formats.dwarf.forms import Buffer

#: Ranges read at most (the general reader; the array's size bounds the usual layout).
_MAX_RANGES = 1 << 24
#: Ranges with starts at or below a pc considered, nearest first (odd output nests them).
_LOOK_BACK = 8
_SLOT = 16
#: Answers kept.
_MAX_ANSWERS = 1 << 12


class Aranges:
    """The ranges of ``.debug_aranges``, searched by pc."""

    def __init__(self, data: Buffer | None, order: str) -> None:
        #: Per slot: the start and the length of its range (meaningless for other slots).
        self._starts: list[int] = []
        self._lengths: list[int] = []
        #: Per set: its first range slot, the slot after its last, its unit's offset.
        self._firsts: list[int] = []
        self._ends: list[int] = []
        self._units: list[int] = []
        self._sorted: list[int] = []
        self._listed: list[int] | None = None
        #: Answers so far: read-ahead and lookup both ask for each pc.
        self._answers: dict[int, int | None] = {}
        if data is not None and not self._read_slots(data, order):
            self._read_ranges(data, order)
        # Searched by start; starts of 0 (headers, terminators, and ranges of code the
        # linker dropped) are left out.  Sets list their ranges in address order mostly,
        # and so the sort has little to do.
        self._sorted = sorted(filter(None, self._starts))

    def _read_slots(self, data: Buffer, order: str) -> bool:
        """Reads the usual layout as an array of slots; False (nothing kept) for any other.

        ``tolist`` copies each value out with memcpy, so the section's
        alignment in its mapping does not matter; the byte order must be the host's.
        """
        if order != ("<" if sys.byteorder == "little" else ">"):
            return False
        end = len(data)
        size = end // _SLOT * _SLOT
        with memoryview(data) as whole, whole[:size] as view, view.cast("B").cast("Q") as words:
            starts = words[0::2].tolist()
            lengths = words[1::2].tolist()
        header = struct.Struct(order + "IHIBB").unpack_from
        firsts, ends, units = self._firsts, self._ends, self._units
        pos = 0
        while pos + 12 <= end:  # each set takes at least 16 bytes
            length, _version, unit, address_size, segment_size = header(data, pos)
            set_end = pos + 4 + length
            if (
                length == 0xFFFFFFFF
                or length < 8
                or set_end > end
                or (4 + length) % _SLOT
                or address_size != 8
                or segment_size != 0
            ):
                del firsts[:], ends[:], units[:]
                return False
            # Out of the sorted starts: a header is no range.
            starts[pos // _SLOT] = 0
            firsts.append(pos // _SLOT + 1)
            ends.append(set_end // _SLOT)
            units.append(unit)
            pos = set_end
        self._starts, self._lengths = starts, lengths
        return True

    def _read_ranges(self, data: Buffer, order: str) -> None:
        """Any layout, range by range: each range its own one-slot set."""
        header32 = struct.Struct(order + "IHIBB").unpack_from  # length, version, unit, sizes
        pair = {
            size: struct.Struct(order + code).iter_unpack for size, code in ((4, "II"), (8, "QQ"))
        }
        starts, lengths, units = self._starts, self._lengths, self._units
        pos, end = 0, len(data)
        while pos + 12 <= end and len(starts) < _MAX_RANGES:
            length, _version, unit_offset, address_size, segment_size = header32(data, pos)
            first = pos + 12
            if length == 0xFFFFFFFF:  # 64-bit DWARF: read the header again at its own sizes
                if pos + 24 > end:
                    break
                length, unit_offset = struct.unpack_from(order + "Q2xQ", data, pos + 4)
                address_size, segment_size = data[pos + 22], data[pos + 23]
                set_end, first = pos + 12 + length, pos + 24
            else:
                set_end = pos + 4 + length
            if length < 8 or set_end > end:
                break
            read_pairs = pair.get(address_size)
            if read_pairs is not None and segment_size == 0:
                size = 2 * address_size
                first += (pos - first) % size  # tuples are aligned from the set's start
                last = first + (set_end - first) // size * size
                for start, range_length in read_pairs(data[first:last]):
                    if start == 0 and range_length == 0:
                        break
                    if range_length:
                        starts.append(start)
                        lengths.append(range_length)
                        units.append(unit_offset)
            pos = set_end
        self._firsts = list(range(len(starts)))
        self._ends = list(range(1, len(starts) + 1))

    def unit_of(self, pc: int) -> int | None:
        """The offset of the unit whose listed range holds ``pc``; None if none does.

        Of ranges that overlap (odd output), the one starting last wins, then
        the one ending last.
        """
        if pc in self._answers:
            return self._answers[pc]
        answer = self._unit_of(pc)
        if len(self._answers) < _MAX_ANSWERS:
            self._answers[pc] = answer
        return answer

    def _unit_of(self, pc: int) -> int | None:
        ordered, starts = self._sorted, self._starts
        index = bisect.bisect_right(ordered, pc)
        tried = 0
        while index > 0 and tried < _LOOK_BACK:
            value = ordered[index - 1]
            low = bisect.bisect_left(ordered, value, 0, index)
            best: tuple[int, int] | None = None
            slot = -1
            for _ in range(min(index - low, _LOOK_BACK - tried)):
                slot = starts.index(value, slot + 1)
                found = self._covering(slot, pc)
                if found is not None and (best is None or found > best):
                    best = found
            if best is not None:
                return best[1]
            tried += index - low
            index = low
        return None

    def _covering(self, slot: int, pc: int) -> tuple[int, int] | None:
        """(end, unit offset) of the range in ``slot`` if it is one and holds ``pc``."""
        start, length = self._starts[slot], self._lengths[slot]
        if not start <= pc < start + length:
            return None
        index = bisect.bisect_right(self._firsts, slot) - 1
        if index < 0 or slot >= self._ends[index]:
            return None  # a header, or what follows the last set
        for before in range(self._firsts[index], slot):
            if self._starts[before] == 0 and self._lengths[before] == 0:
                return None  # after the set's terminator
        return start + length, self._units[index]

    def following(self, offset: int) -> int:
        """Where the first listed unit after the one at ``offset`` starts; -1 if none."""
        if self._listed is None:
            self._listed = sorted(set(self._units))
        index = bisect.bisect_right(self._listed, offset)
        return self._listed[index] if index < len(self._listed) else -1

    def units(self) -> set[int]:
        """The offsets of every unit with a listed range (for the rare pc none holds)."""
        starts, lengths = self._starts, self._lengths
        found = set()
        for first, end, unit in zip(self._firsts, self._ends, self._units, strict=True):
            for slot in range(first, end):
                if lengths[slot]:
                    found.add(unit)
                    break
                if starts[slot] == 0:
                    break  # the terminator
        return found
