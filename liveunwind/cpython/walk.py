"""The walk: from ``_PyRuntime`` through interpreters and thread states to each frame chain.

:func:`collect` follows the interpreter's pointers level by level through a
:class:`~liveunwind.cpython.memory.Memory`, which fetches each level in one
batch where the target can: the thread states (a linked list, one by one),
the used part of every thread's frame stack chunk, the frames (mostly inside
those chunks), then the code objects they run
(:mod:`~liveunwind.cpython.codereader`).  Each thread's frames are split
into *runs*, one per call of the eval loop, each with the address that
places it in the native stack (its *anchor*).  A live process's stop uses
the pieces (:func:`read_threads`, :func:`walk_thread`, :func:`conclude`)
apart: see :mod:`~liveunwind.cpython.stop`.

Every structure read is checked before it is believed: a thread state must
point back at its interpreter; every list and chain is bounded and cycles
are cut.  What fails is noted in the problems, never shown wrong.
"""

from __future__ import annotations

from liveunwind.cpython import objects
from liveunwind.cpython.codereader import read_codes
from liveunwind.cpython.collected import Collected, RawThread
from liveunwind.cpython.localvars import read_locals
from liveunwind.cpython.plan import leave_plan
from liveunwind.cpython.tasks import read_tasks
from liveunwind.errors import FormatError, MemoryReadError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.collected import RawFrame
    from liveunwind.cpython.interpreter import Interpreter
    from liveunwind.cpython.layouts import Layout
    from liveunwind.cpython.memory import Data, Fetched, Memory

#: Interpreters followed from ``_PyRuntime`` (subinterpreters are rare; a loop is cut sooner).
MAX_INTERPRETERS = 256
#: Thread states followed per interpreter.
MAX_THREADS = 16384
#: Python frames followed per thread (the default recursion limit is 1000).
MAX_FRAMES = 50000
#: Eval calls (``_PyCFrame`` records, 3.11) followed per thread.
MAX_EVAL_CALLS = MAX_FRAMES
#: Frames outside a thread's frame stack (generators', older chunks') kept in the plan.
MAX_PLANNED_OUTSIDE = 1024


def collect(
    memory: Memory,
    interpreter: Interpreter,
    *,
    with_locals: bool = False,
    with_tasks: bool = False,
) -> Collected:
    """Follows the interpreter's pointers: thread states, frame chains, code objects.

    Level by level, so that each level can be fetched in one batch: the
    thread states (a linked list, one by one), every thread's frame stack
    chunk, the frames (mostly inside those chunks), the code objects they
    run, then the names and line tables of code objects not seen before —
    and, ``with_locals``, each frame's variables
    (:mod:`~liveunwind.cpython.localvars`), ``with_tasks``, the asyncio tasks
    (:mod:`~liveunwind.cpython.tasks`).
    """
    collected = read_threads(memory, interpreter)
    codes: dict[int, None] = {}  # ordered set: each code object once
    record = interpreter.frame_record
    for thread in collected.threads:
        walk_thread(memory, collected, thread, record, codes)
    read_codes(memory, collected, list(codes))
    if with_locals:
        read_locals(memory, collected)
    if with_tasks:
        collect_tasks(memory, collected)
    return conclude(collected, list(codes))


def collect_tasks(memory: Memory, collected: Collected) -> None:
    """The asyncio tasks, and the code objects their coroutines run (see :mod:`tasks`)."""
    asyncio = collected.interpreter.asyncio
    if asyncio is None:
        collected.tasks = []
        return
    read_tasks(memory, collected, asyncio)
    codes = {code: None for task in collected.tasks or () for code, _ in task.chain}
    read_codes(memory, collected, [code for code in codes if code not in collected.codes])


