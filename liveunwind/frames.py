"""The results of a walk: frames, per-thread backtraces, and why each walk ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Method(Enum):
    """How a frame's registers were found."""

    CONTEXT = "context"  # the stopped thread's own registers
    CFI = "cfi"
    SFRAME = "sframe"
    COMPACT = "compact"
    DYNAMIC = "dynamic"
    SIGNAL = "signal"  # registers the kernel saved in a signal frame
    FRAMEPOINTER = "framepointer"
    LEAF = "leaf"  # frame 0 had not built a frame: return address at [sp] or in LR
    SCAN = "scan"


class Trust(Enum):
    """How far a frame can be trusted, best first."""

    EXACT = "exact"  # read from the thread itself
    HIGH = "high"  # computed from an unwind table or a kernel signal frame
    MEDIUM = "medium"  # a checked frame-pointer chain
    LOW = "low"  # a guess from stack contents

    @staticmethod
    def of(method: Method) -> Trust:
        if method is Method.CONTEXT:
            return Trust.EXACT
        if method is Method.FRAMEPOINTER:
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


@dataclass(slots=True)
class Frame:
    """One frame of a backtrace.

    ``module_offset`` is the pc as a link-time address of its module (pc minus
    load bias): the number ``addr2line -e MODULE`` wants.
    """

    index: int
    pc: int
    sp: int
    method: Method
    cfa: int | None = None
    module: str | None = None
    module_offset: int | None = None
    function: str | None = None
    offset: int | None = None
    #: This frame is the kernel's signal frame (sigreturn trampoline).
    signal_frame: bool = False
    #: ``pc`` is where execution stopped (frame 0, or code interrupted by a
    #: signal), not a return address; lookups use ``pc`` itself, not ``pc - 1``.
    exact_pc: bool = False
    #: Why this frame was found the way it was (sources that failed), for --verbose.
    notes: list[str] = field(default_factory=list)

    @property
    def trust(self) -> Trust:
        return Trust.of(self.method)

    @property
    def lookup_pc(self) -> int:
        """The address that lies inside the frame's function (DESIGN: caller frames use pc - 1)."""
        return self.pc if self.exact_pc else self.pc - 1


@dataclass(slots=True)
class ThreadBacktrace:
    tid: int
    name: str
    frames: list[Frame]
    stop_reason: StopReason
    #: Details of the stop: the pc, module or address concerned.
    stop_detail: str = ""
    state: str = ""
    #: Why each source failed at the last frame, for --verbose.
    stop_notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.stop_reason is StopReason.END_OF_STACK

    @property
    def stop_text(self) -> str:
        text = self.stop_reason.value
        return f"{text}: {self.stop_detail}" if self.stop_detail else text


@dataclass(slots=True)
class CrashInfo:
    """What a core file says about the process and the signal that ended it."""

    executable: str = ""
    arguments: str = ""
    signal: int = 0
    signal_name: str = ""
    #: ``si_code`` and its meaning for this signal (e.g. ``SEGV_MAPERR``).
    code: int = 0
    code_name: str = ""
    fault_address: int | None = None
    #: The thread that received the signal (listed first in the report).
    tid: int | None = None

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


@dataclass(slots=True)
class Backtrace:
    """Every requested thread of one target at one moment."""

    pid: int | None
    threads: list[ThreadBacktrace]
    arch: str
    problems: list[str] = field(default_factory=list)
    #: Seconds spent per phase (``freeze`` = how long the target was stopped).
    timings: dict[str, float] = field(default_factory=dict)
    #: For core files: the crash the core records.
    crash: CrashInfo | None = None

    @property
    def complete(self) -> bool:
        return all(thread.complete for thread in self.threads)
