"""objdump's ``--sframe`` dump as ground truth, parsed independently of the decoder, and rules.

Token by token, so a decoding error cannot hide behind a matching renderer:
every header field, function and row objdump printed must be what the
decoder found, and every rule the decoder gives must be what the row says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from liveunwind.arch.aarch64 import AARCH64
from liveunwind.arch.x86_64 import X86_64
from liveunwind.formats.unwind.rules import RegKind
from liveunwind.formats.unwind.sframe import (
    FdeType,
    Location,
    LocKind,
    PcType,
    SFrameFunction,
    SFrameRow,
    SFrameSection,
)

ARCHES = {"x86_64": X86_64, "aarch64": AARCH64}
CONTENTS_LINE = "Contents of the SFrame section .sframe:\n"


@dataclass
class DumpedFunction:
    index: int
    start: int
    size: int
    attributes: str
    pauth_b: bool
    mask: bool
    rows: list[tuple[int, str, str, str, bool]]  # address, CFA, FP, RA, signed


_FUNC_LINE = re.compile(
    r"\s+func idx \[(\d+)\]: pc = 0x([0-9a-f]+), size = (\d+) bytes"
    r'(?:, attr = "(\w+)")?(, pauth = B key)?$'
)
_ROW_LINE = re.compile(r"\s+([0-9a-f]{16})  (RA undefined|(\S+)\s+(\S+)\s+(\S+?)(\[s\])?)\s*$")


def parse_objdump(text: str) -> tuple[dict[str, object], list[DumpedFunction]]:
    """Header fields and functions of one ``objdump --sframe`` section dump."""
    header: dict[str, object] = {"flags": []}
    functions: list[DumpedFunction] = []
    for line in text.split(CONTENTS_LINE, 1)[1].splitlines():
        if match := _FUNC_LINE.match(line):
            index, start, size, attributes, pauth = match.groups()
            functions.append(
                DumpedFunction(
                    int(index), int(start, 16), int(size), attributes or "", bool(pauth), False, []
                )
            )
        elif line.strip().startswith("STARTPC"):
            functions[-1].mask = "[m]" in line
        elif match := _ROW_LINE.match(line):
            address = int(match[1], 16)
            if match[2] == "RA undefined":
                functions[-1].rows.append((address, "", "", "RA undefined", False))
            else:
                row = (address, match[3], match[4], match[5], bool(match[6]))
                functions[-1].rows.append(row)
        elif ":" in line:
            key, _, value = line.strip().partition(":")
            header[key] = value.strip()
        elif line.strip().startswith("SFRAME_F_"):
            header["flags"].append(line.strip().rstrip(","))
    if "Flags" in header and header["Flags"] != "NONE":
        header["flags"].insert(0, str(header["Flags"]).rstrip(","))
    return header, functions


def expected_location(section: SFrameSection, token: str, column: str) -> Location:
    """What an objdump column token says, in the decoder's terms."""
    numbers = {"sp": ARCHES[section.arch].sp, "fp": ARCHES[section.arch].fp}
    if token == "RA undefined":
        return Location(LocKind.UNDEFINED)
    if token == "":
        return Location(LocKind.UNTRACKED)
    if token == "u" and column == "ra" and section.version == 1 and section.fixed_ra_offset:
        # binutils 2.40 printed the header-fixed x86_64 RA as "u".
        return Location(LocKind.FIXED, offset=section.fixed_ra_offset)
    if token in ("u", "U"):
        return Location(LocKind.UNTRACKED if token == "u" else LocKind.PADDING)
    if token == "f":
        return Location(LocKind.FIXED, offset=section.fixed_ra_offset)
    if match := re.fullmatch(r"c([+-]\d+)", token):
        return Location(LocKind.CFA_SLOT, offset=int(match[1]))
    match = re.fullmatch(r"(\()?(sp|fp|r\d+)\+?([+-]?\d+)\)?", token)
    assert match, f"unexpected objdump token {token!r}"
    register = numbers.get(match[2]) or int(match[2][1:])
    kind = LocKind.REGISTER_DEREF if match[1] else LocKind.REGISTER
    return Location(kind, register=register, offset=int(match[3]))


def row_address(function: SFrameFunction, row: SFrameRow) -> int:
    """objdump's STARTPC: absolute for PCINC, the in-block offset for PCMASK."""
    if function.pc_type is PcType.MASK:
        return row.offset
    return function.start + row.offset


