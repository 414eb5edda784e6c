"""The DWARF CFI decoder against readelf, on objects built from tests/data/cfi/*.s and libraries.

The reference is ``readelf --debug-dump=frames-interp``: every row it prints
for every FDE must equal the row the decoder computes.  readelf cannot tell an
explicit DW_CFA_undefined from "no rule" (both print "u"), and it does not
show rows past an FDE's end nor expression contents; expressions are compared
with ``--debug-dump=frames`` through :func:`dwarf_expr.describe`.  Random
bytes as a section are tests/unit/test_dwarf_cfi.py.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liveunwind.errors import FormatError
from liveunwind.formats import leb128
from liveunwind.formats.unwind.dwarf_cfi import CfiTable, Cie, Fde
from liveunwind.formats.unwind.dwarf_expr import describe
from liveunwind.formats.unwind.rules import RegKind, UnwindRule
from tests.support.paths import DATA

CFI_DIR = DATA / "cfi"
SYSTEM_LIBRARIES = [
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib64/ld-linux-x86-64.so.2",
]

# ---------------------------------------------------------------------------------------------
# Building objects


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Assembles and links every test object once: name -> path."""
    out = tmp_path_factory.mktemp("cfi")
    targets = {
        # name: (compiler, source, link arguments or None for the object itself)
        "rules.so": ("gcc", "x86_64_rules.s", ["-shared", "-nostdlib"]),
        "encodings": (
            "gcc",
            "x86_64_encodings.s",
            ["-nostdlib", "-no-pie", "-Wl,-e,0", "-Wl,--eh-frame-hdr"],
        ),
        "limits.so": ("gcc", "x86_64_limits.s", ["-shared", "-nostdlib"]),
        "debug_frame.o": ("gcc", "debug_frame_formats.s", None),
        "aarch64.so": ("aarch64-linux-gnu-gcc", "aarch64_pauth.s", ["-shared", "-nostdlib"]),
    }
    paths = {}
    for name, (compiler, source, link) in targets.items():
        if shutil.which(compiler) is None:
            continue
        obj = out / (Path(source).stem + ".o")
        subprocess.run([compiler, "-c", str(CFI_DIR / source), "-o", str(obj)], check=True)
        if link is None:
            paths[name] = obj
            continue
        subprocess.run(
            [compiler, *link, "-o", str(out / name), str(obj)],
            check=True,
            capture_output=True,  # ld warns (on purpose) about the hand-written tables
        )
        paths[name] = out / name
    return paths


def _need(built: dict[str, Path], name: str) -> Path:
    if name not in built:
        pytest.skip(f"{name}: cross compiler not installed")
    return built[name]


@dataclass
class Elf:
    """The parts of an ELF file the tests use: sections and symbols."""

    machine: str
    sections: dict[str, tuple[bytes, int]]
    symbols: dict[str, int]

    def table(self, name: str = ".eh_frame", *, use_hdr: bool = True, **options) -> CfiTable:
        data, address = self.sections[name]
        hdr = self.sections.get(".eh_frame_hdr") if use_hdr and name == ".eh_frame" else None
        return CfiTable(
            data,
            address,
            kind="eh_frame" if name == ".eh_frame" else "debug_frame",
            hdr=hdr[0] if hdr else None,
            hdr_address=hdr[1] if hdr else 0,
            **options,
        )


_ELF_CACHE: dict[Path, Elf] = {}


def load(path: Path | str) -> Elf:
    """Reads sections and symbols with pyelftools (tests only)."""
    path = Path(path)
    if path not in _ELF_CACHE:
        with open(path, "rb") as stream:
            elf = ELFFile(stream)
            names = (".eh_frame", ".eh_frame_hdr", ".debug_frame")
            sections = {
                section.name: (section.data(), section["sh_addr"])
                for section in elf.iter_sections()
                if section.name in names
            }
            symbols = {}
            for table_name in (".symtab", ".dynsym"):
                table = elf.get_section_by_name(table_name)
                if table is not None:
                    symbols.update({sym.name: sym["st_value"] for sym in table.iter_symbols()})
            _ELF_CACHE[path] = Elf(elf["e_machine"], sections, symbols)
    return _ELF_CACHE[path]


# ---------------------------------------------------------------------------------------------
# readelf's view