def read_threads(
    memory: Memory, interpreter: Interpreter, planned: Fetched | None = None
) -> Collected:
    """The interpreters, their thread states and the used parts of their frame stacks.

    Starts by fetching the last walk's plan in one request (or taking it as
    ``planned`` already read it): in a process that moved on little (the
    walk before the stop was a moment ago) that is everything.
    """
    collected = Collected(interpreter)
    layout = interpreter.layout
    if planned is None:
        memory.fetch(interpreter.plan)
    else:
        memory.take(*planned)
    try:
        head = objects.word(
            memory.read(interpreter.runtime + layout.runtime_interpreters_head, 8), 0
        )
    except MemoryReadError as error:
        collected.problems.append(f"python: cannot read _PyRuntime: {error}")
        return collected
    seen_interpreters: dict[int, None] = {}
    interp = head
    while interp and interp not in seen_interpreters:
        if len(seen_interpreters) >= MAX_INTERPRETERS:
            collected.problems.append(f"python: more than {MAX_INTERPRETERS} interpreters")
            break
        seen_interpreters[interp] = None
        try:
            _collect_thread_states(memory, collected, interp)
            interp = objects.word(memory.read(interp + layout.interp_next, 8), 0)
        except (MemoryReadError, FormatError) as error:
            collected.problems.append(f"python: interpreter at {interp:#x}: {error}")
            break
    collected.interpreters = list(seen_interpreters)
    wanted = [thread for thread in collected.threads if thread.fetchable]
    # What grew past the plan or is new (nothing, mostly).
    memory.prefetch(
        [(start, end - start) for start, end in (thread.datastack for thread in wanted)]
    )
    for thread in wanted:
        start, end = thread.datastack
        try:
            thread.stack = memory.locate_kept(start, end - start)
        except MemoryReadError:
            continue  # its frames are read one by one, where the walk needs them
    return collected


def conclude(collected: Collected, codes: list[int]) -> Collected:
    """Leaves the next walk its plan, and notes a layout that cannot be right.

    ``codes`` are the code objects the threads' frames run.
    """
    if collected.interpreters is None:
        return collected
    leave_plan(collected, codes)
    interpreter = collected.interpreter
    mismatch = f"python: the CPython {interpreter.version_text} layout does not match this binary"
    if not collected.threads:  # a running interpreter has at least its main thread's
        collected.problems.append(
            f"{mismatch}, or it is not running (yet or any more): no thread state found"
        )
    elif codes and not any(collected.codes.values()):
        collected.problems.append(
            f"{mismatch}: none of the {len(codes)} objects its frames point at is a code object"
        )
    return collected


def walk_thread(
    memory: Memory,
    collected: Collected,
    thread: RawThread,
    record: objects.Record,
    codes: dict[int, None],
) -> None:
    """:func:`_collect_frames`, with what goes wrong noted instead of raised."""
    try:
        _collect_frames(memory, collected, thread, record, codes)
    except (MemoryReadError, FormatError) as error:
        collected.problems.append(f"python: thread {thread.native_id}: cut short: {error}")


def _collect_thread_states(memory: Memory, collected: Collected, interp: int) -> None:
    layout = collected.interpreter.layout
    identity = objects.word(memory.read(interp + layout.interp_id, 8), 0)
    tstate = objects.word(memory.read(interp + layout.interp_threads_head, 8), 0)
    size, unpack = layout.tstate_read_size, collected.interpreter.tstate_record.unpack
    seen: set[int] = set()
    while tstate and tstate not in seen:
        if len(seen) >= MAX_THREADS:
            collected.problems.append(f"python: more than {MAX_THREADS} thread states")
            return
        seen.add(tstate)
        data, at = memory.locate(tstate, size)
        following, owner, native_id, frame, start, end = unpack(data, at)
        if owner != interp:
            raise FormatError(
                f"thread state {tstate:#x} does not point back at its interpreter: "
                f"the {collected.interpreter.version_text} layout does not match this binary"
            )
        collected.threads.append(RawThread(tstate, native_id, frame, (start, end), identity))
        tstate = following


