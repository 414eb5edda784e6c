"""Go's function table: read from a Go program, or built from the layout facts (unit tests)."""

from __future__ import annotations

import os
import re
import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from liveunwind.arch import arch_by_name
from liveunwind.formats import leb128
from liveunwind.formats.elf import ElfImage
from liveunwind.formats.unwind.gopclntab import MAGIC_GO116, MAGIC_GO120, GoPclnTab
from tests.support.cores import unlimited_core
from tests.support.programs import RunningProgram


def go_table(path: Path) -> tuple[GoPclnTab, ElfImage]:
    """The .gopclntab of an x86_64 Go program, and the program's image."""
    image = ElfImage(path.read_bytes(), origin=str(path))
    data = image.contents(image.sections[".gopclntab"])
    assert data is not None
    return GoPclnTab(data, arch_by_name("x86_64"), image.sections[".text"].address), image


#: Where the text of a built table starts (the tables of Go 1.18 on count from it).
TEXT = 0x401000


def pcsp_table(rows: list[tuple[int, int]]) -> bytes:
    """A pc-value table: (value, bytes of code it covers) rows, from value -1."""
    out, previous = bytearray(), -1
    for value, length in rows:
        delta = value - previous
        out += leb128.encode_unsigned(delta * 2 if delta >= 0 else -delta * 2 - 1)
        out += leb128.encode_unsigned(length)
        previous = value
    return bytes(out + b"\0")


def build_pclntab(
    magic: int, functions: list[tuple[int, int, str, int, list[tuple[int, int]]]]
) -> bytes:
    """A .gopclntab of ``magic``'s layout: (entry, end, name, flag, pcsp rows) per function."""
    go116 = magic == MAGIC_GO116
    names, pctab = bytearray(), bytearray(b"\0")
    name_offsets, pcsp_offsets = [], []
    for _entry, _end, name, _flag, rows in functions:
        name_offsets.append(len(names))
        names += name.encode() + b"\0"
        pcsp_offsets.append(len(pctab))
        pctab += pcsp_table(rows)
    header_size = 8 + (7 if go116 else 8) * 8
    names_at = header_size
    pctab_at = names_at + len(names)
    functab_at = pctab_at + len(pctab)
    slot = 8 if go116 else 4
    count = len(functions)
    records, record_offsets = bytearray(), []
    for index, (entry, _end, _name, flag, _rows) in enumerate(functions):
        record_offsets.append((2 * count + 1) * slot + len(records))
        record = struct.pack("<Q", entry) if go116 else struct.pack("<I", entry - TEXT)
        fields = [name_offsets[index], 0, 0, pcsp_offsets[index], 0, 0, 0, 0]
        record += struct.pack("<iIIIIIII", *fields)
        if magic == MAGIC_GO120:
            record += struct.pack("<i", 7)  # startLine
        record += bytes([0, flag, 0, 0])  # funcID, flag, padding, nfuncdata
        records += record + b"\0" * (-len(record) % 8)
    pack = "<Q" if go116 else "<I"
    functab = bytearray()
    for (entry, _end, *_rest), offset in zip(functions, record_offsets):
        functab += struct.pack(pack, entry if go116 else entry - TEXT)
        functab += struct.pack(pack, offset)
    end = functions[-1][1]
    functab += struct.pack(pack, end if go116 else end - TEXT)
    header = struct.pack("<IBBBB", magic, 0, 0, 1, 8)
    if go116:
        header += struct.pack("<7Q", count, 0, names_at, 0, 0, pctab_at, functab_at)
    else:
        header += struct.pack("<8Q", count, 0, TEXT, names_at, 0, 0, pctab_at, functab_at)
    return header + bytes(names) + bytes(pctab) + bytes(functab) + bytes(records)


# -- Go's own traceback, as a crash prints it (GOTRACEBACK=crash) ----------------------------

#: A frame line of Go's traceback: the function, then its arguments.
_FRAME = re.compile(r"^(?P<function>\S+)\((?P<args>.*)\)$")
_WHERE = re.compile(r"\bsp=(?P<sp>0x[0-9a-f]+) pc=(?P<pc>0x[0-9a-f]+)")
_GOROUTINE = re.compile(r"^goroutine (?P<goid>\d+) \[")


#: One goroutine's frames as Go prints them: (function, pc, sp) per frame.
GoFrames = list[tuple[str, int, int]]


def go_goroutines(text: str) -> dict[int, list[GoFrames]]:
    """Go's tracebacks of every goroutine in a crash's output, each print with frames.

    Frames Go inlined (no pc of their own) are left out: they are not
    physical frames.  A goroutine may be printed more than once: "running
    on other thread" (no frames), by its own M from its saved registers,
    and by its M from where the signal found the thread (on g0, from a
    call into the vDSO: ``m.vdsoPC``).
    """
    found: dict[int, list[GoFrames]] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines):
        header = _GOROUTINE.match(line)
        if header is None:
            continue
        frames: list[tuple[str, int, int]] = []
        for at in range(index + 1, len(lines) - 1, 2):
            call, where = lines[at], lines[at + 1]
            match = _FRAME.match(call)
            if match is None or call.startswith("created by") or not where.startswith("\t"):
                break
            place = _WHERE.search(where)
            if place is not None:
                frames.append((match["function"], int(place["pc"], 16), int(place["sp"], 16)))
        if frames:
            found.setdefault(int(header["goid"]), []).append(frames)
    return found


# -- a Go program crashed into a core, for its own traceback -------------------------------


@contextmanager
def crashable(program: Path, folder: Path) -> Iterator[RunningProgram]:
    """``program`` run in ``folder`` with GOTRACEBACK=crash, its stderr kept in
    ``folder/stderr`` and its core allowed (:func:`crash`); killed at the end.

    Skips where the kernel writes no core into the program's folder.
    """
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"kernel.core_pattern does not write cores here ({pattern})")
    with (folder / "stderr").open("wb") as errors:
        running = RunningProgram(
            program,
            [],
            cwd=folder,
            env={"GOTRACEBACK": "crash", "PATH": "/usr/bin:/bin"},
            stderr=errors,
            preexec_fn=unlimited_core,
        )
        try:
            yield running
        finally:
            running.stop()


def crash(running: RunningProgram, folder: Path) -> tuple[Path, str]:
    """SIGQUIT: Go prints every goroutine and aborts into a core; (the core, what Go printed)."""
    os.kill(running.pid, signal.SIGQUIT)
    running.popen.wait(timeout=60)
    assert running.popen.returncode == -signal.SIGABRT
    cores = list(folder.glob("core*"))
    assert len(cores) == 1, cores
    return cores[0], (folder / "stderr").read_text()