_X86_64_NAMES = [
    "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
    "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip",
]  # fmt: skip
_X86_64_NUMBERED = [(r"st(\d+)", 33), (r"mm(\d+)", 41)]


def readelf_register_number(name: str, machine: str) -> int:
    """DWARF number of a register as readelf names it (binutils dwarf.c tables)."""
    if machine == "EM_X86_64":
        if name in _X86_64_NAMES:
            return _X86_64_NAMES.index(name)
        if match := re.fullmatch(r"xmm(\d+)", name):
            number = int(match[1])
            return 17 + number if number < 16 else 67 + number - 16
        for pattern, base in _X86_64_NUMBERED:
            if match := re.fullmatch(pattern, name):
                return base + int(match[1])
        if name == "rflags":
            return 49
    else:
        if name == "sp":
            return 31
        if match := re.fullmatch(r"x(\d+)", name):
            return int(match[1])
        if match := re.fullmatch(r"v(\d+)", name):
            return 64 + int(match[1])
    if match := re.fullmatch(r"r(\d+)", name):
        return int(match[1])
    raise KeyError(f"readelf register name {name!r} unknown to the test")


def readelf_register_name(number: int, machine: str) -> str:
    """The inverse of :func:`readelf_register_number` for the numbers expressions use."""
    if machine == "EM_X86_64":
        if number < 17:
            return _X86_64_NAMES[number]
        if 17 <= number < 33:
            return f"xmm{number - 17}"
    elif number < 31:
        return f"x{number}"
    elif number == 31:
        return "sp"
    elif 64 <= number < 96:
        return f"v{number - 64}"
    return f"r{number}"


@dataclass
class ReadelfEntry:
    """One FDE as readelf prints it."""

    offset: int
    pc_begin: int
    pc_end: int
    columns: list[int] = field(default_factory=list)
    ra: int = -1
    #: (location, CFA text, cells by register number)
    rows: list[tuple[int, str, dict[int, str]]] = field(default_factory=list)
    expressions: list[str] = field(default_factory=list)


_ENTRY = re.compile(r"^([0-9a-f]{8}) [0-9a-f]+ ([0-9a-f]+) (CIE|FDE)(.*)$")
_FDE_RANGE = re.compile(r"pc=([0-9a-f]+)\.\.([0-9a-f]+)")
_CIE_RA = re.compile(r"ra=(\d+)")
_CELL = re.compile(r"\S+(?: \(\S+\))?")
_EXPRESSION = re.compile(r"DW_CFA_(?:def_cfa_|val_)?expression(?:: r\d+ \(\S+\))? \((.*)\)$")


def readelf_frames(path: Path, section: str, machine: str) -> dict[int, ReadelfEntry]:
    """Parses frames-interp (rows) and frames (expressions) output for one section."""
    entries: dict[int, ReadelfEntry] = {}
    cie_ra: dict[int, int] = {}
    for line_kind in ("frames-interp", "frames"):
        # readelf exits with 1 over unrelated warnings (e.g. missing separate debug files).
        output = subprocess.run(
            ["readelf", "--debug-dump=no-follow-links", f"--debug-dump={line_kind}", str(path)],
            check=False,
            capture_output=True,
            text=True,
        ).stdout
        current = None
        in_section = False
        for line in output.splitlines():
            if line.startswith("Contents of the "):
                in_section = line.startswith(f"Contents of the {section} section")
                current = None
                continue
            if not in_section:
                continue
            if match := _ENTRY.match(line):
                offset = int(match[1], 16)
                current = None
                if match[3] == "CIE":
                    if line_kind == "frames-interp":
                        cie_ra[offset] = int(_CIE_RA.search(match[4])[1])
                elif line_kind == "frames":
                    current = entries[offset]
                else:
                    cie = int(re.search(r"cie=([0-9a-f]+)", match[4])[1], 16)
                    begin, end = (int(value, 16) for value in _FDE_RANGE.search(match[4]).groups())
                    current = entries[offset] = ReadelfEntry(offset, begin, end, ra=cie_ra[cie])
            elif "ZERO terminator" in line:
                current = None
            elif current is None or not line.strip():
                continue
            elif line_kind == "frames":
                if match := _EXPRESSION.search(line):
                    current.expressions.append(match[1])
            elif line.startswith("   LOC"):
                names = line.split()[2:]
                current.columns = [
                    current.ra if name == "ra" else readelf_register_number(name, machine)
                    for name in names
                ]
            else:
                location, cfa, *cells = _CELL.findall(line)
                assert len(cells) == len(current.columns), line
                current.rows.append((int(location, 16), cfa, dict(zip(current.columns, cells))))
    return entries


