"""The Mach-O test binaries (testprogs/macho), their cores, and ``__unwind_info`` made by hand."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT, TESTPROGS

MACHO = TESTPROGS / "macho"
BUILD = MACHO / "build"
TOOL = ROOT / "tools" / "macho_core.py"
"""Runs a Mach-O binary in unicorn and writes a Mach-O core of it, with the truth beside it."""
ARCHES = ("x86_64", "arm64")
TOOLS = ("clang-16", "ld64.lld-16", "llvm-objdump-16", "llvm-dwarfdump-16")
"""What building the binaries and reading them for the oracle takes."""


def make_core(binary: Path, directory: Path, *extra: str) -> tuple[Path, dict]:
    """A core of ``binary`` stopped in its leaf (tools/macho_core.py), and the truth about it."""
    core = directory / f"{binary.name}.core"
    subprocess.run(
        [sys.executable, str(TOOL), str(binary), "leaf_stop", "-o", str(core), *extra],
        check=True,
        capture_output=True,
    )
    return core, json.loads(Path(f"{core}.json").read_text())


def build_unwind_info(
    common: list[int],
    pages: list[tuple[str, list[tuple[int, int]]]],
    sentinel: int,
    personalities: list[int] = (),
    lsdas: list[tuple[int, int]] = (),
) -> bytes:
    """An ``__unwind_info`` section; each page is ("regular"|"compressed", [(offset, encoding)])."""
    header_size = 28
    common_at = header_size
    personalities_at = common_at + 4 * len(common)
    index_at = personalities_at + 4 * len(personalities)
    lsda_at = index_at + 12 * (len(pages) + 1)
    pages_at = lsda_at + 8 * len(lsdas)
    blobs = []
    position = pages_at
    index = []
    for kind, entries in pages:
        base = entries[0][0]
        if kind == "regular":
            blob = struct.pack("<I2H", 2, 8, len(entries))
            blob += b"".join(struct.pack("<2I", offset, encoding) for offset, encoding in entries)
        else:
            local = sorted({encoding for _, encoding in entries if encoding not in common})
            words = []
            for offset, encoding in entries:
                slot = (
                    common.index(encoding)
                    if encoding in common
                    else len(common) + local.index(encoding)
                )
                words.append(slot << 24 | (offset - base))
            blob = struct.pack("<I4H", 3, 12, len(words), 12 + 4 * len(words), len(local))
            blob += struct.pack(f"<{len(words)}I", *words)
            blob += struct.pack(f"<{len(local)}I", *local)
        index.append((base, position, lsda_at))
        blobs.append(blob)
        position += len(blob)
    index.append((sentinel, 0, lsda_at + 8 * len(lsdas)))
    section = struct.pack(
        "<7I",
        1,
        common_at,
        len(common),
        personalities_at,
        len(personalities),
        index_at,
        len(index),
    )
    section += struct.pack(f"<{len(common)}I", *common)
    section += struct.pack(f"<{len(personalities)}I", *personalities)
    section += b"".join(struct.pack("<3I", *entry) for entry in index)
    section += b"".join(struct.pack("<2I", *pair) for pair in lsdas)
    return section + b"".join(blobs)
