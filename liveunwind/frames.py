"""The results of a walk: frames, per-thread backtraces, and why each walk ended.

The records are plain classes with ``__slots__`` rather than dataclasses:
``dataclasses`` (with ``inspect`` behind it) and the code it generates per
class cost more start-up time than a whole cold backtrace of a small program.
"""

from __future__ import annotations

from collections import namedtuple
from enum import Enum


class Method(Enum):
    """How a frame's registers were found."""

    CONTEXT = "context"  # the stopped thread's own registers
    CFI = "cfi"
    SFRAME = "sframe"
    COMPACT = "compact"
    DYNAMIC = "dynamic"
    SIGNAL = "signal"  # registers the kernel saved in a signal frame
    GOROUTINE = "goroutine"  # registers Go saved in g.sched when it switched to its g0 stack
    FRAMEPOINTER = "framepointer"
    PROLOGUE = "prologue"  # the function's own code, read from its start (no table covers it)
    LEAF = "leaf"  # frame 0 had not built a frame: return address at [sp] or in LR
    SCAN = "scan"


class Trust(Enum):
    """How far a frame can be trusted, best first."""

    EXACT = "exact"  # read from the thread itself
    HIGH = "high"  # computed from an unwind table or a kernel signal frame
    MEDIUM = "medium"  # a checked frame-pointer chain, or the function's prologue read
    LOW = "low"  # a guess from stack contents

    @staticmethod
    def of(method: Method) -> Trust:
        if method is Method.CONTEXT:
            return Trust.EXACT
        if method is Method.FRAMEPOINTER or method is Method.PROLOGUE:
            return Trust.MEDIUM
        if method in (Method.SCAN, Method.LEAF):
            return Trust.LOW
        return Trust.HIGH


class StopReason(Enum):
    """Why the walk of one thread ended; only END_OF_STACK means complete."""

    END_OF_STACK = "end of stack"
    FRAME_LIMIT = "frame limit"
    NO_UNWIND_INFO = "no unwind info"
    UNREADABLE_MEMORY = "unreadable memory"
    CFA_NOT_GROWING = "CFA did not grow"
    PC_NOT_MAPPED = "pc outside every mapping"
    REPEATED_FRAME = "repeated frame"
    BAD_RULE = "unusable unwind rule"
    INTERRUPTED = "interrupted"
    #: A live thread that did not stop in time (a main thread inside vfork(),
    #: a task in uninterruptible sleep): no registers, so no frames; its kernel
    #: state and wait channel are the detail.  The other threads were walked.
    NOT_STOPPED = "thread did not stop"


class SourceLocation(namedtuple("SourceLocation", "function file line")):
    """One logical frame: its function (None if DWARF names none), source file and line."""

    __slots__ = ()
    function: str | None
    file: str | None
    line: int | None


class PythonFrame:
    """One Python frame (``--python``): its function's qualified name, its file, its line.

    A plain class, not a named tuple: frames.py is on every backtrace's
    import path, where a named tuple's class costs more than this one.
    """

    __slots__ = ("file", "function", "line")

    def __init__(self, function: str, file: str, line: int | None) -> None:
        self.function = function
        self.file = file
        #: None where the code has no line for the instruction (CPython's -1).
        self.line = line

    def __repr__(self) -> str:
        return f"<PythonFrame {self.function} {self.file}:{self.line}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PythonFrame):
            return NotImplemented
        return (self.function, self.file, self.line) == (other.function, other.file, other.line)

    def __hash__(self) -> int:
        return hash((self.function, self.file, self.line))

    def as_dict(self) -> dict[str, object]:
        return {"function": self.function, "file": self.file, "line": self.line}