def readelf_text(rule: UnwindRule, columns: list[int], machine: str) -> tuple[str, dict[int, str]]:
    """Our rule in readelf's words, over readelf's columns plus any register we have a rule for."""
    if rule.cfa.is_expression:
        cfa = "exp"
    else:
        cfa = f"{readelf_register_name(rule.cfa.register, machine)}{rule.cfa.offset:+d}"
    cells = {}
    for register in {*columns, *(number for number, _ in rule.registers)}:
        explicit = dict(rule.registers).get(register)
        if explicit is None or explicit.kind is RegKind.UNDEFINED:
            cells[register] = "u"
        elif explicit.kind is RegKind.REGISTER:
            source = explicit.register
            cells[register] = f"r{source} ({readelf_register_name(source, machine)})"
        else:
            cells[register] = explicit.describe()
    return cfa, cells


def compare_with_readelf(path: Path, section: str, *, skip: frozenset[int] = frozenset()) -> int:
    """Asserts every readelf row of every FDE of ``section``; returns the number of FDEs."""
    elf = load(path)
    table = elf.table(section)
    reference = readelf_frames(path, section, elf.machine)
    fdes = [entry for entry in table.entries() if isinstance(entry, Fde)]
    assert sorted(fde.offset for fde in fdes) == sorted(reference)
    compared = 0
    for fde in fdes:
        if fde.offset in skip:
            continue
        expected = reference[fde.offset]
        assert (fde.pc_begin, fde.pc_end) == (expected.pc_begin, expected.pc_end)
        assert fde.cie.return_address_register == expected.ra
        rows = table.rows(fde)
        ours = [
            (address, *readelf_text(rule, expected.columns, elf.machine)) for address, rule in rows
        ]
        theirs = [row for row in expected.rows if row[0] < fde.pc_end]
        # readelf repeats a location when the program advances by zero; the last row counts.
        theirs = [
            row
            for i, row in enumerate(theirs)
            if i + 1 == len(theirs) or theirs[i + 1][0] != row[0]
        ]
        if theirs:  # readelf prints nothing for an FDE without instructions
            for our_row, their_row in zip(ours, theirs, strict=True):
                assert our_row == their_row, f"FDE {fde.offset:#x}"
        else:
            assert len(ours) == 1
        ours_expressions = _expressions(rows, elf.machine)
        assert ours_expressions <= set(expected.expressions), f"FDE {fde.offset:#x}"
        compared += 1
    return compared


def _expressions(rows: list[tuple[int, UnwindRule]], machine: str) -> set[str]:
    def name(number: int) -> str:
        return readelf_register_name(number, machine)

    found = set()
    for _, rule in rows:
        if rule.cfa.is_expression:
            found.add(describe(rule.cfa.expression, name))
        for _, register_rule in rule.registers:
            if register_rule.expression:
                found.add(describe(register_rule.expression, name))
    return found


# ---------------------------------------------------------------------------------------------
# Every row against readelf


@pytest.mark.parametrize("section", [".eh_frame", ".debug_frame"])
def test_rules_object_matches_readelf(built: dict[str, Path], section: str) -> None:
    assert compare_with_readelf(built["rules.so"], section) == 7


@pytest.mark.parametrize("section", [".eh_frame", ".debug_frame"])
def test_aarch64_object_matches_readelf(built: dict[str, Path], section: str) -> None:
    assert compare_with_readelf(_need(built, "aarch64.so"), section) == 2


def test_hand_written_debug_frame_matches_readelf(built: dict[str, Path]) -> None:
    # DWARF64 version 4, version 1 and version 3 CIEs, zero padding between entries.
    assert compare_with_readelf(built["debug_frame.o"], ".debug_frame") == 3


def test_hand_written_encodings_match_readelf(built: dict[str, Path]) -> None:
    elf = load(built["encodings"])
    table = elf.table()
    # readelf reads LEB128-encoded FDE addresses as fixed-size values; those two
    # FDEs are checked against their siblings in test_every_fde_encoding instead.
    leb = frozenset(
        fde.offset
        for fde in table.entries()
        if isinstance(fde, Fde) and fde.cie.fde_encoding & 0x0F in (0x01, 0x09)
    )
    assert len(leb) == 2
    assert compare_with_readelf(built["encodings"], ".eh_frame", skip=leb) == 11


