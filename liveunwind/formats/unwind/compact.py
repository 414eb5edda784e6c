"""Apple compact unwind (``__TEXT,__unwind_info``): bytes in, UnwindRule out.

Every function of a Mach-O image gets one 32-bit encoding that says how to
leave it: for x86_64 an rbp frame or a frameless frame of a known size with
saved registers in a known order, for arm64 a frame record with saved
register pairs or a frameless leaf — or, when none of that fits, the offset
of a DWARF FDE in ``__eh_frame`` (the "DWARF escape").  The encodings differ
per CPU: a table reads those of its architecture's Mach-O cputype.

The section is a two-level index (layout facts from LLVM's
``compact_unwind_encoding.h``; the meaning of each mode from libunwind's
``CompactUnwinder.hpp``)::

    header (version 1) → common encodings[], personalities[], first-level index[]
    first-level entry  → function offset, second-level page, LSDA index slice
    second-level page  → regular: (function offset, encoding) pairs
                         compressed: 24-bit offset from the first-level entry
                         + 8-bit index into common or page-local encodings

Function offsets are relative to the image base (the address of the Mach-O
header, i.e. the ``__TEXT`` segment's link-time address).  All addresses this
module takes and returns are link-time addresses.

The decoder is pure: the one mode that needs the function's own code
(x86_64 STACK_IND reads its frame size from the ``subq`` immediate) calls the
``read_code`` callable it was given.  Every offset and count is checked
against the section before use; corrupt input raises FormatError.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from liveunwind.arch import Arch, arch_by_name
from liveunwind.errors import FormatError, UsageError
from liveunwind.formats.unwind.rules import CfaRule, RegisterRule, RegKind, UnwindRule

if TYPE_CHECKING:
    from liveunwind.formats.unwind.dwarf_cfi import CfiTable

#: Reads ``size`` bytes of the image at a link-time address (for STACK_IND).
ReadCode = Callable[[int, int], bytes]

# Architecture-independent bits.
UNWIND_IS_NOT_FUNCTION_START = 0x80000000
UNWIND_HAS_LSDA = 0x40000000
UNWIND_PERSONALITY_MASK = 0x30000000
UNWIND_MODE_MASK = 0x0F000000
DWARF_SECTION_OFFSET = 0x00FFFFFF

# The Mach-O cputypes (mach/machine.h) that have encodings: ``Arch.macho.cpu_type``.
CPU_TYPE_X86_64 = 0x01000007
CPU_TYPE_ARM64 = 0x0100000C

# x86_64 modes and fields.
X86_64_MODE_RBP_FRAME = 0x01000000
X86_64_MODE_STACK_IMMD = 0x02000000
X86_64_MODE_STACK_IND = 0x03000000
X86_64_MODE_DWARF = 0x04000000
X86_64_RBP_FRAME_REGISTERS = 0x00007FFF
X86_64_RBP_FRAME_OFFSET = 0x00FF0000
X86_64_FRAMELESS_STACK_SIZE = 0x00FF0000
X86_64_FRAMELESS_STACK_ADJUST = 0x0000E000
X86_64_FRAMELESS_STACK_REG_COUNT = 0x00001C00
X86_64_FRAMELESS_STACK_REG_PERMUTATION = 0x000003FF

# arm64 modes and fields.
ARM64_MODE_FRAMELESS = 0x02000000
ARM64_MODE_DWARF = 0x03000000
ARM64_MODE_FRAME = 0x04000000
ARM64_FRAMELESS_STACK_SIZE = 0x00FFF000

_SECOND_LEVEL_REGULAR = 2
_SECOND_LEVEL_COMPRESSED = 3

#: x86_64 compact register numbers 1–6 as DWARF numbers (rbx r12 r13 r14 r15 rbp).
_X86_64_REGISTERS = {1: 3, 2: 12, 3: 13, 4: 14, 5: 15, 6: 6}
_X86_64_NAMES = {1: "rbx", 2: "r12", 3: "r13", 4: "r14", 5: "r15", 6: "rbp"}
_X86_64_RBP, _X86_64_RSP, _X86_64_RIP = 6, 7, 16

#: arm64 register pairs in the order they sit below the frame (or frameless
#: frame top): flag bit, then the DWARF numbers of the pair (x19… are 19…,
#: d8… are 72…).
_ARM64_PAIRS = (
    (0x001, 19, 20),
    (0x002, 21, 22),
    (0x004, 23, 24),
    (0x008, 25, 26),
    (0x010, 27, 28),
    (0x100, 72, 73),
    (0x200, 74, 75),
    (0x400, 76, 77),
    (0x800, 78, 79),
)
_ARM64_FP, _ARM64_LR, _ARM64_SP = 29, 30, 31

_HEADER = struct.Struct("<7I")
_INDEX_ENTRY = struct.Struct("<3I")
_PAIR = struct.Struct("<2I")
_U32 = struct.Struct("<I")
_REGULAR_PAGE = struct.Struct("<I2H")
_COMPRESSED_PAGE = struct.Struct("<I4H")


@dataclass(frozen=True, slots=True)
class CompactEntry:
    """One second-level entry: the code range it covers and what it says.

    ``function_start`` is the start of the function the entry belongs to:
    the entry's own start, unless the entry is flagged "not function start",
    in which case the nearest earlier entry without that flag.
    """

    start: int
    end: int
    encoding: int
    function_start: int
    #: Address of the GOT slot holding the personality routine, if any.
    personality: int | None = None
    #: Address of the language-specific data area, if the entry has one.
    lsda: int | None = None

    @property
    def mode(self) -> int:
        return self.encoding & UNWIND_MODE_MASK


@dataclass(frozen=True, slots=True)
class _Page:
    """A decoded second-level page: sorted image offsets and their encodings."""

    offsets: tuple[int, ...]
    encodings: tuple[int, ...]


class CompactUnwindTable:
    """One ``__unwind_info`` section, decoded on demand.

    ``data`` is the section's bytes, ``section_address`` its link-time
    address (for messages), ``image_base`` the image's link-time base that
    function offsets are relative to.  ``eh_frame`` resolves DWARF-mode
    entries; ``read_code`` serves STACK_IND.  Without them, those entries
    raise FormatError from :meth:`rule_for` (the stepper then falls back).
    """

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        section_address: int,
        *,
        arch: Arch | str,
        image_base: int,
        eh_frame: CfiTable | None = None,
        read_code: ReadCode | None = None,
    ) -> None:
        self.arch = _arch(arch)
        macho = self.arch.macho
        encodings = _ENCODINGS.get(macho.cpu_type) if macho is not None else None
        if encodings is None:
            raise ValueError(f"compact unwind has no encoding for {self.arch.name!r}")
        self._encodings = encodings
        self._data = bytes(data)
        self.section_address = section_address
        self.image_base = image_base
        self.eh_frame = eh_frame
        self._read_code = read_code
        size = len(self._data)
        if size < _HEADER.size:
            raise FormatError(f"__unwind_info is {size} bytes, shorter than its header")
        (
            self.version,
            common_offset,
            common_count,
            personality_offset,
            personality_count,
            index_offset,
            index_count,
        ) = _HEADER.unpack_from(self._data, 0)
        if self.version != 1:
            raise FormatError(f"__unwind_info version {self.version} (only 1 is known)")
        self.common_encodings = self._u32_array(common_offset, common_count, "common encodings")
        self.personalities = self._u32_array(personality_offset, personality_count, "personalities")
        if personality_count > 3:
            raise FormatError(f"{personality_count} personalities; the encoding holds at most 3")
        self._check_range(index_offset, index_count, _INDEX_ENTRY.size, "first-level index")
        self.index = [
            _INDEX_ENTRY.unpack_from(self._data, index_offset + i * _INDEX_ENTRY.size)
            for i in range(index_count)
        ]
        self._index_starts = [entry[0] for entry in self.index]
        if any(a > b for a, b in itertools.pairwise(self._index_starts)):
            raise FormatError("first-level index is not sorted by function offset")
        self.lsdas = self._lsda_index()
        self._lsda_starts = [function for function, _ in self.lsdas]
        self._pages: dict[int, _Page] = {}
        self._rules: dict[int, UnwindRule | None] = {}

    # -- the arrays -------------------------------------------------------------

    def _check_range(self, offset: int, count: int, item: int, what: str) -> None:
        if offset + count * item > len(self._data):
            raise FormatError(
                f"__unwind_info {what}: {count} entries at offset {offset:#x} run past "
                f"the {len(self._data)}-byte section"
            )

    def _u32_array(self, offset: int, count: int, what: str) -> tuple[int, ...]:
        self._check_range(offset, count, 4, what)
        return struct.unpack_from(f"<{count}I", self._data, offset)

    def _lsda_index(self) -> list[tuple[int, int]]:
        """The LSDA descriptors: the span the first-level entries point into, start to sentinel."""
        if not self.index:
            return []
        first, last = self.index[0][2], self.index[-1][2]
        if last < first or (last - first) % _PAIR.size:
            raise FormatError(f"LSDA index bounds {first:#x}..{last:#x} are inconsistent")
        count = (last - first) // _PAIR.size
        self._check_range(first, count, _PAIR.size, "LSDA index")
        pairs = [_PAIR.unpack_from(self._data, first + i * _PAIR.size) for i in range(count)]
        if any(a[0] > b[0] for a, b in itertools.pairwise(pairs)):
            raise FormatError("LSDA index is not sorted by function offset")
        return pairs

    def _page(self, number: int) -> _Page:
        """Second-level page of first-level entry ``number`` (decoded once)."""
        page = self._pages.get(number)
        if page is not None:
            return page
        base, page_offset, _ = self.index[number]
        limit = self._index_starts[number + 1]
        data = self._data
        if page_offset + 4 > len(data):
            raise FormatError(f"second-level page at {page_offset:#x} is outside the section")
        kind = _U32.unpack_from(data, page_offset)[0]
        if kind == _SECOND_LEVEL_REGULAR:
            self._check_range(page_offset, 1, _REGULAR_PAGE.size, "regular page header")
            _, entry_offset, count = _REGULAR_PAGE.unpack_from(data, page_offset)
            start = page_offset + entry_offset
            self._check_range(start, count, _PAIR.size, "regular page")
            pairs = [_PAIR.unpack_from(data, start + i * _PAIR.size) for i in range(count)]
            offsets = tuple(function for function, _ in pairs)
            encodings = tuple(encoding for _, encoding in pairs)
        elif kind == _SECOND_LEVEL_COMPRESSED:
            self._check_range(page_offset, 1, _COMPRESSED_PAGE.size, "compressed page header")
            _, entry_offset, count, local_offset, local_count = _COMPRESSED_PAGE.unpack_from(
                data, page_offset
            )
            raw = self._u32_array(page_offset + entry_offset, count, "compressed page")
            local = self._u32_array(page_offset + local_offset, local_count, "page encodings")
            common = self.common_encodings
            offsets = tuple(base + (entry & 0x00FFFFFF) for entry in raw)
            encodings_list = []
            for entry in raw:
                index = entry >> 24
                if index < len(common):
                    encodings_list.append(common[index])
                elif index - len(common) < len(local):
                    encodings_list.append(local[index - len(common)])
                else:
                    raise FormatError(
                        f"compressed entry names encoding {index}, but there are "
                        f"{len(common)} common and {len(local)} page encodings"
                    )
            encodings = tuple(encodings_list)
        else:
            raise FormatError(f"second-level page at {page_offset:#x} has unknown kind {kind}")
        if any(a > b for a, b in itertools.pairwise(offsets)):
            raise FormatError(f"second-level page at {page_offset:#x} is not sorted")
        if offsets and (offsets[0] < base or offsets[-1] > limit):
            raise FormatError(
                f"second-level page at {page_offset:#x} covers offsets outside "
                f"{base:#x}..{limit:#x}"
            )
        page = self._pages[number] = _Page(offsets, encodings)
        return page

    # -- lookups ------------------------------------------------------------------

    def entry_for(self, pc: int) -> CompactEntry | None:
        """The entry covering link-time address ``pc``, or None when none does."""
        target = pc - self.image_base
        if target < 0 or len(self.index) < 2:
            return None
        number = bisect.bisect_right(self._index_starts, target) - 1
        if number < 0 or number >= len(self.index) - 1:
            return None  # before the first function, or at/after the sentinel
        if self.index[number][1] == 0:
            return None
        page = self._page(number)
        slot = bisect.bisect_right(page.offsets, target) - 1
        if slot < 0:
            return None
        return self._entry(number, slot)

    def _entry(self, number: int, slot: int) -> CompactEntry:
        page = self._page(number)
        start = page.offsets[slot]
        end = (
            page.offsets[slot + 1]
            if slot + 1 < len(page.offsets)
            else self._index_starts[number + 1]
        )
        encoding = page.encodings[slot]
        return CompactEntry(
            start=self.image_base + start,
            end=self.image_base + end,
            encoding=encoding,
            function_start=self.image_base + self._function_start(number, slot),
            personality=self._personality(encoding),
            lsda=self._lsda(start) if encoding & UNWIND_HAS_LSDA else None,
        )

    def _function_start(self, number: int, slot: int) -> int:
        """Walks back over entries flagged "not function start" (across pages if need be)."""
        while True:
            page = self._page(number)
            if not page.encodings[slot] & UNWIND_IS_NOT_FUNCTION_START:
                return page.offsets[slot]
            slot -= 1
            while slot < 0:
                number -= 1
                if number < 0:
                    raise FormatError("the first entry is flagged as not starting a function")
                if self.index[number][1] == 0:
                    raise FormatError("a continuation entry follows a range without a page")
                slot = len(self._page(number).offsets) - 1

    def _personality(self, encoding: int) -> int | None:
        index = (encoding & UNWIND_PERSONALITY_MASK) >> 28
        if index == 0:
            return None
        if index > len(self.personalities):
            raise FormatError(
                f"encoding {encoding:#010x} names personality {index} of {len(self.personalities)}"
            )
        return self.image_base + self.personalities[index - 1]

    def _lsda(self, function_offset: int) -> int | None:
        slot = bisect.bisect_left(self._lsda_starts, function_offset)
        if slot < len(self.lsdas) and self.lsdas[slot][0] == function_offset:
            return self.image_base + self.lsdas[slot][1]
        return None

    def entries(self) -> Iterator[CompactEntry]:
        """Every second-level entry in address order (for dumps)."""
        for number in range(len(self.index) - 1):
            if self.index[number][1] == 0:
                continue
            for slot in range(len(self._page(number).offsets)):
                yield self._entry(number, slot)

    def rule_for(self, pc: int) -> UnwindRule | None:
        """The rule at link-time address ``pc``; None where the table has no information."""
        entry = self.entry_for(pc)
        if entry is None:
            return None
        if entry.mode == self._dwarf_mode:
            return self._dwarf_rule(entry, pc)
        if entry.start in self._rules:
            return self._rules[entry.start]
        rule = self._rules[entry.start] = self.rule_for_entry(entry)
        return rule

    def compact_rule_for(self, pc: int) -> UnwindRule | None:
        """Like :meth:`rule_for`, but None for DWARF-mode entries (those are CFI's to report)."""
        entry = self.entry_for(pc)
        if entry is None or entry.mode == self._dwarf_mode:
            return None
        return self.rule_for(pc)

    def dwarf_rule_for(self, pc: int) -> UnwindRule | None:
        """The FDE's rule for DWARF-mode entries through the escape offset; None otherwise."""
        entry = self.entry_for(pc)
        if entry is None or entry.mode != self._dwarf_mode:
            return None
        return self._dwarf_rule(entry, pc)

    @property
    def _dwarf_mode(self) -> int:
        return self._encodings.dwarf_mode

    def _dwarf_rule(self, entry: CompactEntry, pc: int) -> UnwindRule:
        if self.eh_frame is None:
            raise FormatError(
                f"compact entry at {entry.start:#x} defers to __eh_frame, which is missing"
            )
        return self.eh_frame.rule_from_fde_at(entry.encoding & DWARF_SECTION_OFFSET, pc)

    # -- encodings → rules --------------------------------------------------------

    def rule_for_entry(self, entry: CompactEntry) -> UnwindRule | None:
        """The rule of a non-DWARF entry (None for "no information")."""
        return self._encodings.rule(self, entry)

    def frameless_size(self, entry: CompactEntry) -> int:
        """Bytes from rsp to the CFA of an x86_64 frameless function (return address included)."""
        encoding = entry.encoding
        field = _bits(encoding, X86_64_FRAMELESS_STACK_SIZE)
        if entry.mode == X86_64_MODE_STACK_IMMD:
            return field * 8
        if self._read_code is None:
            raise FormatError(f"STACK_IND entry at {entry.start:#x} needs the function's code")
        immediate = self._read_code(entry.function_start + field, 4)
        if len(immediate) != 4:
            raise FormatError(f"cannot read the subq immediate of {entry.function_start:#x}")
        adjust = _bits(encoding, X86_64_FRAMELESS_STACK_ADJUST)
        return _U32.unpack(immediate)[0] + adjust * 8

    # -- dumps ----------------------------------------------------------------------

    def describe_encoding(self, encoding: int) -> str:
        """The encoding's fields in words: ``RBP_FRAME offset=5 rbx@cfa-24 …``."""
        flags = []
        if encoding & UNWIND_IS_NOT_FUNCTION_START:
            flags.append("not-function-start")
        if encoding & UNWIND_HAS_LSDA:
            flags.append("lsda")
        personality = (encoding & UNWIND_PERSONALITY_MASK) >> 28
        if personality:
            flags.append(f"personality={personality}")
        try:
            text = self._encodings.describe(encoding)
        except FormatError as error:
            text = f"invalid ({error})"
        return " ".join([text, *flags])

    def format_dump(self) -> str:
        """The whole table, laid out like ``llvm-objdump --unwind-info`` plus decoded meanings."""
        lines = [
            "Contents of __unwind_info section:",
            f"  Version:                                   {self.version:#x}",
            f"  Number of common encodings in array:       {len(self.common_encodings):#x}",
            f"  Number of personality functions in array:  {len(self.personalities):#x}",
            f"  Number of indices in array:                {len(self.index):#x}",
            f"  Common encodings: (count = {len(self.common_encodings)})",
        ]
        for i, encoding in enumerate(self.common_encodings):
            lines.append(f"    encoding[{i}]: {encoding:#010x}  {self.describe_encoding(encoding)}")
        lines.append(f"  Personality functions: (count = {len(self.personalities)})")
        for i, slot in enumerate(self.personalities, 1):
            lines.append(f"    personality[{i}]: {slot:#010x}")
        lines.append(f"  Top level indices: (count = {len(self.index)})")
        for i, (function, page, lsda) in enumerate(self.index):
            lines.append(
                f"    [{i}]: function offset={function:#010x}, 2nd level page offset="
                f"{page:#010x}, LSDA offset={lsda:#010x}"
            )
        lines.append(f"  LSDA descriptors: (count = {len(self.lsdas)})")
        for i, (function, lsda) in enumerate(self.lsdas):
            lines.append(f"    [{i}]: function offset={function:#010x}, LSDA offset={lsda:#010x}")
        lines.append("  Entries:")
        for entry in self.entries():
            extra = ""
            if entry.personality is not None:
                extra += f" personality@{entry.personality:#x}"
            if entry.lsda is not None:
                extra += f" lsda={entry.lsda:#x}"
            lines.append(
                f"    {entry.start:#x}..{entry.end:#x}  {entry.encoding:#010x}  "
                f"{self.describe_encoding(entry.encoding)}{extra}"
            )
        return "\n".join(lines) + "\n"


def _bits(value: int, mask: int) -> int:
    """The field under ``mask``, shifted down (EXTRACT_BITS in Apple's headers)."""
    return (value & mask) >> ((mask & -mask).bit_length() - 1)


def _rbp_frame_registers(encoding: int) -> list[tuple[int, int]]:
    """(slot, compact register) of the five 3-bit slots of an RBP_FRAME; slot 0 is lowest."""
    registers = []
    field = encoding & X86_64_RBP_FRAME_REGISTERS
    for slot in range(5):
        code = (field >> (3 * slot)) & 7
        if code == 7:
            raise FormatError(f"RBP_FRAME encoding {encoding:#010x} names register 7")
        if code:
            registers.append((slot, code))
    return registers


def frameless_registers(encoding: int) -> list[int]:
    """The compact register numbers a frameless x86_64 function pushed, first push first.

    The 10-bit field is a Lehmer code: digit ``i`` picks among the registers
    (1–6) not picked before, and the digits are packed in a mixed radix whose
    bases are 6, 5, 4… — so for ``count`` registers digit ``i`` is worth the
    product of the bases of the digits after it.
    """
    count = _bits(encoding, X86_64_FRAMELESS_STACK_REG_COUNT)
    permutation = encoding & X86_64_FRAMELESS_STACK_REG_PERMUTATION
    if count > 6:
        raise FormatError(f"frameless encoding {encoding:#010x} saves {count} registers")
    digits = []
    for i in range(count):
        weight = 1
        for j in range(i + 1, min(count, 5)):
            weight *= 6 - j
        digit, permutation = divmod(permutation, weight) if i < 5 else (0, permutation)
        digits.append(digit)
    unused = [1, 2, 3, 4, 5, 6]
    registers = []
    for digit in digits:
        if digit >= len(unused):
            raise FormatError(f"frameless encoding {encoding:#010x}: bad register permutation")
        registers.append(unused.pop(digit))
    return registers


def _arm64_pairs(encoding: int, first: int) -> dict[int, int]:
    """CFA offsets of the saved pairs: each pair's first register above its second."""
    saved = {}
    offset = first
    for flag, high, low in _ARM64_PAIRS:
        if encoding & flag:
            saved[high] = offset
            saved[low] = offset - 8
            offset -= 16
    return saved


def _rule(
    cfa_register: int, cfa_offset: int, saved: dict[int, int], ra: int, entry: CompactEntry
) -> UnwindRule:
    registers = tuple(
        (number, RegisterRule(RegKind.OFFSET, offset)) for number, offset in sorted(saved.items())
    )
    return UnwindRule(
        cfa=CfaRule(cfa_register, cfa_offset),
        registers=registers,
        return_address_register=ra,
        start=entry.start,
        end=entry.end,
    )


def _arch(arch: Arch | str) -> Arch:
    """The Arch, also when given by name (``x86_64``, ``arm64``…)."""
    if not isinstance(arch, str):
        return arch
    try:
        return arch_by_name(arch)
    except UsageError:
        raise ValueError(f"compact unwind has no encoding for {arch!r}") from None


# -- x86_64 ------------------------------------------------------------------------


def _x86_64_rule(table: CompactUnwindTable, entry: CompactEntry) -> UnwindRule | None:
    encoding, mode = entry.encoding, entry.mode
    if mode == X86_64_MODE_RBP_FRAME:
        offset = _bits(encoding, X86_64_RBP_FRAME_OFFSET)
        saved = {_X86_64_RBP: -16, _X86_64_RIP: -8}
        for number, code in _rbp_frame_registers(encoding):
            saved[_X86_64_REGISTERS[code]] = -16 - 8 * offset + 8 * number
        return _rule(_X86_64_RBP, 16, saved, _X86_64_RIP, entry)
    if mode in (X86_64_MODE_STACK_IMMD, X86_64_MODE_STACK_IND):
        size = table.frameless_size(entry)
        saved = {_X86_64_RIP: -8}
        registers = frameless_registers(encoding)
        for number, code in enumerate(registers):
            saved[_X86_64_REGISTERS[code]] = -8 - 8 * len(registers) + 8 * number
        return _rule(_X86_64_RSP, size, saved, _X86_64_RIP, entry)
    if mode == 0:
        return None
    raise FormatError(f"x86_64 compact encoding {encoding:#010x} has unknown mode")


def _describe_x86_64(encoding: int) -> str:
    mode = encoding & UNWIND_MODE_MASK
    if mode == X86_64_MODE_RBP_FRAME:
        offset = _bits(encoding, X86_64_RBP_FRAME_OFFSET)
        saved = " ".join(
            f"{_X86_64_NAMES[code]}@rbp-{8 * (offset - slot)}"
            for slot, code in _rbp_frame_registers(encoding)
        )
        return f"RBP_FRAME offset={offset}" + (f" {saved}" if saved else "")
    if mode in (X86_64_MODE_STACK_IMMD, X86_64_MODE_STACK_IND):
        registers = frameless_registers(encoding)
        pushed = ",".join(_X86_64_NAMES[code] for code in registers) or "none"
        field = _bits(encoding, X86_64_FRAMELESS_STACK_SIZE)
        if mode == X86_64_MODE_STACK_IMMD:
            size = f"size={field * 8}"
        else:
            adjust = _bits(encoding, X86_64_FRAMELESS_STACK_ADJUST)
            size = f"size=[subq imm at func+{field:#x}]+{adjust * 8}"
        name = "STACK_IMMD" if mode == X86_64_MODE_STACK_IMMD else "STACK_IND"
        return f"{name} {size} pushed={pushed}"
    if mode == X86_64_MODE_DWARF:
        return f"DWARF fde=__eh_frame+{encoding & DWARF_SECTION_OFFSET:#x}"
    return "none" if mode == 0 else f"unknown mode {mode >> 24}"


# -- arm64 -------------------------------------------------------------------------


def _arm64_rule(_table: CompactUnwindTable, entry: CompactEntry) -> UnwindRule | None:
    encoding, mode = entry.encoding, entry.mode
    if mode == ARM64_MODE_FRAME:
        saved = {_ARM64_FP: -16, _ARM64_LR: -8}
        saved.update(_arm64_pairs(encoding, -24))
        return _rule(_ARM64_FP, 16, saved, _ARM64_LR, entry)
    if mode == ARM64_MODE_FRAMELESS:
        size = _bits(encoding, ARM64_FRAMELESS_STACK_SIZE) * 16
        return _rule(_ARM64_SP, size, _arm64_pairs(encoding, -8), _ARM64_LR, entry)
    if mode == 0:
        return None
    raise FormatError(f"arm64 compact encoding {encoding:#010x} has unknown mode")


def _describe_arm64(encoding: int) -> str:
    mode = encoding & UNWIND_MODE_MASK
    pairs = " ".join(
        f"x{high}/x{low}" if high < 64 else f"d{high - 64}/d{low - 64}"
        for flag, high, low in _ARM64_PAIRS
        if encoding & flag
    )
    if mode == ARM64_MODE_FRAME:
        return "FRAME" + (f" saved={pairs}" if pairs else "")
    if mode == ARM64_MODE_FRAMELESS:
        size = _bits(encoding, ARM64_FRAMELESS_STACK_SIZE) * 16
        return f"FRAMELESS size={size}" + (f" saved={pairs}" if pairs else "")
    if mode == ARM64_MODE_DWARF:
        return f"DWARF fde=__eh_frame+{encoding & DWARF_SECTION_OFFSET:#x}"
    return "none" if mode == 0 else f"unknown mode {mode >> 24}"


class _Encodings:
    """One architecture's compact encodings: its DWARF-escape mode, its rules, their words."""

    __slots__ = ("describe", "dwarf_mode", "rule")

    def __init__(
        self,
        dwarf_mode: int,
        rule: Callable[[CompactUnwindTable, CompactEntry], UnwindRule | None],
        describe: Callable[[int], str],
    ) -> None:
        self.dwarf_mode = dwarf_mode
        self.rule = rule
        self.describe = describe


#: The encodings by the Mach-O cputype they are defined for.
_ENCODINGS = {
    CPU_TYPE_X86_64: _Encodings(X86_64_MODE_DWARF, _x86_64_rule, _describe_x86_64),
    CPU_TYPE_ARM64: _Encodings(ARM64_MODE_DWARF, _arm64_rule, _describe_arm64),
}
