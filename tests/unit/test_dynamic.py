"""Run-time registered unwind info: libunwind's dynamic list, the GDB JIT interface, perf maps.

Unit tests build the target's structures as bytes in a fake address space
(with holes: reading one raises MemoryReadError, as a target does).  The
DYNAMIC interpretation is checked against a DWARF CFA program describing the
same machine code, decoded by the CFI decoder.  The live programs of
testprogs/jit/ and the installed libunwind are tests/system/test_dynamic.py.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.errors import FormatError, MemoryReadError
from liveunwind.formats.elf import ElfImage
from liveunwind.formats.unwind.dwarf_cfi import CfiTable
from liveunwind.formats.unwind.dynamic import (
    UNW_DYN_ADD,
    UNW_DYN_ALIAS,
    UNW_DYN_COPY_STATE,
    UNW_DYN_LABEL_STATE,
    UNW_DYN_POP_FRAMES,
    UNW_DYN_SAVE_REG,
    UNW_DYN_SPILL_FP_REL,
    UNW_DYN_SPILL_SP_REL,
    UNW_DYN_STOP,
    UNW_INFO_FORMAT_DYNAMIC,
    UNW_INFO_FORMAT_IP_OFFSET,
    UNW_INFO_FORMAT_REMOTE_TABLE,
)
from liveunwind.formats.unwind.perfmap import JitRange, parse_perf_map
from liveunwind.formats.unwind.rules import RegisterRule, RegKind, UnwindRule
from liveunwind.modules.jit import MAX_LIST_ENTRIES, MAX_PROBLEMS, DynamicRegistry, find_roots

X86 = arch_by_name("x86_64")
ARM = arch_by_name("aarch64")
RBX, RBP, RSP, R12, RIP = 3, 6, 7, 12, 16
X29, X30, SP = 29, 30, 31

# ---------------------------------------------------------------------------------------------
# A fake address space


class Memory:
    """Sparse target memory: bytes placed at addresses, everything else unreadable."""

    def __init__(self) -> None:
        self.blocks: dict[int, bytearray] = {}
        self.reads = 0
        self._next = 0x10000

    def put(self, address: int, data: bytes) -> int:
        """Places ``data`` at ``address``, padded with zeros to the end of its page."""
        end = -(-(address + len(data)) // 4096) * 4096
        self.blocks[address] = bytearray(data.ljust(end - address, b"\0"))
        return address

    def alloc(self, data: bytes) -> int:
        """Places ``data`` on fresh pages, with an unreadable page before and after."""
        address = self._next
        self._next += (-(-len(data) // 4096) + 1) * 4096
        return self.put(address, data)

    def read(self, address: int, size: int) -> bytes:
        self.reads += 1
        for start, block in self.blocks.items():
            if start <= address and address + size <= start + len(block):
                return bytes(block[address - start : address - start + size])
        raise MemoryReadError(address, size)


def op(tag: int, reg: int = 0, when: int = 0, val: int = 0) -> bytes:
    return struct.pack("<bbhiQ", tag, 0, reg, when, val & (2**64 - 1))


def region(memory: Memory, insn_count: int, ops: list[bytes], next_region: int = 0) -> int:
    return memory.alloc(struct.pack("<QiI", next_region, insn_count, len(ops)) + b"".join(ops))


def regions(memory: Memory, *specs: tuple[int, list[bytes]]) -> int:
    """A linked region list, first spec first."""
    address = 0
    for insn_count, ops in reversed(specs):
        address = region(memory, insn_count, ops, address)
    return address


def info(
    start: int, end: int, fmt: int, union: bytes, *, next_entry: int = 0, gp: int = 0
) -> bytes:
    return struct.pack("<QQQQQiiQ", next_entry, 0, start, end, gp, fmt, 0, 0) + union


def proc_union(name_ptr: int, regions_address: int) -> bytes:
    return struct.pack("<QQIiQ", name_ptr, 0, 0, 0, regions_address)


def table_union(name_ptr: int, segbase: int, table_len: int, table: int) -> bytes:
    return struct.pack("<QQQQ", name_ptr, segbase, table_len, table)


def libunwind_list(memory: Memory, entries: list[bytes], generation: int = 7) -> int:
    """Places entries (built with next_entry=0) and links them; returns the list head."""
    addresses = [memory.alloc(entry) for entry in entries]
    for address, following in zip(addresses, [*addresses[1:], 0]):
        memory.blocks[address][0:8] = struct.pack("<Q", following)
    return memory.alloc(struct.pack("<IIQ", 0, generation, addresses[0] if addresses else 0))


def dynamic_procedure(
    memory: Memory, start: int, end: int, name: str, *specs: tuple[int, list[bytes]]
) -> bytes:
    name_ptr = memory.alloc(name.encode() + b"\0")
    return info(start, end, UNW_INFO_FORMAT_DYNAMIC, proc_union(name_ptr, regions(memory, *specs)))


def registry(memory: Memory, arch=X86, **roots) -> DynamicRegistry:  # type: ignore[no-untyped-def]
    return DynamicRegistry(memory.read, arch, **roots)


# ---------------------------------------------------------------------------------------------
# The x86_64 functions of testprogs/jit/jitcode.h: boundaries, DYNAMIC ops, CFA programs

OUTER_SIZE, INNER_SIZE = 0x2B, 0x18
OUTER_BOUNDARIES = [0, 1, 5, 0xA, 0xE, 0x11, 0x14, 0x1E, 0x20, 0x25, 0x29, 0x2A]
INNER_BOUNDARIES = [0, 1, 4, 6, 0xA, 0xD, 0x10, 0x14, 0x16, 0x17]
OUTER_OPS = (
    (
        0x25,
        [
            op(UNW_DYN_ADD, RSP, 0, -8),
            op(UNW_DYN_SPILL_SP_REL, RBX, 0, 0),
            op(UNW_DYN_ADD, RSP, 1, -27),
            op(UNW_DYN_SPILL_SP_REL, RBP, 5, 3),
            op(UNW_DYN_ADD, RSP, 0xA, -5),
        ],
    ),
    (-6, [op(UNW_DYN_ADD, RSP, 0, 32), op(UNW_DYN_POP_FRAMES, 0, 4, 1)]),
)
INNER_OPS = (
    (
        0x16,
        [
            # deliberately not in `when` order: the interpretation sorts them
            op(UNW_DYN_ADD, RSP, 6, -24),
            op(UNW_DYN_SPILL_SP_REL, RBP, 0, 0),
            op(UNW_DYN_ADD, RSP, 0, -8),
            op(UNW_DYN_SAVE_REG, RSP, 1, RBP),
            op(UNW_DYN_SPILL_FP_REL, R12, 4, -8),
            op(UNW_DYN_ADD, RSP, 4, -8),
        ],
    ),
    (-2, [op(UNW_DYN_POP_FRAMES, 0, 0, 1)]),
)
OUTER_CFA = bytes.fromhex("410e1083 02440e2b 458605 440e30 5b0e10 410e08".replace(" ", ""))
INNER_CFA = bytes.fromhex("410e108602 430d06 428c03 510c0708".replace(" ", ""))
CIE_X86 = bytes.fromhex(
    "14000000 00000000 01 7a5200 01 78 10 01 1b 0c0708 9001 0000".replace(" ", "")
)


def eh_frame(section_address: int, fdes: list[tuple[int, int, bytes]]) -> tuple[bytes, list[int]]:
    """An .eh_frame at ``section_address``: CIE_X86 and one FDE per (pc, size, program)."""
    data = bytearray(CIE_X86)
    offsets = []
    for pc, size, program in fdes:
        offset = len(data)
        body = struct.pack("<I", offset + 4)
        body += struct.pack("<iI", pc - (section_address + offset + 8), size) + b"\0" + program
        body += b"\0" * (-len(body) % 4)
        data += struct.pack("<I", len(body)) + body
        offsets.append(offset)
    return bytes(data + b"\0\0\0\0"), offsets


def comparable(rule: UnwindRule, registers: bool) -> tuple[object, ...]:
    """The CFA and return address (and, if asked, every register rule) of a rule."""
    return (
        rule.cfa,
        rule.rule_for(rule.return_address_register),
        rule.registers if registers else None,
    )


@pytest.mark.parametrize(
    ("size", "boundaries", "ops", "program", "epilogue"),
    [
        (OUTER_SIZE, OUTER_BOUNDARIES, OUTER_OPS, OUTER_CFA, 0x25),
        (INNER_SIZE, INNER_BOUNDARIES, INNER_OPS, INNER_CFA, 0x17),
    ],
    ids=["outer", "inner"],
)
def test_dynamic_ops_equal_cfi_of_the_same_code(
    size: int, boundaries: list[int], ops: tuple, program: bytes, epilogue: int
) -> None:
    memory = Memory()
    start = 0x7F0000001000
    head = libunwind_list(memory, [dynamic_procedure(memory, start, start + size, "f", *ops)])
    dynamic = registry(memory, libunwind_lists=[head])
    data, _ = eh_frame(start + 0x1000, [(start, size, program)])
    cfi = CfiTable(data, start + 0x1000, kind="eh_frame")
    for offset in boundaries:
        ours = dynamic.rule_for(start + offset)
        theirs = cfi.rule_for(start + offset)
        assert ours is not None and theirs is not None
        # After the epilogue restored registers, DYNAMIC drops their rules and CFI keeps them.
        assert comparable(ours, offset < epilogue) == comparable(theirs, offset < epilogue), (
            f"at +{offset:#x}: {ours.describe(X86.register_name)} vs "
            f"{theirs.describe(X86.register_name)}"
        )
    assert dynamic.rule_for(start + size) is None
    assert dynamic.name_for(start + 3) == "f"


def test_aarch64_conventions_count_words_and_keep_ra_in_x30() -> None:
    """stp x29,x30,[sp,#-32]!; mov x29,sp; str x19,[x29,#16]; ...; ldp; ret."""
    memory = Memory()
    start = 0x400000
    ops = [
        op(UNW_DYN_ADD, SP, 0, -32),
        op(UNW_DYN_SPILL_SP_REL, X29, 0, 0),
        op(UNW_DYN_SPILL_SP_REL, X30, 0, 8),
        op(UNW_DYN_SAVE_REG, SP, 1, X29),
        op(UNW_DYN_SPILL_FP_REL, 19, 2, 16),
    ]
    entry = dynamic_procedure(memory, start, start + 40, "arm", (8, ops), (-2, [op(5, 0, 0, 1)]))
    dynamic = registry(memory, ARM, libunwind_lists=[libunwind_list(memory, [entry])])
    at_entry = dynamic.rule_for(start)
    assert at_entry is not None
    assert (at_entry.cfa.register, at_entry.cfa.offset, at_entry.registers) == (SP, 0, ())
    assert at_entry.return_address_register == X30
    after_stp = dynamic.rule_for(start + 4)
    assert after_stp is not None
    assert (after_stp.cfa.register, after_stp.cfa.offset) == (SP, 32)
    assert after_stp.rule_for(X30) == RegisterRule(RegKind.OFFSET, -24)
    body = dynamic.rule_for(start + 12)
    assert body is not None
    assert (body.cfa.register, body.cfa.offset) == (X29, 32)
    assert body.rule_for(19) == RegisterRule(RegKind.OFFSET, -16)
    assert body.rule_for(X29) == RegisterRule(RegKind.OFFSET, -32)
    # the last region covers the last 2 words; POP_FRAMES after its first (the ldp)
    assert dynamic.rule_for(start + 32) == body
    ret = dynamic.rule_for(start + 36)
    assert ret is not None and (ret.cfa.register, ret.cfa.offset, ret.registers) == (SP, 0, ())


def test_label_copy_state_stop_alias_and_when_clamping() -> None:
    """Prologue, an early epilogue, then the body again by COPY_STATE of a label."""
    memory = Memory()
    start = 0x1000
    prologue = [op(UNW_DYN_ADD, RSP, 0, -16), op(UNW_DYN_SPILL_SP_REL, RBX, 0, 8)]
    early_exit = [
        op(UNW_DYN_LABEL_STATE, when=-1, val=1),
        op(UNW_DYN_ALIAS, when=0, val=0xDEAD),
        op(UNW_DYN_ADD, RSP, 99, 16),  # when past the region: its last instruction
        op(UNW_DYN_STOP),
        op(UNW_DYN_ADD, RSP, 0, -1000),  # after STOP: ignored
    ]
    body_again = [op(UNW_DYN_COPY_STATE, when=-1, val=1)]
    entry = dynamic_procedure(
        memory,
        start,
        start + 40,
        "labels",
        (4, prologue),
        (2, early_exit),
        (2, []),
        (32, body_again),
    )
    dynamic = registry(memory, libunwind_lists=[libunwind_list(memory, [entry])])

    def cfa_offset(offset: int) -> int:
        rule = dynamic.rule_for(start + offset)
        assert rule is not None and rule.cfa.register == RSP
        return rule.cfa.offset

    offsets = (0, 1, 4, 5, 6, 7, 8, 20)
    assert [cfa_offset(offset) for offset in offsets] == [8, 24, 24, 24, 8, 8, 24, 24]
    body = dynamic.rule_for(start + 20)
    assert body is not None and body.rule_for(RBX) == RegisterRule(RegKind.OFFSET, -16)


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (((-2, []), (2, [])), "negative insn_count"),
        (((30, []),), "longer than the procedure"),
        (((4, [op(UNW_DYN_ADD, RBX, 0, 8)]),), "ADD to register"),
        (((4, [op(UNW_DYN_SPILL_FP_REL, RBX, 0, 8)]),), "before the frame pointer"),
        (((4, [op(UNW_DYN_COPY_STATE, when=-1, val=3)]),), "unknown label"),
        (((4, [op(UNW_DYN_SAVE_REG, RSP, 0, RBX)]),), "not the frame pointer"),
        (((4, [op(UNW_DYN_POP_FRAMES, 0, 0, 0)]),), "POP_FRAMES"),
        (((4, [op(42)]),), "unknown op tag"),
        (((2, []), (-3, [])), "overlaps"),
    ],
)
def test_bad_dynamic_info_raises_format_error_for_its_pcs(specs: tuple, message: str) -> None:
    memory = Memory()
    entry = dynamic_procedure(memory, 0x1000, 0x1004, "bad", *specs)
    dynamic = registry(memory, libunwind_lists=[libunwind_list(memory, [entry])])
    with pytest.raises(FormatError, match=message):
        dynamic.rule_for(0x1003)
    assert dynamic.name_for(0x1003) == "bad"  # the name survives a bad description


