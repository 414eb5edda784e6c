"""Cores crafted from a real kernel core, and files a core names that are not regular files.

Headers that point at 2^63 or ask for 2^22 program headers, a compressed
core whose offsets run past its end, and a core whose libraries and
executable are now FIFOs or devices (a watch on each node says whether
anything opened it).  The file helper itself, on files made here, is
tests/unit/test_hostile_files.py.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from liveunwind.backtrace.api import open_core
from liveunwind.errors import CoreFileError
from liveunwind.targets.cores.elfcore import ElfCore
from tests.support.assertions import assert_one_line_error
from tests.support.cores import crash, kernel_writes_cores_here
from tests.support.hostile import OpenWatch, within
from tests.support.paths import ROOT


def run_core(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "liveunwind", "core", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env=env,
    )


def test_a_core_of_kernel_memory_reads_as_empty() -> None:
    with pytest.raises(CoreFileError, match="empty"):
        ElfCore.open("/proc/self/mem")
    assert_one_line_error(run_core("/proc/self/mem"), 2, "empty")


@pytest.fixture(scope="module")
def real_core(crash_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A core the kernel wrote of crash-O2 leaf, to corrupt."""
    reason = kernel_writes_cores_here()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("hostile-core")
    return crash(folder, [str(crash_build / "build" / "crash-O2"), "leaf"], glob="core*")


def corrupted(core: Path, folder: Path, edits: dict[int, bytes]) -> Path:
    """A copy of ``core`` with bytes replaced at file offsets."""
    data = bytearray(core.read_bytes())
    for offset, raw in edits.items():
        data[offset : offset + len(raw)] = raw
    path = folder / "corrupt.core"
    path.write_bytes(data)
    return path


def program_headers(core: Path) -> list[tuple[int, int]]:
    """(file offset of the header, p_type) of every program header of ``core``."""
    data = core.read_bytes()
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    return [
        (phoff + index * phentsize, struct.unpack_from("<I", data, phoff + index * phentsize)[0])
        for index in range(phnum)
    ]


HUGE = struct.pack("<Q", 1 << 63)


def test_offsets_at_and_past_two_to_the_63(real_core: Path, tmp_path: Path) -> None:
    # e_phoff at 2^63: the table is past the end of the file.
    core = corrupted(real_core, tmp_path, {32: HUGE})
    with pytest.raises(CoreFileError, match="truncated inside its program header table"):
        ElfCore.open(str(core))
    assert_one_line_error(run_core(str(core)), 2, "program header table")
    # p_offset of the note segment at 2^63: no notes, so no threads.
    headers = program_headers(real_core)
    note = next(offset for offset, kind in headers if kind == 4)
    core = corrupted(real_core, tmp_path, {note + 8: HUGE})
    with pytest.raises(CoreFileError, match="no thread registers"):
        ElfCore.open(str(core))
    # p_offset of every LOAD at 2^63 - 1: the memory is missing, and said to be.
    loads = [offset for offset, kind in headers if kind == 1]
    core = corrupted(
        real_core, tmp_path, {at + 8: struct.pack("<Q", (1 << 63) - 1) for at in loads}
    )
    with ElfCore.open(str(core)) as space:
        assert any("truncated" in problem for problem in space.problems)
    result = run_core(str(core))
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr


def test_a_compressed_core_with_offsets_past_its_end(real_core: Path, tmp_path: Path) -> None:
    data = bytearray(real_core.read_bytes())
    data[32:40] = HUGE
    path = tmp_path / "core.gz"
    path.write_bytes(gzip.compress(bytes(data), compresslevel=1))
    with pytest.raises(CoreFileError, match="truncated inside its program header table"):
        ElfCore.open(str(path))


def test_pn_xnum_cannot_make_us_allocate_the_table_it_claims(
    real_core: Path, tmp_path: Path
) -> None:
    """PN_XNUM puts the header count in section header 0: 2^22, or 2^20 of 56 bytes."""
    size = real_core.stat().st_size
    shoff = (size + 7) // 8 * 8
    for count, reason in ((1 << 22, "corrupt program header table"), (1 << 20, "truncated")):
        data = bytearray(real_core.read_bytes())
        data[56:58] = struct.pack("<H", 0xFFFF)  # e_phnum = PN_XNUM
        data[40:48] = struct.pack("<Q", shoff)  # e_shoff
        data += bytes(shoff - size) + bytes(44) + struct.pack("<I", count) + bytes(16)
        path = tmp_path / f"xnum-{count}.core"
        path.write_bytes(data)
        tracemalloc.start()
        try:
            with pytest.raises(CoreFileError, match=reason):
                ElfCore.open(str(path))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, f"{count} headers claimed: {peak} bytes allocated"
        assert_one_line_error(run_core(str(path)), 2, reason)


def test_library_paths_that_are_fifos_or_devices(real_core: Path, tmp_path: Path) -> None:
    """Under --sysroot every file of the core is a FIFO or a device: none is opened."""
    sysroot = tmp_path / "sysroot"
    with ElfCore.open(str(real_core)) as space:
        paths = sorted({m.path for m in space.mappings() if m.is_file})
    assert paths
    watches = []
    for index, path in enumerate(paths):
        planted = sysroot / path.lstrip("/")
        planted.parent.mkdir(parents=True, exist_ok=True)
        if index % 2:
            os.mkfifo(planted)
        else:
            os.mknod(planted, stat.S_IFCHR | 0o600, os.makedev(1, 3))
            watches.append(OpenWatch(planted))
    try:
        with within(10):
            backtrace = open_core(str(real_core), sysroot=str(sysroot))
        assert backtrace.threads[0].frames  # the host's files were used instead
        assert not any(watch.opened() for watch in watches)
    finally:
        for watch in watches:
            watch.close()


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_an_executable_replaced_by_a_fifo_or_a_device(
    crash_build: Path,
    tmp_path: Path,
    kind: str,
) -> None:
    """The core's own executable path now names a FIFO or a device: said, and not opened."""
    reason = kernel_writes_cores_here()
    if reason is not None:
        pytest.skip(reason)
    exe = tmp_path / "crash"
    shutil.copy(crash_build / "build" / "crash-O2", exe)
    core = crash(tmp_path / "cores", [str(exe), "leaf"], glob="core*")
    exe.unlink()
    if kind == "a FIFO":
        os.mkfifo(exe)
    else:
        os.mknod(exe, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    watch = OpenWatch(exe)
    try:
        with within(10):
            backtrace = open_core(str(core))
        assert not watch.opened()
    finally:
        watch.close()
    assert any(f"{exe}: is {kind}, not a regular file" in p for p in backtrace.problems), (
        backtrace.problems
    )
    result = run_core(str(core))
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
