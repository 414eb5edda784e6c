"""``--lines``' compressed sections, inflated as far as lookups reach, on a thread ahead of them.

On zlib streams made here.  Every DWARF shape against gdb, on the program of
testprogs/lines and on libc, is tests/system/test_lines.py.
"""

from __future__ import annotations

import zlib
from random import Random

import pytest

from liveunwind.errors import FormatError
from liveunwind.modules.lines import GrowingSection
from tests.support.waits import wait_until


def test_read_ahead_stops_at_its_goal_and_the_caller_goes_on_from_there() -> None:
    """The thread inflates as far as asked (not the whole section); past that the caller
    inflates the rest itself, and the bytes are zlib's own."""
    payload = Random(18).randbytes(1 << 16) * 64  # 4 MiB: several steps of the thread
    section = GrowingSection(zlib.compress(payload), len(payload), "test: .debug_info")
    section.read_ahead(100_000)
    section.ensure(50_000)
    wait_until(lambda: not section._running, 30, "the read-ahead thread to stop at its goal")
    assert 100_000 <= section.filled < len(payload)
    section.ensure(-1)
    assert section.data[:] == payload


def test_the_thread_goes_on_to_the_next_section_and_the_caller_can_take_it_over() -> None:
    """With ``then``, the thread inflates the second section once the first is at its goal;
    the caller inflating the second meanwhile, the two never step the stream together."""
    payloads = [Random(seed).randbytes(1 << 16) * 32 for seed in (1, 2)]
    first, second = (
        GrowingSection(zlib.compress(payload), len(payload), f"test: {index}")
        for index, payload in enumerate(payloads)
    )
    first.read_ahead(1 << 20, then=second)
    second.ensure(1 << 19)  # while the thread may be on either section
    wait_until(lambda: not (first._running or second._running), 30, "the read-ahead thread to end")
    assert (1 << 20) <= first.filled < len(payloads[0])
    assert second.filled == len(payloads[1])  # read ahead whole, after the first
    first.ensure(-1)
    assert first.data[:] == payloads[0]
    assert second.data[:] == payloads[1]


def test_a_corrupt_stream_read_ahead_fails_the_lookup_not_the_thread() -> None:
    """A stream cut short, found on the read-ahead thread, reaches the caller as a
    FormatError, every time it asks."""
    payload = bytes(range(256)) * 8192
    stream = zlib.compress(payload)
    section = GrowingSection(stream[: len(stream) // 2], len(payload), "test: .debug_info")
    section.read_ahead()
    for _ in range(2):
        with pytest.raises(FormatError):
            section.ensure(-1)