@pytest.mark.parametrize("library", SYSTEM_LIBRARIES)
def test_system_library_matches_readelf(library: str) -> None:
    if not Path(library).exists():
        pytest.skip(f"{library} not installed")
    count = compare_with_readelf(Path(library), ".eh_frame")
    assert count > 50
    print(f"{library}: {count} FDEs match readelf")


def test_expressions_match_readelf_text(built: dict[str, Path]) -> None:
    elf = load(built["rules.so"])
    table = elf.table()
    reference = readelf_frames(built["rules.so"], ".eh_frame", elf.machine)
    ours = set()
    for entry in table.entries():
        if isinstance(entry, Fde):
            ours |= _expressions(table.rows(entry), elf.machine)
    theirs = {text for entry in reference.values() for text in entry.expressions}
    # signal_trampoline replaces its first CFA expression before any row uses it.
    assert theirs - ours == {"DW_OP_breg7 (rsp): 160"}
    assert ours <= theirs
    assert "DW_OP_breg7 (rsp): 8; DW_OP_deref" in ours


# ---------------------------------------------------------------------------------------------
# Lookups


def _check_lookups(table: CfiTable, fdes: list[Fde]) -> None:
    """rule_for agrees with rows() at every row start and end, and finds no FDE between them."""

    ranges = sorted((fde.pc_begin, fde.pc_end) for fde in fdes)
    overlaps = [inner for outer, inner in itertools.pairwise(ranges) if inner[0] < outer[1]]

    def nested(pc: int) -> bool:
        return any(begin <= pc < end for begin, end in overlaps)

    covered: list[tuple[int, int]] = []  # the union of all FDE ranges
    for begin, end in sorted((fde.pc_begin, fde.pc_end) for fde in fdes):
        if covered and begin <= covered[-1][1]:
            covered[-1] = (covered[-1][0], max(end, covered[-1][1]))
        elif end > begin:
            covered.append((begin, end))
    for fde in fdes:
        rows = table.rows(fde)
        ends = [address for address, _ in rows[1:]] + [fde.pc_end]
        for (address, rule), end in zip(rows, ends):
            if not nested(address) and not nested(end - 1):
                assert table.rule_for(address) == rule
                assert table.rule_for(end - 1) == rule
        assert table.fde_for(fde.pc_begin) == fde
    for (_, end), (next_begin, _) in itertools.pairwise(covered):
        assert table.rule_for(end) is None
        assert table.fde_for(next_begin - 1) is None
    assert table.rule_for(covered[0][0] - 1) is None
    assert table.rule_for(covered[-1][1]) is None


@pytest.mark.parametrize("use_hdr", [True, False], ids=["eh_frame_hdr", "index"])
def test_lookup_libc(use_hdr: bool) -> None:
    elf = load(SYSTEM_LIBRARIES[0])
    table = elf.table(use_hdr=use_hdr)
    fdes = [entry for entry in table.entries() if isinstance(entry, Fde)]
    _check_lookups(table, fdes)


@pytest.mark.parametrize("name", ["rules.so", "encodings", "limits.so"])
@pytest.mark.parametrize("use_hdr", [True, False], ids=["eh_frame_hdr", "index"])
def test_lookup_test_objects(built: dict[str, Path], name: str, use_hdr: bool) -> None:
    table = load(built[name]).table(use_hdr=use_hdr)
    fdes = [entry for entry in table.entries() if isinstance(entry, Fde)]
    if name == "limits.so":  # only the lookup itself: the programs are meant to fail
        for fde in fdes:
            assert table.fde_for(fde.pc_begin) == fde
        return
    _check_lookups(table, fdes)


def test_debug_frame_lookup_matches_eh_frame(built: dict[str, Path]) -> None:
    elf = load(built["rules.so"])
    eh_frame, debug_frame = elf.table(), elf.table(".debug_frame")
    for fde in (entry for entry in debug_frame.entries() if isinstance(entry, Fde)):
        for pc in range(fde.pc_begin, min(fde.pc_end, fde.pc_begin + 64)):
            assert debug_frame.rule_for(pc) == eh_frame.rule_for(pc)


