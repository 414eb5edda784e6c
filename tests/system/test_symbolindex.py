"""The command keeps symbol indexes (modules/symbolindex.py) and names frames the same from them.

A real process, the real command (bin/liveunwind) run as a user runs it,
its cache in the test's folder.
"""

from __future__ import annotations

import json
import os

from tests.support.paths import ROOT
from tests.support.startup import run_python


def test_the_next_run_names_every_frame_from_the_indexes_the_first_wrote(
    run_program, tmp_path
) -> None:
    pid = run_program("threads-O2").pid
    cache = tmp_path / "cache" / "liveunwind"
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "cache"))

    def frames() -> list[object]:
        result = run_python(str(ROOT / "bin" / "liveunwind"), "pid", str(pid), "--json", env=env)
        document = json.loads(result.stdout)
        return [
            [
                (frame["pc"], frame["function"], frame["offset"], frame["method"])
                for frame in thread["frames"]
            ]
            for thread in document["threads"]
        ]

    first = frames()
    indexes = {path: path.stat().st_mtime_ns for path in cache.glob("symbols-*.bin")}
    assert indexes, "the C library's table was not kept"  # libc: thousands of functions
    assert any(frame[1] for thread in first for frame in thread)
    assert frames() == first
    # Usable, so not written again.
    assert {path: path.stat().st_mtime_ns for path in cache.glob("symbols-*.bin")} == indexes
    for path in indexes:  # damaged: not used, the tables built again, the same names
        path.write_bytes(path.read_bytes()[:-8])
    assert frames() == first
    assert all(path.stat().st_mtime_ns != indexes[path] for path in indexes)  # written anew
