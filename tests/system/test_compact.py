"""Apple compact unwind, Mach-O images and Mach-O cores.

Ground truth comes from outside liveunwind: ``llvm-objdump --unwind-info``
for the table's raw contents, the functions' own prologues (from
``llvm-objdump -d``) for what each encoding must mean, ``llvm-dwarfdump``
for the FDEs DWARF-mode entries point at, and tools/macho_core.py — which
runs the binaries in unicorn and records every live call — for the true
chain of frames and registers in a core.  Tables made by hand are
tests/unit/test_compact.py.
"""

from __future__ import annotations

import itertools
import re
import shutil
import struct
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liveunwind.errors import CoreFileError, FormatError, MemoryReadError
from liveunwind.formats.unwind import compact
from liveunwind.formats.unwind.compact import CompactUnwindTable
from liveunwind.formats.unwind.rules import RegKind, UnwindRule
from liveunwind.frames import Method, StopReason
from tests.support.macho import ARCHES, BUILD, TOOLS, build_unwind_info, make_core
from tests.support.paths import ROOT

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS), reason="needs clang-16, lld-16, llvm-16"
)


@pytest.fixture(scope="session")
def binaries(macho_build: Path) -> dict[str, Path]:
    return {arch: macho_build / f"chain-{arch}" for arch in ARCHES}


@cache
def image(path: Path):
    from liveunwind.modules.macho import MachOImage

    return MachOImage(str(path))


# -- what llvm-objdump and llvm-dwarfdump say ------------------------------------------


@cache
def objdump_unwind_info(path: Path) -> dict:
    text = subprocess.run(
        ["llvm-objdump-16", "--unwind-info", str(path)], check=True, capture_output=True, text=True
    ).stdout
    hexes = r"(0x[0-9a-f]+)"
    return {
        "common": [int(v, 16) for v in re.findall(rf"encoding\[\d+\]: {hexes}\n", text)],
        "personalities": [int(v, 16) for v in re.findall(rf"personality\[\d+\]: {hexes}", text)],
        "index": [
            tuple(int(v, 16) for v in match)
            for match in re.findall(
                rf"\[\d+\]: function offset={hexes}, 2nd level page offset={hexes}, "
                rf"LSDA offset={hexes}",
                text,
            )
        ],
        "lsdas": [
            tuple(int(v, 16) for v in match)
            for match in re.findall(
                rf"\[\d+\]: function offset={hexes}, LSDA offset={hexes}\n", text
            )
        ],
        "entries": [
            (int(offset, 16), int(encoding, 16))
            for offset, encoding in re.findall(
                rf"\[\d+\]: function offset={hexes}, encoding\[\d+\]={hexes}", text
            )
        ],
    }