def _libc_hdr_variant(table_encoding: int) -> tuple[bytes, int]:
    """libc's .eh_frame_hdr table re-encoded (LSB layout) with another table encoding."""
    elf = load(SYSTEM_LIBRARIES[0])
    eh_address = elf.sections[".eh_frame"][1]
    hdr_address = 0x1004  # not 8-aligned, so DW_EH_PE_aligned has to pad
    fdes = sorted(
        (entry.pc_begin, entry.offset + eh_address)
        for entry in elf.table(use_hdr=False).entries()
        if isinstance(entry, Fde)
    )
    out = bytearray([1, 0x04, 0x03, table_encoding])  # eh_frame_ptr udata8, count udata4
    out += eh_address.to_bytes(8, "little") + len(fdes).to_bytes(4, "little")
    for pc, fde in fdes:
        for value in (pc, fde):
            out += _encode(value, table_encoding, hdr_address + len(out), hdr_address)
    return bytes(out), hdr_address


def _encode(value: int, encoding: int, field_address: int, data_base: int) -> bytes:
    application = encoding & 0x70
    if application == 0x10:
        value -= field_address
    elif application == 0x30:
        value -= data_base
    if application == 0x50:
        return bytes(-field_address % 8) + value.to_bytes(8, "little")
    fmt = encoding & 0x0F
    if fmt == 0x01:
        return leb128.encode_unsigned(value)
    size = {0x03: 4, 0x04: 8, 0x0B: 4, 0x0C: 8}[fmt]
    return value.to_bytes(size, "little", signed=fmt >= 0x09)


@pytest.mark.parametrize("encoding", [0x04, 0x0C, 0x1C, 0x3B, 0x01, 0x50], ids=hex)
def test_hdr_table_encodings(encoding: int) -> None:
    elf = load(SYSTEM_LIBRARIES[0])
    data, address = elf.sections[".eh_frame"]
    hdr, hdr_address = _libc_hdr_variant(encoding)
    table = CfiTable(data, address, kind="eh_frame", hdr=hdr, hdr_address=hdr_address)
    reference = elf.table()
    fdes = [entry for entry in reference.entries() if isinstance(entry, Fde)]
    for fde in fdes[::7]:
        for pc in (fde.pc_begin, fde.pc_end - 1, fde.pc_end):
            assert table.fde_for(pc) == reference.fde_for(pc)


def test_nested_fdes(built: dict[str, Path]) -> None:
    """A range inside another: the inner FDE wins inside it, the outer one around it."""
    table = load(built["encodings"]).table()
    assert table.fde_for(0x1000205).pc_begin == 0x1000200
    assert table.fde_for(0x10001FF).pc_begin == 0x1000000
    assert table.fde_for(0x1000210).pc_begin == 0x1000000
    assert table.rule_for(0x1000210) == table.rule_for(0x1000104)


def test_hdr_without_table_falls_back_to_index(built: dict[str, Path]) -> None:
    elf = load(built["encodings"])
    assert len(elf.sections[".eh_frame_hdr"][0]) == 8  # ld gave up on the hand-written entries
    table = elf.table()
    assert table.fde_for(0x1000000).pc_begin == 0x1000000


def test_rule_from_fde_at(built: dict[str, Path]) -> None:
    table = load(built["rules.so"]).table()
    for entry in table.entries():
        if isinstance(entry, Fde):
            for pc in range(entry.pc_begin, min(entry.pc_end, entry.pc_begin + 32)):
                assert table.rule_from_fde_at(entry.offset, pc) == table.rule_for(pc)
            with pytest.raises(FormatError, match="covers"):
                table.rule_from_fde_at(entry.offset, entry.pc_end)
        else:
            with pytest.raises(FormatError, match="no FDE"):
                table.rule_from_fde_at(entry.offset, 0x1000)
    with pytest.raises(FormatError):
        table.rule_from_fde_at(3, 0x1000)


# ---------------------------------------------------------------------------------------------
# What readelf does not show


def _rules(built: dict[str, Path], section: str = ".eh_frame") -> tuple[Elf, CfiTable]:
    elf = load(built["rules.so"])
    return elf, elf.table(section)