# ---------------------------------------------------------------------------------------------
# The list: walking, generations, corruption


def test_list_walk_finds_every_entry_and_the_names() -> None:
    memory = Memory()
    entries = [
        dynamic_procedure(memory, 0x1000 * i, 0x1000 * i + 0x10, f"f{i}", (0, []))
        for i in range(1, 6)
    ]
    unnamed = info(0x9000, 0x9100, UNW_INFO_FORMAT_DYNAMIC, proc_union(0, 0))
    dynamic = registry(memory, libunwind_lists=[libunwind_list(memory, [*entries, unnamed])])
    assert [(r.start, r.end, r.name) for r in dynamic.ranges()] == [
        *((0x1000 * i, 0x1000 * i + 0x10, f"f{i}") for i in range(1, 6)),
        (0x9000, 0x9100, "jit@0x9000"),
    ]
    assert dynamic.problems == []
    assert dynamic.rule_for(0x0FFF) is None and dynamic.name_for(0x5010) is None


def test_cyclic_list_ends_with_a_problem() -> None:
    memory = Memory()
    a = memory.alloc(info(0x1000, 0x1010, UNW_INFO_FORMAT_DYNAMIC, proc_union(0, 0)))
    b = memory.alloc(info(0x2000, 0x2010, UNW_INFO_FORMAT_DYNAMIC, proc_union(0, 0)))
    memory.blocks[a][0:8] = struct.pack("<Q", b)
    memory.blocks[b][0:8] = struct.pack("<Q", a)
    head = memory.alloc(struct.pack("<IIQ", 0, 1, a))
    dynamic = registry(memory, libunwind_lists=[head])
    assert [r.start for r in dynamic.ranges()] == [0x1000, 0x2000]
    assert any("cycle" in problem for problem in dynamic.problems)


