"""``--lines``: source file, line and inlined calls of every frame, equal to gdb's.

The program (testprogs/lines) parks five threads under chains of inlined
calls; its libc frames come from Debian's separate libc debug file, so every
comparison also covers DWARF 5 as glibc's build writes it.  Each DWARF shape
the readers handle is its own build of the same program.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import start_program
from tests.lines_support import (
    build_lines_programs,
    differences,
    gdb_logical_frames,
    liveunwind_logical_frames,
)


@pytest.fixture(scope="module")
def lines_build() -> Path:
    return build_lines_programs()


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