@cache
def eh_frame_fdes(path: Path) -> dict[int, int]:
    """FDE section offset → pc_begin, from llvm-dwarfdump."""
    text = subprocess.run(
        ["llvm-dwarfdump-16", "--eh-frame", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return {
        int(offset, 16): int(begin, 16)
        for offset, begin in re.findall(
            r"^([0-9a-f]{8}) \S+ \S+ FDE cie=\S+ pc=([0-9a-f]+)\.\.\.", text, re.M
        )
    }


@cache
def disassembly(path: Path) -> dict[int, list[tuple[int, bytes, str]]]:
    """Function start → its instructions as (address, raw bytes, text)."""
    text = subprocess.run(
        ["llvm-objdump-16", "-d", str(path)], check=True, capture_output=True, text=True
    ).stdout
    functions: dict[int, list[tuple[int, bytes, str]]] = {}
    current: list[tuple[int, bytes, str]] | None = None
    for line in text.splitlines():
        header = re.match(r"^([0-9a-f]+) <[^>]+>:$", line)
        if header:
            current = functions.setdefault(int(header.group(1), 16), [])
            continue
        insn = re.match(r"^\s*([0-9a-f]+):\s+((?:[0-9a-f]{2,8} )+)\s*(.*)$", line)
        if insn and current is not None:
            raw = bytes.fromhex(insn.group(2).replace(" ", ""))
            text = insn.group(3).split("##")[0].split("//")[0]
            current.append((int(insn.group(1), 16), raw, " ".join(text.split())))
    return functions


# -- what a prologue says a body's rule must be ----------------------------------------

_X86 = {"rbx": 3, "rbp": 6, "r12": 12, "r13": 13, "r14": 14, "r15": 15}


def x86_prologue(insns: list[tuple[int, bytes, str]]) -> tuple[tuple[int, int], dict, int | None]:
    """(CFA register, offset), {register: CFA offset}, address of a 32-bit subq immediate."""
    pushes: list[str] = []
    frame_at: int | None = None
    sub, immediate_at = 0, None
    for address, raw, text in insns:
        if match := re.fullmatch(r"pushq %(\w+)", text):
            pushes.append(match.group(1))
        elif text == "movq %rsp, %rbp":
            frame_at = len(pushes)
        elif match := re.fullmatch(r"subq \$(0x[0-9a-f]+), %rsp", text):
            sub = int(match.group(1), 16)
            if len(raw) == 7:  # 48 81 ec imm32
                immediate_at = address + 3
        else:
            break
    saved = {16: -8}
    if frame_at is not None:
        assert pushes[:frame_at] == ["rbp"]
        saved[6] = -16
        for k, name in enumerate(pushes[frame_at:]):
            if name in _X86:  # pushing a scratch register only reserves stack
                saved[_X86[name]] = -24 - 8 * k
        return (6, 16), saved, immediate_at
    for k, name in enumerate(pushes):
        if name in _X86:
            saved[_X86[name]] = -16 - 8 * k
    return (7, 8 + 8 * len(pushes) + sub), saved, immediate_at


def _arm64_register(name: str) -> int:
    if name in ("fp", "x29"):
        return 29
    if name in ("lr", "x30"):
        return 30
    return int(name[1:]) + (64 if name[0] == "d" else 0)


def arm64_prologue(insns: list[tuple[int, bytes, str]]) -> tuple[tuple[int, int], dict]:
    """(CFA register, offset) and {register: CFA offset} once the prologue has run."""
    offset, saved, fp = 0, {}, None
    for _address, _raw, text in insns:
        if match := re.fullmatch(r"stp (\w+), (\w+), \[sp, #(-?0x[0-9a-f]+)\](!?)", text):
            first, second, amount, pre = match.groups()
            if pre:
                offset += int(amount, 16)
                at = offset
            else:
                at = offset + int(amount, 16)
            saved[_arm64_register(first)] = at
            saved[_arm64_register(second)] = at + 8
        elif match := re.fullmatch(r"sub sp, sp, #(0x[0-9a-f]+)", text):
            offset -= int(match.group(1), 16)
        elif match := re.fullmatch(r"add (?:x29|fp), sp, #(0x[0-9a-f]+)", text):
            fp = offset + int(match.group(1), 16)
        elif text in ("mov x29, sp", "mov fp, sp"):
            fp = offset
        else:
            break
    if fp is not None:
        return (29, -fp), saved
    return (31, -offset), saved


def rule_map(rule: UnwindRule) -> tuple[tuple[int, int], dict[int, int]]:
    assert all(r.kind is RegKind.OFFSET for _, r in rule.registers)
    return (rule.cfa.register, rule.cfa.offset), {n: r.offset for n, r in rule.registers}


# -- decoding against the tools ----------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHES)
def test_table_matches_objdump(binaries: dict[str, Path], arch: str) -> None:
    path = binaries[arch]
    table = image(path).compact_table
    expected = objdump_unwind_info(path)
    base = table.image_base
    assert list(table.common_encodings) == expected["common"]
    assert list(table.personalities) == expected["personalities"]
    assert [tuple(entry) for entry in table.index] == expected["index"]
    assert [tuple(entry) for entry in table.lsdas] == expected["lsdas"]
    entries = list(table.entries())
    assert [(e.start - base, e.encoding) for e in entries] == expected["entries"]
    lsda_of = dict(expected["lsdas"])
    for entry in entries:
        has_lsda = bool(entry.encoding & compact.UNWIND_HAS_LSDA)
        assert entry.lsda == (base + lsda_of[entry.start - base] if has_lsda else None)
        index = (entry.encoding >> 28) & 3
        assert entry.personality == (base + expected["personalities"][index - 1] if index else None)
    # The C++ function really has its LSDA and personality (the test binary promises one).
    assert any(entry.lsda is not None and entry.personality is not None for entry in entries)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_function_decodes_as_its_prologue_says(binaries: dict[str, Path], arch: str) -> None:
    path = binaries[arch]
    table = image(path).compact_table
    functions = disassembly(path)
    fdes = eh_frame_fdes(path)
    modes = set()
    for entry in table.entries():
        insns = functions[entry.start]
        mode = entry.mode
        modes.add(mode)
        if mode == table._dwarf_mode:
            fde = entry.encoding & compact.DWARF_SECTION_OFFSET
            assert fdes.get(fde) == entry.start, f"{entry.start:#x}: no FDE at {fde:#x}"
            assert table.rule_for(entry.start).start == entry.start
            assert table.compact_rule_for(entry.start) is None
            continue
        rule = table.rule_for(entry.start)
        assert table.dwarf_rule_for(entry.start) is None
        if arch == "x86_64":
            cfa, saved, immediate_at = x86_prologue(insns)
            if mode == compact.X86_64_MODE_STACK_IND:
                field = (entry.encoding >> 16) & 0xFF
                assert entry.function_start + field == immediate_at
        else:
            cfa, saved = arm64_prologue(insns)
        assert rule_map(rule) == (cfa, saved), f"{entry.start:#x} {entry.encoding:#010x}"
        assert (rule.start, rule.end) == (entry.start, entry.end)
    if arch == "x86_64":
        wanted = {
            compact.X86_64_MODE_RBP_FRAME,
            compact.X86_64_MODE_STACK_IMMD,
            compact.X86_64_MODE_STACK_IND,
            compact.X86_64_MODE_DWARF,
        }
    else:
        wanted = {compact.ARM64_MODE_FRAME, compact.ARM64_MODE_FRAMELESS, compact.ARM64_MODE_DWARF}
    assert modes == wanted


def test_arm64_frame_saves_d_registers(binaries: dict[str, Path]) -> None:
    """fp_saved keeps doubles across its call: the D-pair bits (8–11) must be decoded."""
    table = image(binaries["arm64"]).compact_table
    rules = [table.rule_for(entry.start) for entry in table.entries()]
    assert any(
        number in range(72, 80)
        for rule in rules
        if rule is not None
        for number, _ in rule.registers
    )


def test_dump_lists_every_entry_with_its_meaning(binaries: dict[str, Path]) -> None:
    table = image(binaries["x86_64"]).compact_table
    dump = table.format_dump()
    for entry in table.entries():
        assert f"{entry.start:#x}..{entry.end:#x}  {entry.encoding:#010x}" in dump
    assert "STACK_IND size=[subq imm at func+0x" in dump
    assert "RBP_FRAME offset=5 rbx@rbp-40 r12@rbp-32 r13@rbp-24 r14@rbp-16 r15@rbp-8" in dump
    assert "lsda=0x" in dump and "personality@0x" in dump


# -- hand-built tables of a real table's entries (the hand-made ones: tests/unit) --------


def _outcome(table: CompactUnwindTable, pc: int) -> UnwindRule | str | None:
    try:
        return table.rule_for(pc)
    except FormatError as error:  # e.g. padding after a function that only its FDE bounds
        return str(error)


def _same_entries(a: CompactUnwindTable, b: CompactUnwindTable) -> None:
    assert list(a.entries()) == list(b.entries())
    for entry in a.entries():
        for pc in (entry.start, entry.end - 1):
            assert _outcome(a, pc) == _outcome(b, pc)


@pytest.mark.parametrize("arch", ARCHES)
def test_regular_and_compressed_pages_decode_alike(binaries: dict[str, Path], arch: str) -> None:
    macho = image(binaries[arch])
    real = macho.compact_table
    base = real.image_base
    entries = [(entry.start - base, entry.encoding) for entry in real.entries()]
    sentinel = real.index[-1][0]
    arguments = dict(arch=arch, image_base=base, eh_frame=macho.eh_frame, read_code=macho.read)
    layouts = [
        ([], [("regular", entries)]),  # one regular page
        ([], [("compressed", entries)]),  # every encoding page-local
        (list(real.common_encodings[:2]), [("regular", entries[:3]), ("compressed", entries[3:])]),
    ]
    for common, pages in layouts:
        data = build_unwind_info(
            common,
            pages,
            sentinel,
            personalities=list(real.personalities),
            lsdas=[tuple(pair) for pair in real.lsdas],
        )
        _same_entries(real, CompactUnwindTable(data, 0, **arguments))


_FUZZ_BASES = {}


def _fuzz_base(binaries: dict[str, Path], arch: str) -> tuple[bytes, dict]:
    if arch not in _FUZZ_BASES:
        macho = image(binaries[arch])
        data = macho.section_data("__TEXT", "__unwind_info")
        arguments = dict(
            arch=arch, image_base=macho.text_base, eh_frame=macho.eh_frame, read_code=macho.read
        )
        _FUZZ_BASES[arch] = (data, arguments)
    return _FUZZ_BASES[arch]


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(
    arch=st.sampled_from(ARCHES),
    edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=12),
    cut=st.integers(0, 400),
    probes=st.lists(st.integers(0, 0x1000), max_size=8),
)
def test_fuzzed_sections_raise_only_format_error(binaries, arch, edits, cut, probes) -> None:
    data, arguments = _fuzz_base(binaries, arch)
    mutated = bytearray(data[: max(len(data) - cut, 0)] if cut > 300 else data)
    for position, value in edits:
        if position < len(mutated):
            mutated[position] = value
    base = arguments["image_base"]
    try:
        table = CompactUnwindTable(bytes(mutated), 0, **arguments)
        for entry in itertools.islice(table.entries(), 64):
            table.rule_for(entry.start)
            table.describe_encoding(entry.encoding)
        for probe in probes:
            table.rule_for(base + 0x400 + probe)
        table.format_dump()
    except FormatError:
        pass


# -- Mach-O cores from the emulator --------------------------------------------------------


def expected_method(path: Path, link_pc: int) -> Method:
    """What the frame's caller step must report, from llvm-objdump's encoding for the function."""
    entries = objdump_unwind_info(path)["entries"]
    offset = link_pc - image(path).text_base
    encoding = [e for start, e in entries if start <= offset][-1]
    dwarf = compact.X86_64_MODE_DWARF if "x86_64" in path.name else compact.ARM64_MODE_DWARF
    return Method.CFI if encoding & compact.UNWIND_MODE_MASK == dwarf else Method.COMPACT


def execute(rule: UnwindRule, registers: dict[int, int], read) -> dict[int, int]:
    """Applies a CFA-plus-offset rule (all compact rules and these FDEs are) to registers."""
    assert not rule.cfa.expression
    cfa = registers[rule.cfa.register] + rule.cfa.offset
    caller = dict(registers)
    for number, register_rule in rule.registers:
        assert register_rule.kind is RegKind.OFFSET
        caller[number] = struct.unpack("<Q", read(cfa + register_rule.offset, 8))[0]
    caller["sp"] = cfa
    caller["pc"] = caller[rule.return_address_register]
    return caller


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("note", [True, False], ids=["image-infos", "header-scan"])
def test_core_unwinds_to_the_true_chain(
    binaries: dict[str, Path], tmp_path: Path, arch: str, note: bool
) -> None:
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.cores.machocore import MachOCore
    from liveunwind.unwinder.stepper import Stepper

    binary = binaries[arch]
    extra = ["--image-path", "/Applications/Chain.app/chain"] if note else ["--no-image-infos"]
    core_path, truth = make_core(binary, tmp_path, *extra)
    core = MachOCore(str(core_path), [str(BUILD)])
    (found,) = core.images()
    assert found.path == str(binary)
    assert found.uuid.hex() == truth["uuid"]
    assert found.name == ("/Applications/Chain.app/chain" if note else "")
    modules = ModuleMap(core)
    (module,) = modules.modules
    assert module.load_bias == truth["slide"]
    (thread,) = core.threads()
    for number, value in truth["registers"].items():
        assert thread.registers[int(number)] == value

    backtrace = Stepper(core, modules, unwinders=("compact", "cfi")).backtrace(thread)
    assert backtrace.stop_reason is StopReason.END_OF_STACK
    frames = truth["frames"]
    assert [(f.pc, f.sp) for f in backtrace.frames] == [(f["pc"], f["sp"]) for f in frames]
    methods = [f.method for f in backtrace.frames]
    expected = [Method.CONTEXT] + [
        expected_method(binary, frame.lookup_pc - truth["slide"]) for frame in backtrace.frames[:-1]
    ]
    assert methods == expected
    assert Method.COMPACT in methods and Method.CFI in methods
    names = [module.symbolize(f.pc).name for f in backtrace.frames]
    assert names == [f["function"].removeprefix("_") for f in frames]

    # Every callee-saved register the true caller had is what the rules recover.
    pc, sp = (16, 7) if arch == "x86_64" else (32, 31)
    registers = dict(thread.registers)
    for index, frame in enumerate(frames[1:], 1):
        lookup = registers[pc] - (1 if index > 1 else 0)
        relative = lookup - module.load_bias
        rules = [s.rule_for(relative) for s in module.unwind_sources["compact"]]
        rules += [s.rule_for(relative) for s in module.unwind_sources["cfi"]]
        rule = next(r for r in rules if r is not None)
        caller = execute(rule, registers, core.read)
        registers = {n: v for n, v in caller.items() if isinstance(n, int)}
        registers[pc], registers[sp] = caller["pc"], caller["sp"]
        assert (registers[pc], registers[sp]) == (frame["pc"], frame["sp"])
        for number, value in frame["registers"].items():
            assert registers[int(number)] == value, f"frame {index} register {number}"


def test_core_without_the_file_has_no_module(binaries: dict[str, Path], tmp_path: Path) -> None:
    from liveunwind.targets.cores.machocore import MachOCore

    core_path, _ = make_core(binaries["x86_64"], tmp_path, "--no-image-infos")
    # The arm64 binary has another UUID: it must not be taken for the x86_64 image.
    core = MachOCore(str(core_path), [str(binaries["arm64"])])
    (found,) = core.images()
    assert found.path == "" and found.uuid is not None
    assert all(mapping.path == "" for mapping in core.mappings())


def test_core_memory_and_corruption(binaries: dict[str, Path], tmp_path: Path) -> None:
    from liveunwind.targets.cores.machocore import MachOCore

    core_path, truth = make_core(binaries["arm64"], tmp_path)
    core = MachOCore(str(core_path), [str(BUILD)])
    sp = truth["frames"][0]["sp"]
    assert len(core.read(sp, 64)) == 64
    with pytest.raises(MemoryReadError):
        core.read(0x10, 8)
    text = next(m for m in core.mappings() if m.executable)
    assert text.path == str(binaries["arm64"]) and text.offset == 0
    raw = core_path.read_bytes()
    for broken in (raw[:20], raw[:16] + struct.pack("<I", 0xFFFF) + raw[20:], b"\0" * 64):
        bad = tmp_path / "bad.core"
        bad.write_bytes(broken)
        with pytest.raises(CoreFileError):
            MachOCore(str(bad)).threads()


@pytest.mark.parametrize("arch", ARCHES)
def test_core_command_on_a_mach_o_core(
    binaries: dict[str, Path], tmp_path: Path, arch: str
) -> None:

    core_path, truth = make_core(binaries[arch], tmp_path, "--no-image-infos")
    result = subprocess.run(
        [sys.executable, "-m", "liveunwind", "core", str(core_path), "--search-path", str(BUILD)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    frame_lines = [line for line in result.stdout.splitlines() if line.strip().startswith("#")]
    assert len(frame_lines) == len(truth["frames"])
    assert any(line.endswith("[compact]") for line in frame_lines)
    assert any(line.endswith("[cfi]") for line in frame_lines)
    for line, frame in zip(frame_lines, truth["frames"]):
        assert f"0x{frame['pc']:016x}" in line
        assert frame["function"].removeprefix("_") in line
    assert result.stdout.rstrip().endswith("-- end of stack (complete)")
