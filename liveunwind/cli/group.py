"""``core --group``: crash signatures, the way crash-report services group their reports.

A core's signature is its program, the signal that ended it, and the
first N frames (``--group-frames``, default :data:`DEFAULT_FRAMES`) of the
thread that received the signal *in the program's own code*: frames in
system libraries (a path under ``/lib``, ``/lib64``, ``/usr/lib``,
``/usr/lib64``: libc's ``raise``, ``abort``, ``__pthread_kill_implementation``),
in the vDSO, and the signal trampoline are skipped, so an ``abort()`` from
one place is one signature however libc reached ``raise``.  The executable
itself is always the program's own code, wherever it lives.  A frame is
its function's name without the offset (two crashes a few instructions
apart in one function are one crash) and without the suffixes gcc gives
the parts and copies it makes of a function (``.cold``, ``.part.N``,
``.isra.N``, ``.constprop.N``: ``recurse_then_abort.cold`` is
``recurse_then_abort``, as gdb names it from the DWARF, and whether gcc
split a function is no part of where it crashed); a frame with no name is ``??`` and
its module's file name, without the offset (an offset would split a crash
over every rebuild).  A thread without a frame in the program's own code
(a crash inside libc called from nowhere the report can name) keeps its
first N frames, whatever their module.

Groups come sorted by their number of cores, most first (then by
signature), each with up to :data:`MAX_EXAMPLES` example cores (the first
ones read).
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.frames import Backtrace, Frame

#: Frames of the program's own code in a signature, unless --group-frames says otherwise.
DEFAULT_FRAMES = 3
#: Example cores listed per group.
MAX_EXAMPLES = 3
#: Where system libraries live: frames there are not the program's own code.
_SYSTEM_FOLDERS = ("/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/")
#: gcc's suffixes for the parts and copies of a function, at the end of its symbol.
_CLONE_SUFFIXES = re.compile(r"(?:\.(?:cold|part|isra|constprop|lto_priv|localalias)(?:\.\d+)?)+$")


class Signature:
    """What crashes alike share: the program, the signal, the first frames in its own code."""

    __slots__ = ("frames", "program", "signal")

    def __init__(self, program: str, signal: str, frames: tuple[str, ...]) -> None:
        self.program = program
        self.signal = signal
        self.frames = frames

    def _key(self) -> tuple[str, str, tuple[str, ...]]:
        return self.program, self.signal, self.frames

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Signature) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def text(self) -> str:
        """``crash-O2  SIGSEGV  leaf_store < leaf_caller < main`` (innermost first)."""
        frames = " < ".join(self.frames) or "(no frames)"
        return f"{os.path.basename(self.program) or '?'}  {self.signal}  {frames}"


class Group:
    """The cores of one signature: how many, and the first few."""

    __slots__ = ("count", "examples", "signature")

    def __init__(self, signature: Signature) -> None:
        self.signature = signature
        self.count = 0
        self.examples: list[str] = []

    def add(self, core: str) -> None:
        self.count += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(core)


class Groups:
    """Every signature seen in a run, with its cores, bounded by the number of cores."""

    def __init__(self) -> None:
        self._groups: dict[Signature, Group] = {}

    def add(self, signature: Signature, core: str) -> None:
        group = self._groups.get(signature)
        if group is None:
            group = self._groups[signature] = Group(signature)
        group.add(core)

    def sorted(self) -> list[Group]:
        """Most cores first; equal counts by signature, so the order is the same every run."""
        return sorted(
            self._groups.values(),
            key=lambda group: (-group.count, group.signature.text(), group.signature.program),
        )


def signature(backtrace: Backtrace, program: str, depth: int) -> Signature:
    """The signature of a core's backtrace; ``program`` is its executable's path."""
    crash = backtrace.crash
    signal = ""
    if crash is not None:
        signal = crash.signal_name or (f"signal {crash.signal}" if crash.signal else "")
    thread = next(
        (each for each in backtrace.threads if crash is not None and each.tid == crash.tid),
        backtrace.threads[0] if backtrace.threads else None,
    )
    frames = [] if thread is None else [frame for frame in thread.frames if not frame.signal_frame]
    own = [frame for frame in frames if _own_code(frame, program)]
    chosen = (own or frames)[:depth]
    return Signature(program, signal or "no signal", tuple(_frame_name(frame) for frame in chosen))


def _own_code(frame: Frame, program: str) -> bool:
    """The frame runs the program's code: its executable, or a file outside the system folders."""
    module = frame.module
    if not module or not module.startswith("/"):
        return False  # no module, the vDSO, [vsyscall], anonymous (JIT) code
    return module == program or not module.startswith(_SYSTEM_FOLDERS)


def _frame_name(frame: Frame) -> str:
    """The function without its offset, else ``?? (module)`` without one."""
    if frame.function:
        return _CLONE_SUFFIXES.sub("", frame.function) or frame.function
    return f"?? ({os.path.basename(frame.module)})" if frame.module else "??"
