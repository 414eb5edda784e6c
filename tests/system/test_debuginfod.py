"""debuginfod: a module's debug file from a real local server, then from the client cache.

The program runs from a folder that holds only its stripped executable: no
debug file beside it, none under /usr/lib/debug.  Its debug file is served by
Debian's ``debuginfod`` inside a network namespace with only loopback
(``tests/debuginfod_probe.py``, run under ``unshare -n``), behind a server
that refuses connections and one that accepts and never answers.  The
frames liveunwind finds that way, and again from the cache once the server
is gone, must equal gdb's, which is given the debug file by build-id.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from liveunwind.formats.elf import ElfImage
from tests.support.lines import differences, gdb_logical_frames
from tests.support.paths import SUPPORT
from tests.support.programs import start_program

PROBE = SUPPORT / "debuginfod_probe.py"


def _require(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def test_frames_through_a_local_debuginfod_and_its_cache(
    lines_build: Path, tmp_path: Path, gdb: str
) -> None:
    for tool in ("debuginfod", "unshare", "ip"):
        _require(tool)
    build = lines_build
    program_dir, served, cache, work = (tmp_path / name for name in ("bin", "srv", "cache", "w"))
    for directory in (program_dir, served, work):
        directory.mkdir()
    shutil.copy(build / "lines-split", program_dir)
    shutil.copy(build / "lines-split", served)
    shutil.copy(build / "lines-split.debug", served)
    build_id = ElfImage((build / "lines-split").read_bytes()).build_id
    assert build_id is not None
    hex_id = build_id.hex()
    # gdb's copy: by build-id in a debug directory liveunwind is not told about.
    gdb_debug = tmp_path / "gdb-debug" / ".build-id" / hex_id[:2]
    gdb_debug.mkdir(parents=True)
    shutil.copy(build / "lines-split.debug", gdb_debug / f"{hex_id[2:]}.debug")
    gdb_dirs = f"/usr/lib/debug:{tmp_path / 'gdb-debug'}"

    with start_program(program_dir, "lines-split") as running:
        probe = subprocess.run(
            [
                "unshare",
                "-n",
                sys.executable,
                str(PROBE),
                str(running.pid),
                str(served),
                str(cache),
                str(work),
                hex_id,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr
        theirs = gdb_logical_frames(running.pid, (f"set debug-file-directory {gdb_dirs}",))
    report = json.loads(probe.stdout.splitlines()[-1])

    for phase in ("served", "cached"):
        ours = {int(tid): frames for tid, frames in report[phase]["frames"].items()}
        ours = {tid: [[tuple(entry) for entry in frame] for frame in f] for tid, f in ours.items()}
        assert differences(ours, theirs) == [], phase
        names = {entry[0] for frames in ours.values() for frame in frames for entry in frame}
        assert {"chain_level3", "inner_wait", "worker_block"} <= names, phase
    # The refusing and the silent server were each tried once, then left alone.
    served_problems = report["served"]["problems"]
    assert len([p for p in served_problems if "not asked again" in p]) == 2, served_problems
    assert 2.0 <= report["served_seconds"] < 30
    missing, seconds = report["unknown_build_id"]
    assert missing is None and seconds < 1.0
    assert report["cached"]["problems"] == []
    assert (cache / hex_id / "debuginfo").is_file()
    executable = report["executable"]
    assert executable == str(cache / hex_id / "executable")
    assert ElfImage(Path(executable).read_bytes()).build_id == build_id
