"""The .gopclntab decoder on tables built from the layout facts: every layout since Go 1.16.

The layouts of Go releases other than the installed one (1.16/1.17, 1.20
on), and corrupt tables.  The installed Go's own binary, against its symbol
table and readelf, is tests/system/test_gopclntab.py.
"""

from __future__ import annotations

import struct

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.errors import FormatError
from liveunwind.formats.unwind.gopclntab import (
    FLAG_SPWRITE,
    FLAG_TOPFRAME,
    MAGIC_GO116,
    MAGIC_GO118,
    MAGIC_GO120,
    GoPclnTab,
)
from liveunwind.formats.unwind.rules import RegisterRule, RegKind
from tests.support.go import TEXT, build_pclntab

X86_64 = arch_by_name("x86_64")
AARCH64 = arch_by_name("aarch64")


# -- every layout, on tables built from the layout facts -----------------------------

FUNCTIONS = [
    # main.work: 4 bytes with no frame, then a 40-byte frame, then 2 bytes of padding.
    (TEXT, TEXT + 0x30, "main.work", 0, [(0, 4), (40, 0x2A)]),
    (TEXT + 0x30, TEXT + 0x40, "runtime.goexit", FLAG_TOPFRAME, [(0, 0x10)]),
    (TEXT + 0x40, TEXT + 0x60, "runtime.sigtramp", FLAG_TOPFRAME, [(0, 2), (24, 0x1E)]),
    (TEXT + 0x60, TEXT + 0x80, "runtime.mcall", FLAG_SPWRITE, [(0, 0x20)]),
]


@pytest.mark.parametrize("magic", [MAGIC_GO116, MAGIC_GO118, MAGIC_GO120])
def test_each_layout_decodes(magic) -> None:
    data = build_pclntab(magic, FUNCTIONS)
    table = GoPclnTab(data, X86_64)
    assert len(table) == 4
    work = table.function_at(TEXT + 10)
    assert work is not None and table.name(work) == "main.work"
    assert [table.sp_delta(work, TEXT + offset) for offset in (0, 3, 4, 0x2D)] == [0, 0, 40, 40]
    assert table.rule_for(TEXT + 0x2E) is None  # padding
    rule = table.rule_for(TEXT + 8)
    assert rule is not None and (rule.cfa.register, rule.cfa.offset) == (X86_64.sp, 48)
    assert rule.rule_for(X86_64.return_address).offset == -8
    goexit = table.rule_for(TEXT + 0x30)
    assert goexit is not None
    assert goexit.rule_for(X86_64.return_address).kind is RegKind.UNDEFINED
    sigtramp = table.rule_for(TEXT + 0x50)
    assert sigtramp is not None and sigtramp.cfa.offset == 32
    assert sigtramp.rule_for(X86_64.return_address).kind is RegKind.OFFSET
    mcall = table.rule_for(TEXT + 0x60)
    assert mcall is not None
    assert mcall.rule_for(X86_64.return_address).kind is RegKind.UNDEFINED
    assert table.function_at(TEXT - 1) is None
    assert table.function_at(TEXT + 0x80) is None


def test_a_call_into_the_vdso_keeps_its_sp_delta_rule_though_spwrite() -> None:
    """time.now writes SP only while the M holds its caller: elsewhere its deltas hold."""
    functions = [
        (TEXT, TEXT + 0x20, "time.now", FLAG_SPWRITE, [(24, 0x20)]),
        (TEXT + 0x20, TEXT + 0x40, "runtime.asmcgocall", FLAG_SPWRITE, [(24, 0x20)]),
    ]
    table = GoPclnTab(build_pclntab(MAGIC_GO120, functions), X86_64)
    now = table.rule_for(TEXT + 0x10)
    assert now is not None and now.cfa.offset == 32
    assert now.rule_for(X86_64.return_address) == RegisterRule(RegKind.OFFSET, -8)
    other = table.rule_for(TEXT + 0x30)
    assert other is not None
    assert other.rule_for(X86_64.return_address).kind is RegKind.UNDEFINED