def test_long_list_is_bounded() -> None:
    """A list that never ends (each entry points to a fresh one) stops at the bound."""

    class Endless(Memory):
        def read(self, address: int, size: int) -> bytes:
            if address == 0x10:
                return struct.pack("<IIQ", 0, 1, 0x100000)
            self.reads += 1
            start = address - address % 0x100
            return struct.pack("<QQQQQii", start + 0x100, 0, start, start + 1, 0, 9, 0).ljust(
                size, b"\0"
            )[:size]

    memory = Endless()
    began = time.process_time()  # CPU seconds: the work is bounded, however busy the machine
    dynamic = registry(memory, libunwind_lists=[0x10])
    # format 9 is unsupported: every entry keeps its range but not its unwind info
    assert len(dynamic.ranges()) == MAX_LIST_ENTRIES
    with pytest.raises(FormatError, match="unsupported unwind-info format 9"):
        dynamic.rule_for(0x100000)
    assert time.process_time() - began < 30
    assert memory.reads <= 2 * MAX_LIST_ENTRIES + 10
    assert len(dynamic.problems) == MAX_PROBLEMS
    assert dynamic.problems[-1].endswith("more problems")


def test_unmapped_pointers_cost_only_their_entries() -> None:
    memory = Memory()
    good = dynamic_procedure(memory, 0x1000, 0x1010, "good", (16, [op(UNW_DYN_ADD, RSP, 0, -8)]))
    bad_regions = info(0x2000, 0x2010, UNW_INFO_FORMAT_DYNAMIC, proc_union(0xBAD000, 0xBAD000))
    huge_ops = info(
        0x3000,
        0x3010,
        UNW_INFO_FORMAT_DYNAMIC,
        proc_union(0, memory.alloc(struct.pack("<QiI", 0, 4, 0xFFFFFFFF))),
    )
    head = libunwind_list(memory, [good, bad_regions, huge_ops])
    # the last entry points to unmapped memory: the walk stops there
    last = struct.unpack("<Q", bytes(memory.blocks[head][8:16]))[0]
    for _ in range(2):
        last = struct.unpack("<Q", memory.read(last, 8))[0]
    memory.blocks[last][0:8] = struct.pack("<Q", 0xDEAD0000)
    dynamic = registry(memory, libunwind_lists=[head])
    assert [r.name for r in dynamic.ranges()] == ["good", "jit@0x2000", "jit@0x3000"]
    assert dynamic.rule_for(0x1005) is not None
    with pytest.raises(FormatError, match="cannot read"):
        dynamic.rule_for(0x2005)
    with pytest.raises(FormatError, match="ops"):
        dynamic.rule_for(0x3005)
    assert len(dynamic.problems) == 4  # name, regions, op count, the unreadable next entry


