"""Assertions several test modules share: frames against gdb, and the CLI's one-line errors."""

from __future__ import annotations

import subprocess

from liveunwind.frames import Backtrace
from tests.support.oracles import Backtraces, describe, pcs


def assert_matches_gdb(
    backtrace: Backtrace,
    oracle: Backtraces,
    *,
    only: set[int] | None = None,
    restarted_syscall: int = 0,
) -> None:
    """Every thread (or those in ``only``) has gdb's physical pcs and a complete walk.

    ``restarted_syscall``: when the two stops were not one (gdb attached after
    liveunwind let go), a thread blocked in a system call may be seen at the
    instruction after it by one and, the call restarted, at the call itself by the
    other: frame 0's pcs may then differ by this many bytes (the system-call
    instruction's length).
    """
    ours = {thread.tid: thread for thread in backtrace.threads}
    assert set(ours) == set(oracle), "liveunwind and gdb saw different threads"
    for tid, frames in oracle.items():
        if only is not None and tid not in only:
            continue
        thread = ours[tid]
        got, expected = [frame.pc for frame in thread.frames], pcs(frames)
        if (
            restarted_syscall
            and got
            and expected
            and got[1:] == expected[1:]
            and abs(got[0] - expected[0]) == restarted_syscall
        ):
            got[0] = expected[0]
        assert got == expected, (
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