def test_which_ends_are_short_of_the_stack_s_top() -> None:
    """A function that writes SP unrecorded ends a walk short of its top (the stepper says
    why, unless it crosses it: mcall); a top frame ends it whole, even one that writes SP."""
    functions = [
        (TEXT, TEXT + 0x10, "runtime.gogo", FLAG_SPWRITE, [(0, 0x10)]),
        (TEXT + 0x10, TEXT + 0x20, "runtime.rt0_go", FLAG_SPWRITE | FLAG_TOPFRAME, [(0, 0x10)]),
        (TEXT + 0x20, TEXT + 0x30, "runtime.goexit", FLAG_TOPFRAME, [(0, 0x10)]),
        (TEXT + 0x30, TEXT + 0x40, "runtime.nanotime1", FLAG_SPWRITE, [(0, 0x10)]),
        (TEXT + 0x40, TEXT + 0x50, "main.work", 0, [(0, 0x10)]),
    ]
    table = GoPclnTab(build_pclntab(MAGIC_GO120, functions), X86_64)
    short = []
    for pc in range(TEXT, TEXT + 0x50, 0x10):
        function = table.function_at(pc)
        assert function is not None
        if table.writes_sp_unrecorded(function):
            short.append(table.name(function))
    assert short == ["runtime.gogo"]


def test_go_1_16_ends_walks_by_name() -> None:
    """Go 1.16 has no flags: goexit ends the walk by its name, mcall too."""
    unflagged = [(entry, end, name, 0, rows) for entry, end, name, _flag, rows in FUNCTIONS]
    table = GoPclnTab(build_pclntab(MAGIC_GO116, unflagged), X86_64)
    for pc in (TEXT + 0x30, TEXT + 0x60):
        rule = table.rule_for(pc)
        assert rule is not None
        assert rule.rule_for(X86_64.return_address).kind is RegKind.UNDEFINED
    assert table.rule_for(TEXT + 0x50).rule_for(16).kind is RegKind.OFFSET


def test_aarch64_return_address_in_lr_or_at_the_frame_s_bottom() -> None:
    """An empty frame leaves the return address in LR; a built one saved it at [sp]."""
    table = GoPclnTab(build_pclntab(MAGIC_GO118, FUNCTIONS), AARCH64)
    empty = table.rule_for(TEXT)
    assert empty is not None
    assert (empty.cfa.register, empty.cfa.offset) == (31, 0)
    assert empty.registers == ()
    assert empty.return_address_register == 30
    built = table.rule_for(TEXT + 8)
    assert built is not None and built.cfa.offset == 40
    assert built.rule_for(30).kind is RegKind.OFFSET and built.rule_for(30).offset == -40


def test_pie_text_start_comes_from_the_caller_when_the_header_s_is_zero() -> None:
    data = bytearray(build_pclntab(MAGIC_GO118, FUNCTIONS))
    data[24:32] = bytes(8)  # textStart, unrelocated
    assert GoPclnTab(bytes(data), X86_64, TEXT).function_at(TEXT + 8) is not None
    assert GoPclnTab(bytes(data), X86_64).function_at(TEXT + 8) is None


# -- corrupt tables -------------------------------------------------------------------


def _corrupt(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda data: data[:6],  # cut inside the header
        lambda data: data[:40],  # header cut off
        lambda data: _corrupt(data, 0, struct.pack("<I", 0xFFFFFFFB)),  # Go 1.2–1.15
        lambda data: _corrupt(data, 7, b"\x03"),  # pointer size 3
        lambda data: _corrupt(data, 8, struct.pack("<Q", 1 << 40)),  # nfunc
        lambda data: _corrupt(data, 64, struct.pack("<Q", 1 << 40)),  # pclnOffset
    ],
    ids=["short", "header-cut", "old-magic", "pointer-size", "nfunc", "functab-offset"],
)
def test_corrupt_headers_are_format_errors(mutate) -> None:
    with pytest.raises(FormatError):
        GoPclnTab(mutate(build_pclntab(MAGIC_GO118, FUNCTIONS)), X86_64)


def test_corrupt_records_are_format_errors() -> None:
    data = build_pclntab(MAGIC_GO118, FUNCTIONS)
    functab = struct.unpack_from("<Q", data, 64)[0]
    # The first record's offset points far outside the table.
    bad_record = _corrupt(data, functab + 4, struct.pack("<I", 1 << 30))
    with pytest.raises(FormatError):
        GoPclnTab(bad_record, X86_64).rule_for(TEXT + 8)
    # The first record's pcsp offset points outside the table.
    record = functab + struct.unpack_from("<I", data, functab + 4)[0]
    bad_pcsp = _corrupt(data, record + 16, struct.pack("<I", 1 << 30))
    with pytest.raises(FormatError):
        GoPclnTab(bad_pcsp, X86_64).rule_for(TEXT + 8)
    # A record whose entry disagrees with the function table.
    bad_entry = _corrupt(data, record, struct.pack("<I", 0x10))
    with pytest.raises(FormatError):
        GoPclnTab(bad_entry, X86_64).rule_for(TEXT + 8)