class Frame:
    """One physical frame of a backtrace.

    ``module_offset`` is the pc as a link-time address of its module (pc minus
    load bias): the number ``addr2line -e MODULE`` wants.  ``module``,
    ``function`` and ``offset`` are filled in by the symbolizer; ``file``,
    ``line`` and ``inlined`` only when source lines were asked for, ``python``
    only when Python frames were.
    """

    __slots__ = (
        "cfa",
        "exact_pc",
        "file",
        "function",
        "index",
        "inlined",
        "line",
        "method",
        "module",
        "module_offset",
        "notes",
        "offset",
        "pc",
        "python",
        "signal_frame",
        "sp",
    )

    def __init__(
        self,
        index: int,
        pc: int,
        sp: int,
        method: Method,
        cfa: int | None = None,
        *,
        signal_frame: bool = False,
        exact_pc: bool = False,
    ) -> None:
        self.index = index
        self.pc = pc
        self.sp = sp
        self.method = method
        self.cfa = cfa
        self.module: str | None = None
        self.module_offset: int | None = None
        self.function: str | None = None
        self.offset: int | None = None
        #: This frame is the kernel's signal frame (sigreturn trampoline).
        self.signal_frame = signal_frame
        #: ``pc`` is where execution stopped (frame 0, or code interrupted by a
        #: signal), not a return address; lookups use ``pc`` itself, not ``pc - 1``.
        self.exact_pc = exact_pc
        #: Why this frame was found the way it was (sources that failed), for --verbose.
        self.notes: list[str] = []
        #: The source file and line of the frame's own function (for a caller: of the call).
        self.file: str | None = None
        self.line: int | None = None
        #: Logical frames inlined into this one at ``pc``, innermost first.
        self.inlined: tuple[SourceLocation, ...] = ()
        #: The Python frames this frame runs (it is a call of CPython's eval loop), innermost first.
        self.python: tuple[PythonFrame, ...] = ()

    def __repr__(self) -> str:
        name = f" {self.function}+{self.offset:#x}" if self.function else ""
        return f"<Frame #{self.index} {self.pc:#x}{name} {self.method.value}>"

    @property
    def trust(self) -> Trust:
        return Trust.of(self.method)

    @property
    def lookup_pc(self) -> int:
        """The address that lies inside the frame's function.

        Caller frames look up pc - 1 (ARCHITECTURE.md: the call may be a
        function's last instruction).
        """
        return self.pc if self.exact_pc else self.pc - 1


class ThreadBacktrace:
    """The frames of one thread, innermost first, and why the walk ended where it did."""

    __slots__ = (
        "frames",
        "name",
        "python_unplaced",
        "state",
        "stop_detail",
        "stop_notes",
        "stop_reason",
        "tid",
    )

    def __init__(
        self,
        tid: int,
        name: str,
        frames: list[Frame],
        stop_reason: StopReason,
        stop_detail: str = "",
        state: str = "",
        stop_notes: list[str] | None = None,
    ) -> None:
        self.tid = tid
        self.name = name
        self.frames = frames
        self.stop_reason = stop_reason
        #: Details of the stop: the pc, module or address concerned.
        self.stop_detail = stop_detail
        #: Scheduler state from /proc (``S (sleeping)``), when known.
        self.state = state
        #: Why each source failed at the last frame, for --verbose.
        self.stop_notes = stop_notes if stop_notes is not None else []
        #: Python frames of the thread no native frame could be found to run, innermost first.
        self.python_unplaced: tuple[PythonFrame, ...] = ()

    def __repr__(self) -> str:
        return f"<ThreadBacktrace {self.tid} {len(self.frames)} frames, {self.stop_text}>"

    @property
    def complete(self) -> bool:
        return self.stop_reason is StopReason.END_OF_STACK

    @property
    def stop_text(self) -> str:
        text = self.stop_reason.value
        return f"{text}: {self.stop_detail}" if self.stop_detail else text


class CrashInfo(
    namedtuple(
        "CrashInfo",
        "executable arguments signal signal_name code code_name fault_address tid",
        defaults=("", "", 0, "", 0, "", None, None),
    )
):
    """What a core file says about the process and the signal that ended it."""

    __slots__ = ()
    executable: str
    arguments: str
    signal: int
    signal_name: str
    #: ``si_code`` and its meaning for this signal (e.g. ``SEGV_MAPERR``).
    code: int
    code_name: str
    fault_address: int | None
    #: The thread that received the signal (listed first in the report).
    tid: int | None

    def describe(self) -> str:
        """One line: ``SIGSEGV (SEGV_MAPERR) at 0x0 in thread 1234``."""
        text = self.signal_name or f"signal {self.signal}"
        if self.code_name:
            text += f" ({self.code_name})"
        if self.fault_address is not None:
            text += f" at {self.fault_address:#x}"
        if self.tid is not None:
            text += f" in thread {self.tid}"
        return text


class Backtrace:
    """Every requested thread of one target at one moment."""

    __slots__ = ("arch", "crash", "pid", "problems", "threads", "timings")

    def __init__(
        self,
        pid: int | None,
        threads: list[ThreadBacktrace],
        arch: str,
        problems: list[str] | None = None,
        timings: dict[str, float] | None = None,
        crash: CrashInfo | None = None,
    ) -> None:
        self.pid = pid
        self.threads = threads
        self.arch = arch
        #: What went wrong outside any one thread (unreadable files, build-id mismatches).
        self.problems = problems if problems is not None else []
        #: Seconds spent per phase (``freeze`` = how long the target was stopped).
        self.timings = timings if timings is not None else {}
        #: For core files: the crash the core records.
        self.crash = crash

    def __repr__(self) -> str:
        return f"<Backtrace pid={self.pid} {len(self.threads)} threads {self.arch}>"

    @property
    def complete(self) -> bool:
        return all(thread.complete for thread in self.threads)