def test_rule_contents(built: dict[str, Path]) -> None:
    elf, table = _rules(built)
    at = elf.symbols["registers_and_state"]
    rule = table.rule_for(at + 3)
    assert rule.rule_for(3).kind is RegKind.REGISTER and rule.rule_for(3).register == 11
    early_return = table.rule_for(at + 0x10)  # after ret's .cfi_undefined %rip
    assert early_return.rule_for(16).kind is RegKind.UNDEFINED
    assert early_return.rule_for(3).kind is RegKind.SAME
    assert early_return.return_address_register == 16
    assert (early_return.start, early_return.end) == (at, elf.symbols["expressions"])

    at = elf.symbols["expressions"]
    assert [address - at for address, _ in table.rows(table.fde_for(at))] == [0, 1, 2, 3]
    assert table.rule_for(at + 1).cfa.expression == bytes.fromhex("770806")
    rule = table.rule_for(at + 2)
    assert rule.cfa.expression == bytes.fromhex("770806")
    assert rule.rule_for(6).kind is RegKind.EXPRESSION
    assert rule.rule_for(6).expression == bytes.fromhex("7670")
    assert rule.rule_for(3).kind is RegKind.VAL_EXPRESSION
    assert rule.rule_for(3).expression == bytes.fromhex("73103422")
    back = table.rule_for(at + 3)
    assert not back.cfa.is_expression and (back.cfa.register, back.cfa.offset) == (7, 8)


def test_args_size_and_big_advances(built: dict[str, Path]) -> None:
    elf, table = _rules(built)
    at = elf.symbols["escapes"]
    assert table.rule_for(at).args_size == 0
    assert table.rule_for(at + 2).args_size == 8
    assert table.rule_for(at + 3).rule_for(3).offset == 16  # GNU_negative_offset_extended
    assert table.rule_for(at + 3).rule_for(14).kind is RegKind.VAL_OFFSET
    assert table.rule_for(at + 5).args_size == 0
    assert table.rule_for(at + 5).rule_for(3).kind is RegKind.SAME  # restored to no rule
    assert table.rule_for(at + 6 + 299).cfa.offset == 32
    assert table.rule_for(at + 6 + 300).cfa.offset == 16  # advance_loc2
    assert table.rule_for(at + 6 + 300 + 69999).cfa.offset == 16
    assert table.rule_for(at + 6 + 300 + 70000).cfa.offset == 8  # advance_loc4


@pytest.mark.parametrize("section", [".eh_frame", ".debug_frame"])
def test_signal_frame(built: dict[str, Path], section: str) -> None:
    elf, table = _rules(built, section)
    trampoline = elf.symbols["signal_trampoline"]
    assert table.rule_for(trampoline).signal_frame
    assert table.fde_for(trampoline).cie.signal_frame
    assert not table.rule_for(elf.symbols["expressions"]).signal_frame
    assert table.rule_for(trampoline).cfa.expression == bytes.fromhex("77a00106")
    assert table.rule_for(trampoline).rule_for(16).expression == bytes.fromhex("77a801")


def test_personality_and_lsda(built: dict[str, Path]) -> None:
    elf, table = _rules(built)
    fde = table.fde_for(elf.symbols["with_personality"])
    assert fde.cie.augmentation == "zPLR"
    assert fde.cie.personality == elf.symbols["DW.ref.personality_routine"]
    assert fde.cie.personality_indirect
    assert fde.lsda == elf.symbols["lsda_of_with_personality"]
    own = table.fde_for(elf.symbols["personality_routine"])
    assert own.cie.personality == elf.symbols["personality_routine"]
    assert not own.cie.personality_indirect and own.lsda is None
    assert table.fde_for(elf.symbols["frame_pointer"]).cie.personality is None


def test_entries_lists_cies_and_fdes(built: dict[str, Path]) -> None:
    _, table = _rules(built)
    entries = list(table.entries())
    cies = [entry for entry in entries if isinstance(entry, Cie)]
    assert [cie.augmentation for cie in cies] == ["zR", "zRS", "zPLR", "zPR"]
    assert all(isinstance(entry, Fde) for entry in entries if entry not in cies)
    assert len(entries) == 11


