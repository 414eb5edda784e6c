"""The text report's frame lines (``liveunwind/cli/report.py``), on frames made by hand.

A thread's plain lines (no inlined calls, source or Python frames) are
made by a loop of their own, with each index's text made once per run:
every one must read as the general frame line (``_frame_text``) reads it.
"""

from __future__ import annotations

from liveunwind.cli.report import _frame_text, format_text
from liveunwind.frames import Backtrace, Frame, Method, SourceLocation, StopReason, ThreadBacktrace


def _frames(count: int) -> list[Frame]:
    frames = []
    for index in range(count):
        frame = Frame(index, 0x7F00_0000_1000 + index * 0x10, 0x7FFE_0000 + index * 8, Method.CFI)
        kind = index % 5
        if kind:
            frame.module = "/usr/lib/x86_64-linux-gnu/libc.so.6"
            frame.module_offset = 0x1000 + index
        if kind in (1, 2):
            frame.function, frame.offset = f"f{index % 3}", (index % 3) * 0x10
        if kind == 3:
            frame.signal_frame = True
        frames.append(frame)
    return frames


def test_plain_lines_read_as_every_frame_line_reads() -> None:
    for count in (1, 9, 10, 11, 101):  # the index's column one, two and three digits wide
        frames = _frames(count)
        frames[count // 2].inlined = (SourceLocation("inlined", "a.c", 3),)
        frames[-1].file, frames[-1].line = "b.c", 7
        thread = ThreadBacktrace(7, "main", frames, StopReason.END_OF_STACK)
        width = len(str(count - 1))
        for symbols in (True, False):
            modules: dict[str, str] = {}
            lines = [line for f in frames for line in _frame_text(f, width, symbols, modules)]
            text = format_text(Backtrace(7, [thread], "x86_64"), symbols=symbols)
            assert text.splitlines()[1 : 1 + len(lines)] == lines


def test_a_frame_numbered_past_its_thread_gets_its_own_number() -> None:
    frames = _frames(3)
    frames[2].index = 12  # no prefix made for it: the general line
    thread = ThreadBacktrace(7, "main", frames, StopReason.END_OF_STACK)
    text = format_text(Backtrace(7, [thread], "x86_64"))
    assert "\n  #12  0x00007f0000001020  f2+0x20  (libc.so.6)  [cfi]\n" in text
