"""zstd: bounded one-shot decompression (ELFCOMPRESS_ZSTD sections) and the stream reader
a zstd core (systemd-coredump's ``.zst``) is read through.

``ELFCOMPRESS_ZSTD`` sections end to end are in test_lines.py (lines-zstd).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from liveunwind.errors import FormatError
from liveunwind.formats import zstd
from tests.oracles import gdb_gcore


def compressed(data: bytes) -> bytes:
    return zstd.library().compress(data)


def test_a_section_decompresses_to_exactly_its_declared_size() -> None:
    data = bytes(range(256)) * 1000
    assert zstd.decompress(compressed(data), len(data), 1 << 20, "test") == data


@pytest.mark.parametrize("declared", [0, 255_999, 256_001])
def test_a_size_other_than_declared_is_refused(declared: int) -> None:
    data = bytes(range(256)) * 1000
    with pytest.raises(FormatError, match="declared"):
        zstd.decompress(compressed(data), declared, 1 << 20, "test")


def test_a_claimed_size_above_the_limit_is_refused_before_any_work() -> None:
    with pytest.raises(FormatError, match="above the limit"):
        zstd.decompress(b"not even zstd", 1 << 40, 1 << 20, "test")


def test_garbage_is_a_format_error() -> None:
    with pytest.raises(FormatError):
        zstd.decompress(zstd.MAGIC + b"\xff" * 64, 100, 1 << 20, "test")


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


def test_a_cut_zstd_stream_raises_a_stream_error(tmp_path: Path) -> None:
    data = compressed(bytes(range(256)) * 4096)
    path = tmp_path / "cut.zst"
    path.write_bytes(data[: len(data) // 2])
    with open(path, "rb") as raw, pytest.raises(zstd.stream_errors()):
        stream = zstd.reader(raw)
        while stream.read(1 << 16):
            pass