def test_every_fde_encoding(built: dict[str, Path]) -> None:
    """All hand-written FDEs run the same program: same rows relative to their start."""
    elf = load(built["encodings"])
    table = elf.table(data_base=0x100)
    fdes = [entry for entry in table.entries() if isinstance(entry, Fde)]
    encodings: dict[int, Fde] = {}
    for fde in fdes:
        encodings.setdefault(fde.cie.fde_encoding, fde)
    assert set(encodings) == {0x04, 0x03, 0x1C, 0x00, 0x1B, 0x0A, 0x02, 0x01, 0x39}
    assert encodings[0x39].pc_begin == 0x1240000 + 0x100  # datarel: data_base applied

    def relative(fde: Fde) -> list[tuple[int, str]]:
        return [(address - fde.pc_begin, rule.describe()) for address, rule in table.rows(fde)]

    reference = relative(encodings[0x04])
    assert [address for address, _ in reference] == [0, 1, 4, 0x104, 0x10104, 0x1010C, 0x20000]
    for fde in fdes:
        rows = relative(fde)
        assert rows == [row for row in reference if row[0] < fde.pc_end - fde.pc_begin]
    versions = {fde.cie.version for fde in fdes}
    assert versions == {1, 3}


def test_personality_encodings(built: dict[str, Path]) -> None:
    table = load(built["encodings"]).table()
    cies = {entry.offset: entry for entry in table.entries() if isinstance(entry, Cie)}
    with_personality = [cie for cie in cies.values() if cie.personality is not None]
    assert {cie.personality for cie in with_personality} == {0x4321}
    assert [cie.personality_indirect for cie in with_personality] == [False, False, True, False]
    fdes = [fde for fde in table.entries() if isinstance(fde, Fde) and fde.cie.personality]
    assert [fde.lsda for fde in fdes] == [0x5678] * 4
    assert [fde.cie.lsda_encoding for fde in fdes] == [0x02, 0x1B, 0x0C, 0x10]


def test_textrel_needs_a_base(built: dict[str, Path]) -> None:
    elf = load(built["encodings"])
    data = bytearray(elf.sections[".eh_frame"][0])
    table = elf.table()
    cie = next(e for e in table.entries() if isinstance(e, Cie) and e.fde_encoding == 0x03)
    # The augmentation data of "zR" is one byte: the FDE encoding, just before the program.
    position = cie.program_start - 1
    assert data[position] == 0x03
    data[position] = 0x23  # textrel | udata4
    fde = next(e for e in table.entries() if isinstance(e, Fde) and e.cie.offset == cie.offset)
    plain = CfiTable(bytes(data), elf.sections[".eh_frame"][1], kind="eh_frame")
    with pytest.raises(FormatError, match="base"):
        plain.fde_at(fde.offset)
    based = CfiTable(bytes(data), 0, kind="eh_frame", text_base=0x1000)
    assert based.fde_at(fde.offset).pc_begin == 0x1040000 + 0x1000


def test_debug_frame_formats(built: dict[str, Path]) -> None:
    table = load(built["debug_frame.o"]).table(".debug_frame")
    cies = [entry for entry in table.entries() if isinstance(entry, Cie)]
    assert [(cie.version, cie.address_size, cie.return_address_register) for cie in cies] == [
        (4, 8, 30),
        (1, 8, 8),
        (3, 8, 33),
    ]
    rule = table.rule_for(0x10000 + 8)
    assert rule.ra_signed and rule.rule_for(72).offset == -8
    assert not table.rule_for(0x10010).ra_signed  # negated again after remember_state
    assert table.rule_for(0x10014).ra_signed  # restore_state brings the signed state back


def test_aarch64_negate_ra_state(built: dict[str, Path]) -> None:
    elf = load(_need(built, "aarch64.so"))
    for section in (".eh_frame", ".debug_frame"):
        table = elf.table(section)
        start = elf.symbols["signed_return"]
        fde = table.fde_for(start)
        signed = {address - start: rule.ra_signed for address, rule in table.rows(fde)}
        assert signed == {
            0x0: False,
            0x4: True,  # paciasp
            0x8: True,
            0xC: True,
            0x10: True,
            0x1C: True,
            0x20: False,  # autiasp
            0x24: True,  # restore_state: the state at remember_state was signed
            0x28: True,
            0x2C: True,
            0x30: False,  # autiasp
        }
        leaf = table.fde_for(elf.symbols["unsigned_leaf"])
        assert not any(rule.ra_signed for _, rule in table.rows(leaf))
        assert table.rule_for(start).return_address_register == 30


