"""``liveunwind unwind-info``: dumps that agree with objdump and readelf, and rules at one pc."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", "unwind-info", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def _function_blocks(text: str) -> list[str]:
    """The per-function blocks of an ``objdump --sframe`` style dump, whitespace-normalised."""
    body = text.split("Function Index :", 1)[1]
    blocks = [" ".join(block.split()) for block in body.strip().split("\n\n")]
    return [block for block in blocks if block.startswith("func idx")]


@pytest.mark.parametrize("name", ["sframe-O0", "sframe-O2", "sframe-O2-nofp"])
def test_sframe_dump_equals_objdump(testprogs_build: Path, name: str) -> None:
    binary = testprogs_build / name
    ours = cli(str(binary), "--format", "sframe")
    assert ours.returncode == 0, ours.stderr
    objdump = subprocess.run(
        ["objdump", "--sframe", str(binary)], capture_output=True, text=True, check=True
    )
    assert _function_blocks(ours.stdout) == _function_blocks(objdump.stdout)
    assert len(_function_blocks(ours.stdout)) > 10


_READELF_FDE = re.compile(r"FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)")


def _readelf_cfa_rows(binary: Path) -> dict[int, list[tuple[int, str]]]:
    """FDE start -> [(row address, CFA column)] from ``readelf --debug-dump=frames-interp``."""
    text = subprocess.run(
        ["readelf", "--debug-dump=frames-interp", str(binary)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows: dict[int, list[tuple[int, str]]] = {}
    current: list[tuple[int, str]] | None = None
    for line in text.splitlines():
        match = _READELF_FDE.search(line)
        if match:
            current = rows.setdefault(int(match.group(1), 16), [])
        elif " CIE " in line:
            current = None
        elif current is not None and re.match(r"^[0-9a-f]{16} ", line):
            address, cfa = line.split()[:2]
            current.append((int(address, 16), cfa))
    return rows


def test_cfi_dump_rows_equal_readelf(testprogs_build: Path) -> None:
    binary = testprogs_build / "realign-O2"
    ours = cli(str(binary), "--format", "cfi")
    assert ours.returncode == 0, ours.stderr
    dumped: dict[int, list[tuple[int, str]]] = {}
    current: list[tuple[int, str]] = []
    for line in ours.stdout.splitlines():
        if line.startswith("FDE "):
            current = dumped.setdefault(int(line.split()[1].split("..")[0], 16), [])
        elif line.startswith("  0x"):
            address, rule = line.split(maxsplit=1)
            cfa = rule.split()[0].removeprefix("cfa=")
            current.append((int(address, 16), "exp" if cfa.startswith("exp") else cfa))
    expected = _readelf_cfa_rows(binary)
    # readelf prints no rows for an FDE whose program is empty; we print the CIE's row.
    for start, rows in expected.items():
        if rows:
            assert dumped[start] == rows, f"FDE at {start:#x}"
    assert any(cfa == "exp" for rows in dumped.values() for _, cfa in rows), "DRAP expected"


def test_rule_at_pc_from_both_tables(testprogs_build: Path) -> None:
    binary = testprogs_build / "sframe-O2"
    nm = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    leafy = next(int(line.split()[0], 16) for line in nm.splitlines() if line.endswith(" sf_leafy"))
    result = cli(str(binary), "--pc", hex(leafy + 0x10))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == f"at {leafy + 0x10:#x} (sf_leafy+0x10)"
    eh_frame = next(line for line in lines if line.strip().startswith(".eh_frame"))
    sframe = next(line for line in lines if line.strip().startswith(".sframe"))
    assert "cfa=rbp+16 rbp=c-16 ra=c-8" in eh_frame
    assert eh_frame.split(maxsplit=1)[1] == sframe.split(maxsplit=1)[1]


def test_bad_inputs(tmp_path: Path, testprogs_build: Path) -> None:
    missing = cli(str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello\n")
    not_elf = cli(str(text_file))
    assert not_elf.returncode == 2
    assert not_elf.stderr.strip() == f"liveunwind: {text_file}: not an ELF file"
    compact = cli(str(testprogs_build / "sframe-O2"), "--format", "compact")
    assert compact.returncode == 1 and "Mach-O" in compact.stdout
    no_sframe = cli(str(testprogs_build / "threads-O2"), "--format", "sframe")
    assert no_sframe.returncode == 1 and "no sframe tables" in no_sframe.stdout


def test_mach_o_compact_table_and_rule_at_pc() -> None:
    binary = ROOT / "testprogs" / "macho" / "build" / "chain-x86_64"
    if not binary.exists():
        pytest.skip("testprogs/macho is not built (needs clang-16 and lld-16)")
    dump = cli(str(binary), "--format", "compact")
    assert dump.returncode == 0, dump.stderr
    assert "Contents of __unwind_info section:" in dump.stdout
    assert "STACK_IND" in dump.stdout and "RBP_FRAME" in dump.stdout and "DWARF" in dump.stdout
    entry = next(line for line in dump.stdout.splitlines() if "STACK_IND" in line and ".." in line)
    start = int(entry.split()[0].split("..")[0], 16)
    at = cli(str(binary), "--pc", hex(start + 0x10))
    assert at.returncode == 0, at.stderr
    rule_line = next(
        line for line in at.stdout.splitlines() if line.strip().startswith("__unwind_info ")
    )
    assert "cfa=rsp+" in rule_line and "ra=c-8" in rule_line