def test_unreadable_list_head_is_a_problem_not_an_error() -> None:
    dynamic = registry(Memory(), libunwind_lists=[0x1234], jit_descriptors=[0x5678])
    assert dynamic.ranges() == [] and dynamic.rule_for(0x1234) is None
    assert len(dynamic.problems) == 2


def test_generation_change_rereads_the_list() -> None:
    """A writer adds an entry while the first walk runs: the second walk sees it."""
    memory = Memory()
    first = dynamic_procedure(memory, 0x1000, 0x1010, "first", (0, []))
    head = libunwind_list(memory, [first], generation=1)
    old_first = struct.unpack("<Q", bytes(memory.blocks[head][8:16]))[0]
    second = memory.alloc(dynamic_procedure(memory, 0x2000, 0x2010, "added", (0, [])))
    memory.blocks[second][0:8] = struct.pack("<Q", old_first)
    header_reads = [0]
    plain_read = memory.read

    def racing_read(address: int, size: int) -> bytes:
        if address == head:
            header_reads[0] += 1
            if header_reads[0] == 2:  # the writer registers between our two header reads
                memory.blocks[head][:] = struct.pack("<IIQ", 0, 2, second)
        return plain_read(address, size)

    dynamic = DynamicRegistry(racing_read, X86, libunwind_lists=[head])
    assert [r.name for r in dynamic.ranges()] == ["first", "added"]
    assert header_reads[0] == 4 and dynamic.problems == []


