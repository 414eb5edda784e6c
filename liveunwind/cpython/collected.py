"""What one walk read: each thread state with its frames in runs, and the code objects they run.

Raw, as read in the stop: a frame is three numbers, a code object the
fields and bytes read of it.  :mod:`~liveunwind.cpython.stacks` turns them
into Python frames after the process runs again.
"""

from __future__ import annotations

from liveunwind.cpython.memory import MAX_CHUNK_PREFETCH

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.codecache import RawCode
    from liveunwind.cpython.interpreter import Interpreter
    from liveunwind.cpython.memory import Data
    from liveunwind.frames import PythonValue

    #: One frame as read in the stop: its code object's address, where it is in the
    #: code, whether a generator owns it, and its own address.  A tuple: the stop makes
    #: one per frame.
    RawFrame = tuple[int, int, bool, int]


class RawThread:
    """One thread state as read: its native id and its frames in runs (anchor, frames)."""

    __slots__ = (
        "datastack",
        "frame",
        "interpreter",
        "native_id",
        "outside",
        "runs",
        "stack",
        "thread_state",
    )

    def __init__(
        self,
        thread_state: int,
        native_id: int,
        frame: int,
        datastack: tuple[int, int],
        interpreter: int = 0,
    ) -> None:
        self.thread_state = thread_state
        #: The id of the interpreter the thread state belongs to (0: the main one).
        self.interpreter = interpreter
        #: The kernel's id of the thread (``native_thread_id``).
        self.native_id = native_id
        #: ``cframe`` (3.11, 3.12) or ``current_frame`` (3.13+).
        self.frame = frame
        #: The used part of the frame stack chunk: (start, end).
        self.datastack = datastack
        #: Where the bytes of that used part are, if fetched whole: a block and the offset
        #: in it (not copied out: in the stop they are only compared).
        self.stack: tuple[Data, int] | None = None
        #: Frames the walk found outside it (generators', older chunks'): the next plan's.
        self.outside: list[tuple[int, int]] = []
        self.runs: list[tuple[int | None, list[RawFrame]]] = []

    @property
    def stack_bytes(self) -> bytes:
        """The used part of the frame stack (``stack`` must be known)."""
        assert self.stack is not None
        data, offset = self.stack
        start, end = self.datastack
        return bytes(memoryview(data)[offset : offset + end - start])

    def unchanged(self, seen: tuple[int, bytes] | None) -> bool:
        """Whether frame pointer and frame stack are what an earlier walk ``seen``.

        Compared where the bytes lie, without copying them out.
        """
        if seen is None or self.stack is None or seen[0] != self.frame:
            return False
        data, offset = self.stack
        start, end = self.datastack
        return len(seen[1]) == end - start and data.startswith(seen[1], offset)

    @property
    def fetchable(self) -> bool:
        """Whether the used part of the frame stack is fetched whole (not absurdly large)."""
        start, end = self.datastack
        return bool(start) and 0 < end - start <= MAX_CHUNK_PREFETCH


class RawTask:
    """One task as read: where it is, its name, the thread running it, its coroutines' frames.

    ``chain`` holds (code object, instruction pointer) per coroutine, outermost first.
    """

    __slots__ = ("address", "chain", "name", "thread")

    def __init__(self, address: int, name: str, thread: int | None) -> None:
        self.address = address
        self.name = name
        self.thread = thread
        self.chain: list[tuple[int, int]] = []


class Collected:
    """Everything a walk read: threads, the code objects they run, and what went wrong."""

    __slots__ = ("codes", "interpreter", "interpreters", "locals", "problems", "tasks", "threads")

    def __init__(self, interpreter: Interpreter) -> None:
        self.interpreter = interpreter
        #: The interpreters found; None when ``_PyRuntime`` itself could not be read.
        self.interpreters: list[int] | None = None
        self.threads: list[RawThread] = []
        #: Code object address → what was read of it (None: unreadable or not a code object).
        self.codes: dict[int, RawCode | None] = {}
        self.problems: list[str] = []
        #: With ``--locals``: each frame's variables, by the frame's address.
        self.locals: dict[int, dict[str, PythonValue]] | None = None
        #: With ``--tasks``: the asyncio tasks found, as read.
        self.tasks: list[RawTask] | None = None
