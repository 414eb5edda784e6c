"""Assertions several test modules share: frames against gdb, and the CLI's one-line errors."""

from __future__ import annotations

import subprocess

from liveunwind.frames import Backtrace
from tests.support.oracles import Backtraces, describe, pcs


def assert_matches_gdb(
    backtrace: Backtrace, oracle: Backtraces, *, only: set[int] | None = None
) -> None:
    """Every thread (or those in ``only``) has gdb's physical pcs and a complete walk."""
    ours = {thread.tid: thread for thread in backtrace.threads}
    assert set(ours) == set(oracle), "liveunwind and gdb saw different threads"
    for tid, frames in oracle.items():
        if only is not None and tid not in only:
            continue
        thread = ours[tid]
        got = [frame.pc for frame in thread.frames]
        assert got == pcs(frames), (
            f"thread {tid} ({thread.name}) differs from gdb\n"
            f"liveunwind ({thread.stop_text}):\n"
            + "\n".join(f"#{f.index:<3} {f.pc:#x} {f.function}" for f in thread.frames)
            + f"\ngdb:\n{describe(frames)}"
        )
        assert thread.complete, f"thread {tid} stopped early: {thread.stop_text}"


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """The command failed with ``code``, saying so in one line that contains ``words``."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("liveunwind: ")
    for word in words:
        assert word in lines[0], lines[0]
    assert result.stdout == ""