def assert_matches_objdump(section: SFrameSection, dump: str) -> None:
    """Every header field, function and row objdump printed, decoded the same way."""
    header, dumped = parse_objdump(dump)
    assert header["Version"] == f"SFRAME_VERSION_{section.version}"
    assert int(header["Num FDEs"]) == section.num_fdes
    assert int(header["Num FREs"]) == section.num_fres
    flag_bits = {"SFRAME_F_FDE_SORTED": 1, "SFRAME_F_FRAME_POINTER": 2}
    flag_bits["SFRAME_F_FDE_FUNC_START_PCREL"] = 4
    assert sum(flag_bits[name] for name in header["flags"]) == section.flags
    if "CFA fixed RA offset" in header:
        assert int(header["CFA fixed RA offset"]) == section.fixed_ra_offset
    functions = list(section.functions())
    assert len(functions) == len(dumped)
    for function, want in zip(functions, dumped, strict=True):
        assert (function.index, function.start, function.size) == (
            want.index,
            want.start,
            want.size,
        )
        assert function.signal_frame == ("S" in want.attributes)
        assert (function.fde_type is FdeType.FLEX) == ("F" in want.attributes)
        assert function.pauth_key_b == want.pauth_b
        assert (function.pc_type is PcType.MASK) == want.mask
        assert len(function.rows) == len(want.rows)
        for row, (address, cfa, fp, ra, signed) in zip(function.rows, want.rows, strict=True):
            where = f"{function.index}@{address:#x}"
            assert row_address(function, row) == address, where
            assert row.cfa == expected_location(section, cfa, "cfa"), where
            assert row.fp == expected_location(section, fp, "fp"), where
            assert row.ra == expected_location(section, ra, "ra"), where
            assert row.ra_signed == signed, where
    expected_text = [line.rstrip() for line in dump.split(CONTENTS_LINE, 1)[1].splitlines()]
    rendered = [line.rstrip() for line in section.format_objdump().splitlines()]
    assert rendered == expected_text[: len(rendered)]
    assert not any(expected_text[len(rendered) :])


# -- rules -------------------------------------------------------------------------------


def expected_register(section: SFrameSection, location: Location, is_ra: bool) -> tuple:
    """The documented mapping of a row location to (RegKind, offset, register)."""
    kind = location.kind
    if kind is LocKind.UNDEFINED:
        return (RegKind.UNDEFINED, 0, -1)
    if kind in (LocKind.FIXED, LocKind.PADDING, LocKind.UNTRACKED) and is_ra:
        if section.fixed_ra_offset:
            return (RegKind.OFFSET, section.fixed_ra_offset, -1)
        return (RegKind.SAME, 0, -1)  # aarch64: the return address is still in LR
    if kind is LocKind.UNTRACKED:
        return (RegKind.SAME, 0, -1)
    if kind is LocKind.CFA_SLOT:
        return (RegKind.OFFSET, location.offset, -1)
    if kind is LocKind.REGISTER and location.offset == 0:
        return (RegKind.REGISTER, 0, location.register)
    return (RegKind.VAL_EXPRESSION if kind is LocKind.REGISTER else RegKind.EXPRESSION, 0, -1)


def probe_addresses(function: SFrameFunction) -> list[tuple[int, SFrameRow]]:
    """Each row's first byte and the byte before the next row (or the function end)."""
    probes = []
    limit = function.rep_size if function.pc_type is PcType.MASK else function.size
    for number, row in enumerate(function.rows):
        following = function.rows[number + 1 :]
        next_offset = following[0].offset if following else limit
        if next_offset == row.offset or row.offset >= limit:
            continue
        last = min(next_offset, limit) - 1
        probes += [(function.start + row.offset, row), (function.start + last, row)]
        second_block = function.start + function.rep_size + row.offset
        if function.pc_type is PcType.MASK and second_block < function.end:
            probes.append((second_block, row))
    return probes


def assert_rules_agree(section: SFrameSection) -> int:
    """rule_for at every row boundary says what the row says; returns the probe count."""
    arch = ARCHES[section.arch]
    count = 0
    for function in section.functions():
        for pc, row in probe_addresses(function):
            rule = section.rule_for(pc)
            assert rule is not None, hex(pc)
            assert (rule.start, rule.end) == (function.start, function.end)
            assert rule.return_address_register == arch.return_address
            assert rule.signal_frame == function.signal_frame
            assert rule.ra_signed == (row.ra_signed and section.arch == "aarch64")
            ra = rule.rule_for(arch.return_address)
            want_ra = expected_register(section, row.ra, is_ra=True)
            assert (ra.kind, ra.offset, ra.register) == want_ra, hex(pc)
            if not row.outermost:
                fp = rule.rule_for(arch.fp)
                assert (fp.kind, fp.offset, fp.register) == expected_register(
                    section, row.fp, is_ra=False
                ), hex(pc)
            if row.cfa.kind is LocKind.REGISTER:
                assert (rule.cfa.register, rule.cfa.offset) == (row.cfa.register, row.cfa.offset)
            count += 1
    return count