def test_generation_that_never_settles_is_bounded() -> None:
    memory = Memory()
    head = libunwind_list(memory, [dynamic_procedure(memory, 0x1000, 0x1010, "f", (0, []))])
    plain_read = memory.read
    counter = [0]

    def changing(address: int, size: int) -> bytes:
        data = plain_read(address, size)
        if address == head:
            counter[0] += 1
            return data[:4] + struct.pack("<I", counter[0]) + data[8:]
        return data

    dynamic = DynamicRegistry(changing, X86, libunwind_lists=[head])
    assert [r.name for r in dynamic.ranges()] == ["f"]
    assert any("kept changing" in problem for problem in dynamic.problems)


# ---------------------------------------------------------------------------------------------
# FDE tables


def table_setup(fmt: int = UNW_INFO_FORMAT_REMOTE_TABLE) -> tuple[Memory, int, int, int]:
    """Two functions (jitcode.h's outer and inner) at segbase+0 and +0x40, FDEs at +0x1000."""
    memory = Memory()
    segbase = 0x7F0000000000
    data, offsets = eh_frame(segbase + 0x1000, [(segbase, OUTER_SIZE, OUTER_CFA)])
    more, more_offsets = eh_frame(segbase + 0x1000, [(segbase + 0x40, INNER_SIZE, INNER_CFA)])
    # one section with both FDEs: reuse the CIE at 0, append the second FDE after the first
    second_fde = bytearray(more[more_offsets[0] : -4])
    position = len(data) - 4
    struct.pack_into("<I", second_fde, 4, position + 4)
    pc_field = segbase + 0x1000 + position + 8
    struct.pack_into("<i", second_fde, 8, segbase + 0x40 - pc_field)
    section = data[:-4] + bytes(second_fde) + b"\0\0\0\0"
    memory.put(segbase + 0x1000, section)
    # start_ip == segbase, so IP_OFFSET tables hold the same start offsets
    table = struct.pack("<iiii", 0, 0x1000 + offsets[0], 0x40, 0x1000 + position)
    table_address = memory.alloc(table)
    name = memory.alloc(b"jit-table\0")
    entry = info(segbase, segbase + 0x58, fmt, table_union(name, segbase, 2, table_address), gp=0)
    return memory, libunwind_list(memory, [entry]), segbase, table_address


