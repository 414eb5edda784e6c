"""Real riscv64 kernel cores read on the x86_64 host, against gdb-multiarch on the same cores.

The cores in tests/data/riscv64-cores were written by a riscv64 Linux kernel
in the riscv64 VM (its README says how): QEMU 7.2's user mode writes no
riscv64 core, and gdb-multiarch's ``gcore`` through ``qemu-riscv64 -g``
writes one gdb cannot read back.  liveunwind reads them compressed, as they
are stored; gdb-multiarch gets them decompressed.  Every thread's frames
must be gdb's, pc for pc, and the crash the kernel recorded must be named.
"""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.oracles import describe, gdb_core_backtraces, physical
from tests.support.paths import DATA

CORES = DATA / "riscv64-cores"
EXECUTABLE = CORES / "crash-O2-static.xz"
#: core → (the signal the kernel recorded, the crashing thread's first functions).
EXPECTED = {
    "crash-O2-static-thread": ("SIGSEGV", ["thread_fault", "thread_middle", "thread_main"]),
    "crash-O2-static-handler": ("SIGSEGV", ["handler_fault", "on_usr1"]),
}


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The executable and the cores, decompressed for gdb-multiarch."""
    folder = tmp_path_factory.mktemp("riscv64-cores")
    for packed in CORES.glob("*.xz"):
        (folder / packed.stem).write_bytes(lzma.decompress(packed.read_bytes()))
    (folder / EXECUTABLE.stem).chmod(0o755)
    return folder


def liveunwind_core(core: Path, executable: Path) -> dict[str, Any]:
    result = run_cli("core", str(core), str(executable), "--json", "--max-frames", "0", timeout=120)
    assert result.returncode in (0, 1), result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_riscv64_kernel_core_matches_gdb_multiarch(unpacked: Path, name: str) -> None:
    gdb = shutil.which("gdb-multiarch")
    if gdb is None:
        pytest.skip("gdb-multiarch is not installed")
    executable = unpacked / EXECUTABLE.stem
    oracle = gdb_core_backtraces(unpacked / f"{name}.core", executable, gdb=gdb)
    # The compressed core, as stored: liveunwind reads .xz cores as they are.
    document = liveunwind_core(CORES / f"{name}.core.xz", executable)
    assert document["arch"] == "riscv64"
    signal, chain = EXPECTED[name]
    assert document["crash"]["signal_name"] == signal
    crashed = document["threads"][0]
    assert crashed["tid"] == document["crash"]["tid"]
    functions = [frame.get("function") for frame in crashed["frames"]]
    assert functions[: len(chain)] == chain, functions
    ours = {thread["tid"]: thread for thread in document["threads"]}
    assert set(ours) == set(oracle)
    for tid, frames in oracle.items():
        theirs = physical(frames)
        got = [frame["pc"] for frame in ours[tid]["frames"]]
        assert got == [frame.pc for frame in theirs], (
            f"thread {tid}: liveunwind {[hex(pc) for pc in got]}\ngdb-multiarch:\n"
            f"{describe(theirs)}"
        )
        assert ours[tid]["complete"], f"thread {tid}: {ours[tid]['stop_reason']}"
