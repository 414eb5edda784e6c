"""gcore cores of lld-linked programs (clang++ -fuse-ld=lld, Rust) unwound like gdb.

gcore leaves code mappings out of the core, so the permissions of those
mappings come from the file's program headers.  lld packs the segments
without page alignment in the file: the page that starts the code also ends
the read-only segment.  Matching a mapping to its segment by file offset
marked the code ``r--p``; every return address then looked like data and
the walks ended after a few frames, reported complete.  These cores must
equal gdb thread for thread.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from liveunwind.backtrace.api import open_core
from liveunwind.targets.cores.elfcore import ElfCore
from tests.support.assertions import assert_matches_gdb
from tests.support.builds import build
from tests.support.oracles import gdb_core_backtraces, gdb_gcore
from tests.support.programs import start_program


def _linked_by_lld(path: Path) -> bool:
    comment = subprocess.run(
        ["readelf", "-p", ".comment", str(path)], capture_output=True, text=True, check=False
    )
    return "LLD" in comment.stdout


@pytest.mark.parametrize("name", ["lld-cxx", "lld-rust"])
def test_gcore_of_lld_linked_program_matches_gdb(lld_build, gdb, tmp_path, name) -> None:
    path = build("lld", f"build/{name}") / name
    assert _linked_by_lld(path), f"{name} was not linked by lld"
    with start_program(lld_build, name) as program:
        core = tmp_path / "core"
        gdb_gcore(program.pid, core, gdb=gdb)
    backtrace = open_core(str(core), str(path), max_frames=0)
    oracle = gdb_core_backtraces(core, path, gdb=gdb)
    assert_matches_gdb(backtrace, oracle)
    deepest = max(len(thread.frames) for thread in backtrace.threads)
    assert deepest > 200, "the deep recursion was not walked"


def test_code_of_an_lld_linked_program_is_executable_in_a_gcore_core(
    lld_build, gdb, tmp_path
) -> None:
    """The core has no segment for the code: its permissions come from the right header."""
    path = build("lld", "build/lld-cxx") / "lld-cxx"
    with start_program(lld_build, "lld-cxx") as program:
        live = [
            line.split()
            for line in Path(f"/proc/{program.pid}/maps").read_text().splitlines()
            if line.endswith(str(path))
        ]
        core = tmp_path / "core"
        gdb_gcore(program.pid, core, gdb=gdb)
    with ElfCore.open(str(core), str(path)) as target:
        recorded = {m.start: m.perms for m in target.mappings() if m.path == str(path)}
    expected = {int(fields[0].split("-")[0], 16): fields[1] for fields in live}
    assert recorded == expected
    assert "r-xp" in recorded.values()