@pytest.mark.parametrize("fmt", [UNW_INFO_FORMAT_REMOTE_TABLE, UNW_INFO_FORMAT_IP_OFFSET])
def test_table_leads_to_the_fde_of_the_pc(fmt: int) -> None:
    memory, head, segbase, _ = table_setup(fmt)
    dynamic = registry(memory, libunwind_lists=[head])
    outer = dynamic.rule_for(segbase + 0x1F)
    inner = dynamic.rule_for(segbase + 0x4F)
    assert outer is not None and inner is not None
    assert (outer.cfa.register, outer.cfa.offset) == (RSP, 48)
    assert outer.rule_for(RBP) == RegisterRule(RegKind.OFFSET, -40)
    assert (inner.cfa.register, inner.cfa.offset) == (RBP, 16)
    assert (outer.start, outer.end) == (segbase, segbase + OUTER_SIZE)
    assert dynamic.rule_for(segbase + 0x30) is None  # between the two functions
    assert dynamic.name_for(segbase + 0x30) == "jit-table"
    # the snapshot copies the list, the entry, the table and the FDEs with their CIE
    copied = dynamic.read_all()
    assert any(
        start <= segbase + 0x1000 and segbase + 0x1060 <= start + size for start, size in copied
    )
    assert any(start <= head < start + size for start, size in copied)


def test_table_with_bad_fde_offset_is_a_format_error() -> None:
    memory, head, segbase, table_address = table_setup()
    struct.pack_into("<i", memory.blocks[table_address], 4, 0x7FFFFFF0)
    dynamic = registry(memory, libunwind_lists=[head])
    with pytest.raises(FormatError):
        dynamic.rule_for(segbase + 0x10)
    assert dynamic.rule_for(segbase + 0x4F) is not None


def test_table_len_too_large_is_refused_before_reading() -> None:
    memory = Memory()
    entry = info(0x1000, 0x2000, UNW_INFO_FORMAT_REMOTE_TABLE, table_union(0, 0, 1 << 40, 0x10))
    dynamic = registry(memory, libunwind_lists=[libunwind_list(memory, [entry])])
    with pytest.raises(FormatError, match="too large"):
        dynamic.rule_for(0x1800)


# ---------------------------------------------------------------------------------------------
# In-memory ELF objects (GDB JIT interface) and root finding


@dataclass
class Sec:
    name: str
    type: int
    flags: int = 0
    address: int = 0
    data: bytes = b""
    link: int = 0
    info: int = 0
    entsize: int = 0


