"""Apple compact unwind on ``__unwind_info`` sections made by hand: pages, permutations, corruption.

The tables of real Mach-O binaries, checked against llvm-objdump, and Mach-O
cores are tests/system/test_compact.py.
"""

from __future__ import annotations

import itertools
import struct

import pytest

from liveunwind.errors import FormatError
from liveunwind.formats.unwind import compact
from liveunwind.formats.unwind.compact import CompactUnwindTable, frameless_registers
from tests.support.macho import build_unwind_info


def test_continuation_entries_walk_back_to_the_function_start() -> None:
    """A "not function start" entry (on the next page) reads STACK_IND code at the real start."""
    stack_ind = compact.X86_64_MODE_STACK_IND | (6 << 16) | (1 << 13)  # subq imm at +6, adjust 8
    data = build_unwind_info(
        [],
        [
            ("regular", [(0x1000, stack_ind)]),
            ("compressed", [(0x1040, stack_ind | compact.UNWIND_IS_NOT_FUNCTION_START)]),
        ],
        sentinel=0x1080,
    )
    base = 0x100000000
    reads = []

    def read_code(address: int, size: int) -> bytes:
        reads.append(address)
        return struct.pack("<I", 0x1000) if address == base + 0x1006 else b"\xff" * size

    table = CompactUnwindTable(data, 0, arch="x86_64", image_base=base, read_code=read_code)
    entry = table.entry_for(base + 0x1050)
    assert (entry.start, entry.end, entry.function_start) == (
        base + 0x1040,
        base + 0x1080,
        base + 0x1000,
    )
    rule = table.rule_for(base + 0x1050)
    assert (rule.cfa.register, rule.cfa.offset) == (7, 0x1000 + 8)
    assert reads == [base + 0x1006]


def test_no_information_and_outside_the_table() -> None:
    data = build_unwind_info([0], [("compressed", [(0x1000, 0), (0x1010, 0x02010000)])], 0x1020)
    table = CompactUnwindTable(data, 0, arch="x86_64", image_base=0)
    assert table.rule_for(0x1008) is None  # encoding 0: the stepper falls back
    assert table.rule_for(0x1010) is not None
    assert table.rule_for(0xFFF) is None
    assert table.rule_for(0x1020) is None  # the sentinel ends the table


def lehmer_encode(registers: list[int]) -> int:
    """Packs a register order the way the compact encoding's 10-bit field is specified."""
    unused, value = [1, 2, 3, 4, 5, 6], 0
    count = len(registers)
    for i, register in enumerate(registers):
        digit = unused.index(register)
        unused.remove(register)
        weight = 1
        for j in range(i + 1, min(count, 5)):
            weight *= 6 - j
        value += digit * weight
    return value


def test_every_register_permutation_round_trips() -> None:
    seen = 0
    for count in range(7):
        for order in itertools.permutations(range(1, 7), count):
            field = lehmer_encode(list(order))
            assert field < 1024
            encoding = compact.X86_64_MODE_STACK_IMMD | count << 10 | field
            assert frameless_registers(encoding) == list(order)
            seen += 1
    assert seen == 1 + 6 + 30 + 120 + 360 + 720 + 720


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: struct.pack("<I", 2) + d[4:],  # version
        lambda d: d[:20] + struct.pack("<I", 0xFFFF) + d[24:],  # index past the end
        lambda d: d[:8] + struct.pack("<I", 0x10000) + d[12:],  # common encodings past the end
        lambda d: d[:-20] + struct.pack("<I", 7) + d[-16:],  # unknown page kind
        lambda d: d[:-4] + struct.pack("<I", 0x09000010),  # compressed index 9 of 1
        lambda d: d[:28] + struct.pack("<I", 0x31000000) + d[32:],  # personality 3 of 0
    ],
)
def test_corrupt_tables_raise_format_error(corrupt) -> None:
    data = build_unwind_info(
        [0x02010000], [("compressed", [(0x1000, 0x02010000), (0x1010, 0x02010000)])], 0x1020
    )
    assert len(data) == 28 + 4 + 24 + 12 + 8
    broken = corrupt(data)
    with pytest.raises(FormatError):
        table = CompactUnwindTable(broken, 0, arch="x86_64", image_base=0)
        for entry in table.entries():
            table.rule_for(entry.start)
