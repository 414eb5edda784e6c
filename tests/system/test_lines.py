"""``--lines``: source file, line and inlined calls of every frame, equal to gdb's.

The program (testprogs/lines) parks five threads under chains of inlined
calls; its libc frames come from Debian's separate libc debug file, so every
comparison also covers DWARF 5 as glibc's build writes it.  Each DWARF shape
the readers handle is its own build of the same program.  The read-ahead
thread, on zlib streams made here, is tests/unit/test_lines.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from random import Random

import pytest

from liveunwind.errors import FormatError
from liveunwind.formats.dwarf.info import Sections
from liveunwind.formats.elf import ElfImage
from liveunwind.modules.debuginfo import find_debug_file, section_data
from liveunwind.modules.lines import DWARF_SECTIONS, ModuleLines, has_dwarf
from tests.support.lines import (
    differences,
    gdb_logical_frames,
    liveunwind_logical_frames,
    same_file,
)
from tests.support.paths import SUPPORT
from tests.support.programs import start_program

GDB_STATIC = SUPPORT / "gdb_static_lines.py"
STATIC_MARKER = "LIVEUNWIND-GDB-STATIC "


@pytest.mark.parametrize(
    "program",
    [
        "lines-dwarf5",
        "lines-dwarf4",
        "lines-dwarf3",
        "lines-dwarf2",
        "lines-noaranges",
        "lines-zlib",
        "lines-zstd",
        "lines-split",
    ],
)
def test_every_logical_frame_equals_gdbs(lines_build: Path, gdb: str, program: str) -> None:
    with start_program(lines_build, program) as running:
        ours, modules = liveunwind_logical_frames(running.pid)
        theirs = gdb_logical_frames(running.pid)
    assert [problem for module in modules for problem in module.problems] == []
    assert differences(ours, theirs) == []
    inlined = [frame for frames in ours.values() for frame in frames if len(frame) > 1]
    assert max(len(frame) for frame in inlined) >= 5  # chain_sleep … worker_chain


def gdb_static_chains(path: Path, addresses: list[int], tmp_path: Path) -> dict[int, list]:
    """gdb's file, line and inline chain for each address of an executable file."""
    listing = tmp_path / "addresses.txt"
    listing.write_text("\n".join(hex(address) for address in addresses))
    result = subprocess.run(
        [
            "gdb",
            "-batch",
            "-nx",
            "-iex",
            "set debuginfod enabled off",
            "-ex",
            f'set $lu_addresses = "{listing}"',
            "-x",
            str(GDB_STATIC),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    for line in result.stdout.splitlines():
        if line.startswith(STATIC_MARKER):
            answers = json.loads(line[len(STATIC_MARKER) :])
            return {int(pc, 16): chain for pc, chain in answers.items()}
    raise AssertionError(f"gdb printed nothing:\n{result.stdout}\n{result.stderr}")


def disagreements(lines: ModuleLines, gdbs: dict[int, list]) -> list[str]:
    found = []
    for address, theirs in gdbs.items():
        ours = [tuple(entry) for entry in lines.locate(address)]
        expected = [tuple(entry) for entry in theirs]
        agree = len(ours) == len(expected) and all(
            a[0] == b[0] and a[2] == b[2] and same_file(a[1], b[1]) for a, b in zip(ours, expected)
        )
        if not agree:
            found.append(f"{address:#x}: ours {ours}, gdb {expected}")
    return found[:20]


@pytest.mark.parametrize(
    "program", ["lines-dwarf5", "lines-dwarf4", "lines-dwarf3", "lines-dwarf2", "lines-noaranges"]
)
def test_every_address_of_the_program_equals_gdbs_answer(
    lines_build: Path, gdb: str, program: str, tmp_path: Path
) -> None:
    """Each byte of .text: innermost line and the whole inline chain, as gdb finds them."""
    path = lines_build / program
    image = ElfImage(path.read_bytes(), origin=str(path))
    text = image.sections[".text"]
    addresses = list(range(text.address, text.address + text.size))
    assert disagreements(ModuleLines(image), gdb_static_chains(path, addresses, tmp_path)) == []


def test_sampled_addresses_of_libc_equal_gdbs_answers(gdb: str, tmp_path: Path) -> None:
    """glibc through its separate debug file: C and assembly units, DWARF 5 as Debian builds it."""
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.is_file():
        pytest.skip("no x86_64 glibc")
    image = ElfImage(libc.read_bytes(), origin=str(libc))
    debug = find_debug_file(image, str(libc), image.build_id)
    if debug is None or not has_dwarf(debug.image):
        pytest.skip("no libc debug file (libc6-dbg)")
    text = image.sections[".text"]
    addresses = list(range(text.address, text.address + text.size, 997))
    gdbs = gdb_static_chains(libc, addresses, tmp_path)
    assert disagreements(ModuleLines(debug.image), gdbs) == []
    # Again with .debug_info (zlib-compressed in Debian's file) inflating on a thread
    # while the lookups run, in the order read_ahead gives: their units' order.
    ahead = ModuleLines(debug.image)
    order = ahead.read_ahead(addresses)
    assert sorted(order) == addresses
    assert disagreements(ahead, {address: gdbs[address] for address in order}) == []


def test_corrupt_dwarf_raises_format_errors_only(lines_build: Path) -> None:
    """Random damage to every DWARF section: a typed error or an answer, never a crash or hang."""
    path = lines_build / "lines-dwarf5"
    image = ElfImage(path.read_bytes())
    pristine = {field: section_data(image, name) for field, name in DWARF_SECTIONS.items()}
    text = image.sections[".text"]
    addresses = range(text.address, text.address + text.size, 61)
    random = Random(18)
    outcomes = {"answers": 0, "errors": 0}
    for _round in range(60):
        damaged = {}
        for field, data in pristine.items():
            if data is None:
                damaged[field] = None
                continue
            raw = bytearray(data)
            for _ in range(random.randint(0, 6)):
                raw[random.randrange(len(raw))] = random.randrange(256)
            if random.random() < 0.2:
                del raw[random.randrange(len(raw)) :]
            damaged[field] = bytes(raw)
        try:
            lines = ModuleLines(image, Sections("<", **damaged))
        except FormatError:
            outcomes["errors"] += 1
            continue
        for address in addresses:
            try:
                lines.locate(address)
                outcomes["answers"] += 1
            except FormatError:
                outcomes["errors"] += 1
    assert outcomes["answers"] and outcomes["errors"]


def test_the_lines_option_gives_each_frame_what_the_engine_gives(lines_build: Path) -> None:
    """``pid --lines``: JSON and text carry the engine's answers (checked against gdb above).

    The process is held with SIGSTOP so both readings see the same stacks.
    """
    import os
    import signal
    import sys

    with start_program(lines_build, "lines-dwarf5") as running:
        os.kill(running.pid, signal.SIGSTOP)
        try:
            engine, _ = liveunwind_logical_frames(running.pid)
            command = [sys.executable, "-m", "liveunwind", "pid", str(running.pid), "--lines"]
            document = json.loads(
                subprocess.run(
                    [*command, "--json"], capture_output=True, text=True, check=True
                ).stdout
            )
            text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        finally:
            os.kill(running.pid, signal.SIGCONT)
    wired = {
        thread["tid"]: [
            [
                *((place["function"], place["file"], place["line"]) for place in frame["inlined"]),
                (frame["file"], frame["line"]),
            ]
            for frame in thread["frames"]
        ]
        for thread in document["threads"]
    }
    expected = {
        tid: [
            [*located[:-1], (located[-1][1], located[-1][2])] if located else [(None, None)]
            for located in frames
        ]
        for tid, frames in engine.items()
    }
    assert wired == expected
    inlined = sum(
        len(frame["inlined"]) for thread in document["threads"] for frame in thread["frames"]
    )
    assert inlined >= 5 and text.count("[inline]") == inlined