def build_elf(
    sections: list[Sec], *, machine: int = 62, elf_type: int = 1, load: int | None = None
) -> bytes:
    """A minimal ELF64 LE file; ``load``: one PT_LOAD mapping the whole file at that address."""
    names = b"\0"
    name_offsets = []
    for section in [*sections, Sec(".shstrtab", 3)]:
        name_offsets.append(len(names))
        names += section.name.encode() + b"\0"
    all_sections = [*sections, Sec(".shstrtab", 3, data=names)]
    body = bytearray(b"\0" * (64 + (56 if load is not None else 0)))
    offsets = []
    for section in all_sections:
        body += b"\0" * (-len(body) % 16)
        offsets.append(len(body))
        body += section.data
    body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    body += b"\0" * 64
    for section, name, offset in zip(all_sections, name_offsets, offsets):
        body += struct.pack(
            "<IIQQQQIIQQ",
            name,
            section.type,
            section.flags,
            section.address,
            offset,
            len(section.data),
            section.link,
            section.info,
            8,
            section.entsize,
        )
    header = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header += struct.pack(
        "<HHIQQQIHHHHHH",
        elf_type,
        machine,
        1,
        0,
        64 if load is not None else 0,
        shoff,
        0,
        64,
        56,
        1 if load is not None else 0,
        64,
        len(all_sections) + 1,
        len(all_sections),
    )
    body[:64] = header
    if load is not None:
        body[64:120] = struct.pack("<IIQQQQQQ", 1, 5, 0, load, load, len(body), len(body), 4096)
    return bytes(body)


def symtab(symbols: list[tuple[str, int, int, int, int]]) -> tuple[bytes, bytes]:
    """(.symtab, .strtab) for (name, value, size, type, shndx) global symbols."""
    strings = b"\0"
    table = b"\0" * 24
    for name, value, size, kind, shndx in symbols:
        table += struct.pack("<IBBHQQ", len(strings), 0x10 | kind, 0, shndx, value, size)
        strings += name.encode() + b"\0"
    return table, strings


def jit_object(memory: Memory, address: int, code: int) -> bytes:
    """An ET_REL object like testprogs/jit/jit-gdb.c builds, to be placed at ``address``."""
    table, strings = symtab([("outer", 0, OUTER_SIZE, 2, 1), ("inner", 0x40, INNER_SIZE, 2, 1)])
    # the .eh_frame sits at file offset 0x50 (after the 64-byte header and 16-aligned .text)
    text = b"\xcc" * 0x58
    eh_address = address + 0x40 + 0x60
    data, _ = eh_frame(
        eh_address, [(code, OUTER_SIZE, OUTER_CFA), (code + 0x40, INNER_SIZE, INNER_CFA)]
    )
    sections = [
        Sec(".text", 1, 6, code, text),
        Sec(".eh_frame", 1, 2, eh_address, data),
        Sec(".symtab", 2, data=table, link=4, info=1, entsize=24),
        Sec(".strtab", 3, data=strings),
    ]
    image = build_elf(sections)
    assert ElfImage(image).sections[".eh_frame"].offset == 0xA0
    return image


def jit_descriptor(memory: Memory, objects: list[bytes | tuple[int, int]], version: int = 1) -> int:
    """A descriptor and entries; an object is bytes, or an (address, size) it claims."""
    entries = []
    for item in objects:
        if isinstance(item, tuple):
            entries.append(item)
        else:
            entries.append((memory.alloc(item), len(item)))
    addresses = [memory.alloc(b"\0" * 32) for _ in entries]
    for address, following, (symfile, size) in zip(addresses, [*addresses[1:], 0], entries):
        memory.blocks[address][:] = struct.pack("<QQQQ", following, 0, symfile, size)
    first = addresses[0] if addresses else 0
    return memory.alloc(struct.pack("<IIQQ", version, 1, first, first))


def test_gdb_jit_object_gives_functions_and_rules() -> None:
    memory = Memory()
    code = 0x7F0000000000
    address = code + 0x10000
    memory.put(address, jit_object(memory, address, code))
    garbage = b"not an ELF file at all" * 4
    descriptor = jit_descriptor(memory, [garbage, (address, len(memory.blocks[address]))])
    dynamic = registry(memory, jit_descriptors=[descriptor])
    assert [(r.start, r.end, r.name, r.source) for r in dynamic.ranges()] == [
        (code, code + OUTER_SIZE, "outer", "gdb-jit"),
        (code + 0x40, code + 0x40 + INNER_SIZE, "inner", "gdb-jit"),
    ]
    rule = dynamic.rule_for(code + 0x1F)
    assert rule is not None and (rule.cfa.register, rule.cfa.offset) == (RSP, 48)
    assert dynamic.name_for(code + 0x41) == "inner"
    assert len(dynamic.problems) == 1 and "not an ELF" in dynamic.problems[0]


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda m: jit_descriptor(m, [], version=2), "version 2"),
        (lambda m: jit_descriptor(m, [(0x10, 1 << 40)]), "over the limit"),
        (lambda m: jit_descriptor(m, [(0xBAD0000, 64)]), "cannot read"),
    ],
)
def test_bad_jit_descriptors_are_problems(build: Callable[[Memory], int], problem: str) -> None:
    memory = Memory()
    dynamic = registry(memory, jit_descriptors=[build(memory)])
    assert dynamic.ranges() == []
    assert len(dynamic.problems) == 1 and problem in dynamic.problems[0]


