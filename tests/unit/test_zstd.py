"""zstd: bounded one-shot decompression (ELFCOMPRESS_ZSTD sections) and the stream reader
a zstd core (systemd-coredump's ``.zst``) is read through.

``ELFCOMPRESS_ZSTD`` sections end to end are in tests/system/test_lines.py
(lines-zstd); a real core through the stream reader is tests/system/test_zstd.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from liveunwind.errors import FormatError
from liveunwind.formats import zstd


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


def test_a_cut_zstd_stream_raises_a_stream_error(tmp_path: Path) -> None:
    data = compressed(bytes(range(256)) * 4096)
    path = tmp_path / "cut.zst"
    path.write_bytes(data[: len(data) // 2])
    with open(path, "rb") as raw, pytest.raises(zstd.stream_errors()):
        stream = zstd.reader(raw)
        while stream.read(1 << 16):
            pass