def _collect_frames(
    memory: Memory,
    collected: Collected,
    thread: RawThread,
    record: objects.Record,
    codes: dict[int, None],
) -> None:
    """Reads the thread's frame chain, split into the runs of each eval call."""
    layout = collected.interpreter.layout
    pointer = thread.frame
    cframes: list[tuple[int, int]] = []
    if layout.frame_is_entry is not None:
        cframes = _cframe_chain(memory, layout, pointer, thread.outside)
        pointer = cframes[0][1] if cframes else 0
    elif layout.cframe_current is not None:
        thread.outside.append((pointer + layout.cframe_current, 8))  # on the C stack, mostly
        pointer = objects.word(memory.read(pointer + layout.cframe_current, 8), 0)
    size = layout.frame_read_size
    # The loop runs for every frame while the process is stopped: its lookups are hoisted.
    locate, unpack = memory.locate, record.unpack
    untag = ~layout.executable_tag_bits
    #: 3.12+: frames owned by this value or more are eval calls' entry frames, not code.
    entry_owner = layout.entry_owner if layout.entry_owner is not None else 256
    #: 3.11: the flag that marks an eval call's first frame.
    is_entry = layout.frame_is_entry
    seen: set[int] = set()
    frames: list[RawFrame] = []
    #: Address of each run's innermost frame (3.11 matches them to _PyCFrames).
    firsts: list[int] = []
    block: Data = b""  # where the last frame was: the next one mostly is too
    block_start = 0
    #: Frames outside the used part of the frame stack go to the next walk's plan (the
    #: eval calls' records on the C stack too: read from the plan, the stop need not
    #: look in the stack copies).
    low, high = thread.datastack
    outside = thread.outside
    address = pointer
    while address and address not in seen:
        if len(seen) >= MAX_FRAMES:
            collected.problems.append(f"python: thread {thread.native_id}: {MAX_FRAMES}+ frames")
            break
        seen.add(address)
        at = address - block_start
        if at < 0 or at + size > len(block):
            block, at = locate(address, size)
            block_start = address - at
            if not low <= address < high and len(outside) < MAX_PLANNED_OUTSIDE:
                outside.append((address, size))
        code, previous, instr, owner = unpack(block, at)
        if owner >= entry_owner:
            # 3.12+: the entry frame of an eval call, a local of that C call.
            thread.runs.append((address, frames))
            frames = []
        else:
            if not frames:
                firsts.append(address)
            code &= untag
            codes[code] = None
            frames.append((code, instr, owner == _GENERATOR, address))
            if is_entry is not None and block[at + is_entry]:  # 3.11: an eval call's first frame
                thread.runs.append((None, frames))
                frames = []
        address = previous
    if address and address in seen:
        collected.problems.append(f"python: thread {thread.native_id}: frame chain loops")
    if frames:
        thread.runs.append((None, frames))
    if cframes:
        _anchor_runs(thread, firsts, cframes)


#: FRAME_OWNED_BY_GENERATOR, the same in every version.
_GENERATOR = 1


def _cframe_chain(
    memory: Memory, layout: Layout, cframe: int, read: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """(address, current frame) of each ``_PyCFrame`` from the innermost eval call outwards.

    What it read is added to ``read`` (up to :data:`MAX_PLANNED_OUTSIDE` ranges).
    """
    assert layout.cframe_current is not None and layout.cframe_previous is not None
    size = max(layout.cframe_current, layout.cframe_previous) + 8
    chain: list[tuple[int, int]] = []
    seen: set[int] = set()
    while cframe and cframe not in seen and len(chain) < MAX_EVAL_CALLS:
        seen.add(cframe)
        data = memory.read(cframe, size)
        if len(read) < MAX_PLANNED_OUTSIDE:
            read.append((cframe, size))
        chain.append((cframe, objects.word(data, layout.cframe_current)))
        cframe = objects.word(data, layout.cframe_previous)
    return chain


def _anchor_runs(thread: RawThread, firsts: list[int], cframes: list[tuple[int, int]]) -> None:
    """3.11: each run's anchor is the ``_PyCFrame`` of the eval call running it.

    Each eval call has one ``_PyCFrame`` on its C stack whose current frame
    is the innermost frame of its run; the thread state's own root
    ``_PyCFrame`` runs nothing (current frame NULL).  Runs and cframes are
    paired in order for as long as that holds; a run left without its
    cframe keeps no anchor.
    """
    calls = [(address, current) for address, current in cframes if current]
    for index, (call, first) in enumerate(zip(calls, firsts)):
        if call[1] != first:
            return
        thread.runs[index] = (call[0], thread.runs[index][1])
