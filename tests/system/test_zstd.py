"""zstd: a gcore core compressed by the zstd command reads, through the stream reader, as itself.

Decompression on bytes made here is tests/unit/test_zstd.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from liveunwind.formats import zstd
from tests.support.oracles import gdb_gcore


def test_a_zstd_core_reads_as_the_plain_core(run_program, gdb: str, tmp_path: Path) -> None:
    if shutil.which("zstd") is None:
        pytest.skip("zstd is not installed")
    plain = tmp_path / "core"
    gdb_gcore(run_program("threads-O2").pid, plain, gdb=gdb)
    subprocess.run(["zstd", "-q", "-3", str(plain), "-o", str(tmp_path / "core.zst")], check=True)
    expected = plain.read_bytes()
    with open(tmp_path / "core.zst", "rb") as raw:
        assert raw.read(4) == zstd.MAGIC
        raw.seek(0)
        stream = zstd.reader(raw)
        blocks = []
        while block := stream.read(1 << 20):
            blocks.append(block)
    assert b"".join(blocks) == expected
