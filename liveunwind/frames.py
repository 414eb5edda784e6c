"""The results of a walk: frames, per-thread backtraces, and why each walk ended.

The records are plain classes with ``__slots__`` rather than dataclasses:
``dataclasses`` (with ``inspect`` behind it) and the code it generates per
class cost more start-up time than a whole cold backtrace of a small program.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import namedtuple
    from enum import Enum
else:
    # the standard library's, cheaper to import (liveunwind/classes.py says why)
    from liveunwind.classes import Enum, namedtuple


class Method(Enum):
    """How a frame's registers were found."""

    CONTEXT = "context"  # the stopped thread's own registers
    CFI = "cfi"
    SFRAME = "sframe"
    COMPACT = "compact"
    DYNAMIC = "dynamic"
    SIGNAL = "signal"  # registers the kernel saved in a signal frame
    #: Registers Go saved: in g.sched when it switched to its g0 stack, in m.vdsoPC/vdsoSP
    #: while it calls into the vDSO on another stack.
    GOROUTINE = "goroutine"
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
    #: A walk that guessed read a return address of 0: where a guess placed the
    #: stack, that proves no end; only a table's undefined return address, Go's
    #: top frames or the program's entry function do.
    NO_OUTERMOST_FRAME = "no outermost frame"


class SourceLocation(namedtuple("SourceLocation", "function file line")):
    """One logical frame: its function (None if DWARF names none), source file and line."""

    __slots__ = ()
    function: str | None
    file: str | None
    line: int | None


class PythonValue:
    """A Python local variable's value (``--python --locals``), as read from the target.

    ``type`` is the object's type name (``int``, ``str``, ``NoneType``, or
    whatever ``tp_name`` says).  Values of the simple types — None, bool,
    int, float, str, bytes — are read into ``value``; every other object is
    its type and ``address``.  ``truncated`` says the value was cut at the
    bounds of :mod:`liveunwind.cpython.values` (a str, bytes or int that long
    shows its start).
    """

    __slots__ = ("address", "truncated", "type", "value")

    def __init__(
        self,
        type_name: str,
        value: object = None,
        *,
        address: int | None = None,
        truncated: bool = False,
    ) -> None:
        self.type = type_name
        self.value = value
        #: Where the object is, for an object whose value is not read (None otherwise).
        self.address = address
        self.truncated = truncated

    def text(self) -> str:
        """As Python's ``repr`` gives it, or ``<TYPE object at 0x…>``; a cut value ends in ``…``."""
        if self.address is not None:
            return f"<{self.type} object at {self.address:#x}>"
        shown = repr(self.value)
        return f"{shown}…" if self.truncated else shown

    def as_json(self) -> object:
        """The JSON value: the value itself where JSON holds it exactly, else an object.

        None, bool, int, finite float and str values that were read whole
        are themselves; bytes, a cut value and a float JSON cannot hold are
        ``{"type", "repr", "truncated"}``; any other object ``{"type", "address"}``.
        """
        if self.address is not None:
            return {"type": self.type, "address": self.address}
        value = self.value
        exact = value is None or isinstance(value, (bool, int, str))
        if isinstance(value, float):
            exact = value == value and abs(value) != float("inf")
        if exact and not self.truncated:
            return value
        return {"type": self.type, "repr": repr(value), "truncated": self.truncated}

    def __repr__(self) -> str:
        return f"<PythonValue {self.type} {self.text()}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PythonValue):
            return NotImplemented
        mine = (self.type, self.value, self.address, self.truncated)
        return mine == (other.type, other.value, other.address, other.truncated)

    def __hash__(self) -> int:
        return hash((self.type, self.address, self.truncated))


class PythonFrame:
    """One Python frame (``--python``): its function's qualified name, its file, its line.

    A plain class, not a named tuple: frames.py is on every backtrace's
    import path, where a named tuple's class costs more than this one.
    """

    __slots__ = ("file", "function", "interpreter", "line", "locals")

    def __init__(
        self,
        function: str,
        file: str,
        line: int | None,
        local_values: dict[str, PythonValue] | None = None,
        interpreter: int = 0,
    ) -> None:
        self.function = function
        self.file = file
        #: None where the code has no line for the instruction (CPython's -1).
        self.line = line
        #: The id of the interpreter running it: 0 for the main one, else a subinterpreter's.
        self.interpreter = interpreter
        #: With ``--locals``: the frame's arguments and local variables that have a
        #: value, by name, in the code's order (``f_locals``); None without it.
        self.locals = local_values

    def __repr__(self) -> str:
        return f"<PythonFrame {self.function} {self.file}:{self.line}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PythonFrame):
            return NotImplemented
        return (self.function, self.file, self.line) == (other.function, other.file, other.line)

    def __hash__(self) -> int:
        return hash((self.function, self.file, self.line))

    def as_dict(self) -> dict[str, object]:
        fields: dict[str, object] = {
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "interpreter": self.interpreter,
        }
        if self.locals is not None:
            fields["locals"] = {name: value.as_json() for name, value in self.locals.items()}
        return fields


class PythonTask:
    """An asyncio task (``--python --tasks``): its name, the thread running it, its await chain.

    ``frames`` are the coroutines it is suspended in, innermost first, as
    following ``cr_await`` from the task's coroutine gives them; a task that
    runs now (``thread`` is the id of the thread running it) has only its
    outermost coroutine here, the rest being on that thread's stack.
    """

    __slots__ = ("address", "frames", "name", "thread")

    def __init__(
        self, name: str, thread: int | None, frames: list[PythonFrame], address: int
    ) -> None:
        self.name = name
        self.thread = thread
        self.frames = frames
        #: Where the task object is.
        self.address = address

    def __repr__(self) -> str:
        return f"<PythonTask {self.name!r} thread={self.thread} {len(self.frames)} frames>"

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "thread": self.thread,
            "address": self.address,
            "frames": [frame.as_dict() for frame in self.frames],
        }


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

    __slots__ = ("arch", "crash", "pid", "problems", "tasks", "threads", "timings")

    def __init__(
        self,
        pid: int | None,
        threads: list[ThreadBacktrace],
        arch: str,
        problems: list[str] | None = None,
        timings: dict[str, float] | None = None,
        crash: CrashInfo | None = None,
    ) -> None:
        #: With ``--tasks``: every asyncio task of the process (None without it).
        self.tasks: list[PythonTask] | None = None
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
