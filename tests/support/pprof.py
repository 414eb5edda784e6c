"""``go tool pprof`` (Debian's golang-go), the oracle that reads our pprof files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

GO = shutil.which("go")
needs_go = pytest.mark.skipif(GO is None, reason="go tool pprof needs golang-go (make system-deps)")


def pprof(*arguments: str) -> str:
    """What ``go tool pprof ARGUMENTS`` prints; it must succeed."""
    assert GO is not None
    result = subprocess.run(
        [GO, "tool", "pprof", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PPROF_TMPDIR": "/tmp", "HOME": os.environ.get("HOME", "/tmp")},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def first_mapping(raw: str) -> str:
    """The file of mapping 1 in ``pprof -raw``'s output: what pprof calls the program."""
    found = re.search(r"^\s*1: 0x[0-9a-f]+/0x[0-9a-f]+/0x[0-9a-f]+ (\S+)", raw, re.MULTILINE)
    assert found is not None, raw
    return found.group(1)
