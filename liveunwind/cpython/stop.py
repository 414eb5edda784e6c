"""A live process's walk, split around its stop so that the stop holds the least of it.

Before the stop, :func:`prepare` walks the running process: it reads the
code objects' names and line tables ahead and leaves the plan
(:mod:`~liveunwind.cpython.plan`).  In the stop, :func:`capture` fetches the
plan (one request), reads the thread states from it, and walks only the
threads whose frame stack is not byte for byte what ``prepare`` saw.  After
the process runs again, :func:`finish` walks the others from the stop's
copy — their frames are where ``prepare`` found them, inside the plan — and
says so of anything it had to read from the running process instead.
"""

from __future__ import annotations

from liveunwind.cpython.codereader import read_codes
from liveunwind.cpython.localvars import read_local_names, read_locals
from liveunwind.cpython.memory import Memory
from liveunwind.cpython.walk import collect, collect_tasks, conclude, read_threads, walk_thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.collected import Collected, RawThread
    from liveunwind.cpython.interpreter import Interpreter
    from liveunwind.cpython.memory import Fetched, Read, ReadMany
    from liveunwind.targets.base import AddressSpace


def prepare(
    read: Read,
    interpreter: Interpreter,
    read_many: ReadMany | None = None,
    *,
    with_locals: bool = False,
) -> None:
    """Before the stop: walks the still running process, for its code objects and the plan.

    The names and line tables of code objects never change, so reading
    them ahead leaves the stop only the frames and the code objects'
    headers to read — the cache recognises each code object by those (see
    :class:`~liveunwind.cpython.codecache.CodeCache`) — and the walk leaves
    the plan of what the stop copies.  What the running process changes under this read costs
    nothing: an object that is not what it should be is not kept, and a
    thread that moved is walked in the stop.  ``with_locals``, the names of
    the code objects' variables are read ahead too, their values only in the stop.
    """
    memory = Memory(read, read_many)
    collected = collect(memory, interpreter)
    if with_locals:
        read_local_names(memory, collected)


class Captured:
    """What a stop read: its memory, the thread states, and the threads left for after it.

    ``deferred`` are the threads whose frame stack was, in the stop, byte for
    byte what the walk before it followed: their frames are where that walk
    found them, inside the plan the stop copied, so they are followed after
    the process runs again (:func:`finish`), from the copy.
    """

    __slots__ = ("codes", "collected", "deferred", "memory")

    def __init__(
        self, memory: Memory, collected: Collected, deferred: list[RawThread], codes: list[int]
    ) -> None:
        self.memory = memory
        self.collected = collected
        self.deferred = deferred
        #: Code objects the threads walked in the stop run (read there unless copied).
        self.codes = codes


def capture(
    space: AddressSpace,
    interpreter: Interpreter,
    read_many: ReadMany | None = None,
    planned: Fetched | None = None,
    *,
    with_locals: bool = False,
    with_tasks: bool = False,
) -> Captured:
    """While a live target is stopped: the part of the walk that must happen in the stop.

    One request fetches the plan the last walk made (:attr:`.Interpreter.plan`)
    — a second only for a frame stack that grew past it or a thread that is
    new — and the thread states are read from it.  A thread whose frame
    stack (and frame pointer) is byte for byte what the last walk saw is
    left for :func:`finish`: every frame it will follow is in what the stop
    copied.  The others (a thread that ran since) are walked here, with the
    code objects they run, as before.  Reads go through ``space.read_frozen``,
    so the snapshot keeps every byte; ``read_many`` batches a level (see
    :class:`Memory`) and must read the same frozen memory.  ``planned`` is
    the plan as the caller already read it in the stop (ranges, results),
    with a system call it made ready before the stop.  ``with_locals``, every
    thread is walked in the stop and its frames' variables read there, so
    that each value is of the stop's instant; ``with_tasks``, the asyncio
    tasks and their await chains are read there too.
    """
    memory = Memory(space.read_frozen, read_many)
    collected = read_threads(memory, interpreter, planned)
    deferred: list[RawThread] = []
    codes: dict[int, None] = {}
    known = interpreter.stacks
    record = interpreter.frame_record
    for thread in collected.threads:
        if not with_locals and thread.unchanged(known.get(thread.thread_state)):
            deferred.append(thread)
        else:
            walk_thread(memory, collected, thread, record, codes)
    if with_tasks:
        collect_tasks(memory, collected)
    if with_locals:
        read_codes(memory, collected, list(codes))
        read_locals(memory, collected)
        return Captured(memory, collected, deferred, list(codes))
    # Code objects whose header the stop copied are checked after it; the others,
    # with their names and line tables, now (a thread that moved to new code).
    size = interpreter.layout.code_read_size
    read_codes(memory, collected, [code for code in codes if not memory.holds(code, size)])
    return Captured(memory, collected, deferred, list(codes))


def finish(captured: Captured, space: AddressSpace) -> Collected:
    """After the process runs again: walks the threads :func:`capture` left, from its copy.

    What the copy lacks (a frame or code object the walk before the stop
    did not see, so it was not planned) is read from the running process,
    and said in the problems, per thread for frames: such frames may be of
    a later instant than the native stack.
    """
    memory, collected = captured.memory, captured.collected
    memory.after_stop(space.read_frozen, space.read, space.read_frozen_many)
    codes: dict[int, None] = dict.fromkeys(captured.codes)
    record = collected.interpreter.frame_record
    for thread in captured.deferred:
        late = memory.late
        walk_thread(memory, collected, thread, record, codes)
        if memory.late > late:
            collected.problems.append(
                f"python: thread {thread.native_id}: {memory.late - late} reads of its frames "
                "were not in the stop's copy and came from the process after it ran again"
            )
    late = memory.late
    read_codes(memory, collected, [code for code in codes if code not in collected.codes])
    if memory.late > late:
        collected.problems.append(
            f"python: {memory.late - late} reads of code objects were not in the stop's copy "
            "and came from the process after it ran again"
        )
    return conclude(collected, list(codes))