def test_cyclic_jit_list_ends_with_a_problem() -> None:
    memory = Memory()
    descriptor = jit_descriptor(memory, [b"x", b"y"])
    first = struct.unpack("<Q", bytes(memory.blocks[descriptor][16:24]))[0]
    second = struct.unpack("<Q", bytes(memory.blocks[first][0:8]))[0]
    memory.blocks[second][0:8] = struct.pack("<Q", first)
    dynamic = registry(memory, jit_descriptors=[descriptor])
    assert dynamic.ranges() == []
    assert any("cycle" in problem for problem in dynamic.problems)


def test_perf_map_names_only_what_nothing_else_names() -> None:
    memory = Memory()
    entry = dynamic_procedure(memory, 0x1000, 0x1100, "registered", (0, []))
    perf = parse_perf_map(
        "1000 100 perf name of registered\n"
        "0x2000 0x20 LazyCompile:*foo bar.js:12\n"
        "garbage line\n"
        "3000 zz bad size\n"
        "4000 0 empty\n"
    )
    assert perf[1] == JitRange(0x2000, 0x2020, "LazyCompile:*foo bar.js:12", "perf-map")
    assert len(perf) == 2
    dynamic = registry(memory, libunwind_lists=[libunwind_list(memory, [entry])], perf_map=perf)
    assert dynamic.name_for(0x1010) == "registered"
    assert dynamic.name_for(0x2010) == "LazyCompile:*foo bar.js:12"
    assert dynamic.rule_for(0x2010) is None and dynamic.covers(0x2010)
    assert not dynamic.covers(0x2020)


def test_roots_from_symbols_and_from_the_accessor_code() -> None:
    table, strings = symtab(
        [("__jit_debug_descriptor", 0x2040, 24, 1, 1), ("_U_dyn_info_list", 0x2080, 16, 1, 1)]
    )
    sections = [
        Sec(".data", 1, 3, 0x2000, b"\0" * 0x100),
        Sec(".symtab", 2, data=table, link=3, info=1, entsize=24),
        Sec(".strtab", 3, data=strings),
    ]
    roots = find_roots(ElfImage(build_elf(sections)), 0x10000)
    assert roots.jit_descriptors == (0x12040,) and roots.libunwind_lists == (0x12080,)

    def accessor_image(machine: int, code: bytes) -> ElfImage:
        # .text at file offset 0x80 with the PT_LOAD mapping the file at 0x400000
        table, strings = symtab([("_U_dyn_info_list_addr", 0x400080, 16, 2, 1)])
        text = Sec(".text", 1, 6, 0x400080, code.ljust(16, b"\0"))
        image = build_elf(
            [
                text,
                Sec(".symtab", 2, data=table, link=3, info=1, entsize=24),
                Sec(".strtab", 3, data=strings),
            ],
            machine=machine,
            elf_type=3,
            load=0x400000,
        )
        assert ElfImage(image).sections[".text"].offset == 0x80
        return ElfImage(image)

    lea = bytes.fromhex("f30f1efa") + b"\x48\x8d\x05" + struct.pack("<i", 0x1000) + b"\xc3"
    assert find_roots(accessor_image(62, lea), 0x100).libunwind_lists == (
        0x400080 + 4 + 7 + 0x1000 + 0x100,
    )
    # adrp x0, #+0x12000 ; add x0, x0, #0x350 ; ret
    page_delta = 0x12
    adrp = 0x90000000 | ((page_delta & 3) << 29) | ((page_delta >> 2) << 5)
    add = 0x91000000 | (0x350 << 10)
    words = struct.pack("<III", adrp, add, 0xD65F03C0)
    assert find_roots(accessor_image(183, words), 0).libunwind_lists == (0x412350,)
    with pytest.raises(FormatError, match="cannot decode"):
        find_roots(accessor_image(62, b"\x48\x8b\x05\0\0\0\0\xc3"), 0)