# ---------------------------------------------------------------------------------------------
# Corrupt input


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("deep_state", "nested too deep"),
        ("unbalanced_state", "without remember_state"),
        ("offset_of_expression", "without a register rule"),
        ("unknown_opcode", "unknown DW_CFA instruction 0x3f"),
    ],
)
def test_refused_programs(built: dict[str, Path], function: str, message: str) -> None:
    elf = load(built["limits.so"])
    table = elf.table()
    with pytest.raises(FormatError, match=message):
        table.rule_for(elf.symbols[function] + 1)


def _exercise(table: CfiTable) -> None:
    """Everything a consumer might call; only FormatError may come out."""
    for entry in table.entries():
        if isinstance(entry, Fde):
            table.rows(entry)
            table.rule_for(entry.pc_begin)
    for pc in range(0x1000, 0x1100, 7):
        table.rule_for(pc)


def _expect_format_error_only(table: CfiTable) -> None:
    with contextlib.suppress(FormatError):
        _exercise(table)


def test_truncations(built: dict[str, Path]) -> None:
    elf = load(built["rules.so"])
    data, address = elf.sections[".eh_frame"]
    hdr, hdr_address = elf.sections[".eh_frame_hdr"]
    started = time.monotonic()
    failures = 0
    for cut in range(len(data)):
        table = CfiTable(data[:cut], address, kind="eh_frame")
        try:
            _exercise(table)
        except FormatError:
            failures += 1
    for cut in range(len(hdr)):
        table = CfiTable(data, address, kind="eh_frame", hdr=hdr[:cut], hdr_address=hdr_address)
        _expect_format_error_only(table)
    assert failures > len(data) // 2
    assert time.monotonic() - started < 20


def test_bogus_lengths(built: dict[str, Path]) -> None:
    elf = load(built["rules.so"])
    data, address = elf.sections[".eh_frame"]
    for length in (
        b"\xff\xff\xff\xff",
        b"\xf0\xff\xff\xff",
        b"\x01\x00\x00\x00",
        b"\x00\x10\x00\x00",
    ):
        corrupt = length + data[4:]
        with pytest.raises(FormatError, match="offset 0x0"):
            list(CfiTable(corrupt, address, kind="eh_frame").entries())
    # FDEs whose CIE pointer leads to themselves, to another FDE, before the section.
    fdes = [entry for entry in elf.table().entries() if isinstance(entry, Fde)]
    for target in (fdes[0].offset, fdes[1].offset, -64):
        corrupt = bytearray(data)
        pointer = fdes[0].offset + 4 - target
        field = fdes[0].offset + 4
        corrupt[field : field + 4] = (pointer & 0xFFFFFFFF).to_bytes(4, "little")
        with pytest.raises(FormatError):
            CfiTable(bytes(corrupt), address, kind="eh_frame").fde_at(fdes[0].offset)
    with pytest.raises(FormatError, match="64-bit"):
        list(CfiTable(b"\xff\xff\xff\xff\x00", address, kind="debug_frame").entries())


@settings(
    max_examples=300,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=8)
)
def test_random_byte_flips(built: dict[str, Path], flips: list[tuple[int, int]]) -> None:
    elf = load(built["rules.so"])
    data, address = elf.sections[".eh_frame"]
    hdr, hdr_address = elf.sections[".eh_frame_hdr"]
    corrupt_data, corrupt_hdr = bytearray(data), bytearray(hdr)
    for position, mask in flips:
        if position % 5 == 0:
            corrupt_hdr[position % len(hdr)] ^= mask
        else:
            corrupt_data[position % len(data)] ^= mask
    for use_hdr in (False, True):
        table = CfiTable(
            bytes(corrupt_data),
            address,
            kind="eh_frame",
            hdr=bytes(corrupt_hdr) if use_hdr else None,
            hdr_address=hdr_address,
        )
        _expect_format_error_only(table)


def test_memoryview_input_is_not_copied(built: dict[str, Path]) -> None:
    elf = load(built["rules.so"])
    data, address = elf.sections[".eh_frame"]
    buffer = bytearray(data)
    table = CfiTable(memoryview(buffer), address, kind="eh_frame")
    assert table.rule_for(elf.symbols["frame_pointer"] + 1) == elf.table().rule_for(
        elf.symbols["frame_pointer"] + 1
    )
