"""Python frames placed in the native stack: each on the eval-loop call that runs it.

CPython runs Python code in ``_PyEval_EvalFrameDefault``; one call of it
runs a *run* of Python frames (a Python function calling another does not
enter C), and a C function called from Python that calls back into Python
(``sorted`` with a key function, ``map``) starts a new call, and so a new
run.  :mod:`liveunwind.modules.python` hands over each thread's runs, each
with an *anchor*: an address inside its eval call's C stack frame (the entry
frame CPython 3.12+ keeps there, or 3.11's ``_PyCFrame``).  The native frame
whose stack range holds the anchor is the one that runs the run — exact,
whatever the eval function's symbol is called or whether it has one (Debian's
3.14 spends most of its time in ``_PyEval_EvalFrameDefault.cold``).

A run without a usable anchor (a corrupt chain, a native walk that ended
early) falls back to the eval frames by name, in order, without ever
placing a run outside the ones around it; what still has no place is kept
as ``unplaced`` and reported, never dropped or guessed.

Threads are matched by the kernel's thread id (``native_thread_id``); for a
live process in a pid namespace (a container) by the id it has there.

:class:`PythonReader` is what a :class:`~liveunwind.backtrace.backtracer.Backtracer`
asked for Python frames keeps between backtraces: the interpreter it found
(with the code objects it has read) until the module holding it moves.  A
live process is read in three steps around its stop (before it, a walk of
the running process that reads code objects ahead and plans the stop's copy;
in it, that copy, one request, and the walk of any thread that moved since;
after it, the walk of the others from the copy, then describe and place),
any other target in one step after the native walk.
"""

from __future__ import annotations

import contextlib

from liveunwind.errors import LiveUnwindError
from liveunwind.modules.python import (
    Memory,
    capture,
    collect,
    describe,
    find_interpreter,
    finish,
    prepare,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.frames import Backtrace, Frame, PythonFrame, ThreadBacktrace
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.modules.python import Captured, Interpreter, PythonThread, Read, ReadMany
    from liveunwind.targets.base import AddressSpace
    from liveunwind.targets.live.snapshot import Snapshot
    from liveunwind.targets.live.syscalls import PlannedRead

#: The eval loop's symbol (its hot/cold split parts share the prefix).
EVAL_FUNCTION = "_PyEval_EvalFrameDefault"


class PlacedPython:
    """One native thread's Python frames, by native frame.

    ``by_frame[i]`` holds the Python frames native frame ``i`` runs,
    innermost first (empty for most frames); ``unplaced`` the frames of runs
    no native frame could be found for, innermost first.
    """

    __slots__ = ("by_frame", "unplaced")

    def __init__(self, by_frame: list[list[PythonFrame]], unplaced: list[PythonFrame]) -> None:
        self.by_frame = by_frame
        self.unplaced = unplaced

    def apply(self, thread: ThreadBacktrace) -> None:
        """Gives each native frame of ``thread`` its Python frames, and the thread the unplaced."""
        for frame, frames in zip(thread.frames, self.by_frame):
            if frames:
                frame.python = tuple(frames)
        thread.python_unplaced = tuple(self.unplaced)

    @property
    def python_frames(self) -> list[PythonFrame]:
        """Every Python frame in native order, the unplaced ones last."""
        return [frame for frames in self.by_frame for frame in frames] + self.unplaced


def place_all(backtrace: Backtrace, threads: list[PythonThread]) -> dict[int, PlacedPython]:
    """Each native thread's placed Python frames, by tid; threads without Python are left out."""
    by_id = {thread.native_id: thread for thread in threads}
    placed = {}
    for native in backtrace.threads:
        python = by_id.get(native.tid)
        if python is not None and python.runs:
            placed[native.tid] = place(native, python)
    return placed


def place(native: ThreadBacktrace, python: PythonThread) -> PlacedPython:
    """Puts each run of ``python`` on the native frame of ``native`` that runs it."""
    frames = native.frames
    by_frame: list[list[PythonFrame]] = [[] for _ in frames]
    unplaced: list[PythonFrame] = []
    # First the runs whose anchor lies in a native frame, kept only while in order.
    spots: list[int | None] = []
    floor = -1
    for run in python.runs:
        index = None if run.anchor is None else _frame_holding(frames, run.anchor, floor + 1)
        spots.append(index)
        if index is not None:
            floor = index
    # Then the others on eval frames by name, between their placed neighbours.
    floor = -1
    for number, run in enumerate(python.runs):
        index = spots[number]
        if index is None:
            ceiling = next((spot for spot in spots[number + 1 :] if spot is not None), len(frames))
            index = _eval_frame_between(frames, floor, ceiling)
        if index is None:
            unplaced.extend(run.frames)
            continue
        by_frame[index].extend(run.frames)
        floor = index
    return PlacedPython(by_frame, unplaced)


def _frame_holding(frames: list[Frame], address: int, first: int) -> int | None:
    """The index (from ``first`` on) of the native frame whose stack range holds ``address``.

    A frame's locals lie from its stack pointer up to its CFA (or, without
    one, up to its caller's stack pointer).
    """
    for index in range(first, len(frames)):
        frame = frames[index]
        if address < frame.sp:
            return None  # frames only grow outwards: the anchor is in none of them
        top = frame.cfa
        if top is None:
            top = frames[index + 1].sp if index + 1 < len(frames) else None
        if top is None or address < top:
            return index if top is not None else None
    return None


def _eval_frame_between(frames: list[Frame], floor: int, ceiling: int) -> int | None:
    """The innermost frame named like the eval loop strictly between ``floor`` and ``ceiling``."""
    for index in range(floor + 1, min(ceiling, len(frames))):
        function = frames[index].function
        if function is not None and function.startswith(EVAL_FUNCTION):
            return index
    return None


# -- reading, kept between backtraces ------------------------------------------------


class PythonReader:
    """The Python side of one target's backtraces: its interpreter, found once and kept.

    The interpreter (and so its code cache) is kept for as long as the
    module that holds it is the same in each new module map; a search that
    found nothing is not repeated until the modules change.
    """

    def __init__(self) -> None:
        self._interpreter: Interpreter | None = None
        #: The module the interpreter was found in, as the module map hands it on.
        self._module: Module | None = None
        #: The modules of the last search that found nothing, and what it said.
        self._searched: frozenset[tuple[object, ...]] | None = None
        self._search_problems: list[str] = []
        #: The pid of a live target (set by its session): its threads may have other
        #: ids inside its pid namespace, the ids the interpreter knows them by.
        self.live_pid: int | None = None
        #: The stop's read of the plan, made ready before it (see :meth:`before_stop`).
        self._planned: PlannedRead | None = None
        #: What a stop read, for the backtrace of that stop.
        self._captured: Captured | None = None

    def interpreter(self, modules: ModuleMap) -> Interpreter | None:
        """The target's CPython runtime: the one found before if its module did not move."""
        if self._module is not None and any(module is self._module for module in modules.modules):
            return self._interpreter
        identities = modules.unchanged_since
        if identities == self._searched:
            return None
        self._interpreter = self._module = None
        problems: list[str] = []
        try:
            interpreter = find_interpreter(modules.space, modules.modules, problems)
        except LiveUnwindError as error:
            problems.append(f"python: {error}")
            interpreter = None
        if interpreter is None:
            self._searched, self._search_problems = identities, problems
            return None
        self._searched, self._search_problems = None, problems
        self._interpreter = interpreter
        self._module = next(
            (module for module in modules.modules if module.path == interpreter.module), None
        )
        return interpreter

    def before_stop(self, modules: ModuleMap, read: Read, read_many: ReadMany) -> bool:
        """Finds the interpreter of a running process and walks it ahead: code objects, plan.

        Returns whether there is one, i.e. whether :meth:`capture` has
        anything to do in the stop.  What goes wrong reading ahead costs
        only speed: the stop reads what was missed.
        """
        self._captured = self._planned = None
        interpreter = self.interpreter(modules)
        if interpreter is None:
            return False
        # The stop reads what this misses; a process that is gone fails its attach.
        with contextlib.suppress(LiveUnwindError, OSError):
            prepare(read, interpreter, read_many)
        from liveunwind.targets.live.syscalls import PlannedRead

        self._planned = PlannedRead(interpreter.plan) if interpreter.plan else None
        return True

    def capture(self, snapshot: Snapshot) -> None:
        """While the process is stopped: copies its Python stacks through the snapshot.

        Only what must be read in the stop is (see :func:`~liveunwind.modules.python.capture`);
        :meth:`add_frames` walks the rest after the process runs again.
        """
        interpreter, planned, self._planned = self._interpreter, self._planned, None
        if interpreter is not None:
            fetched = None if planned is None else (planned.ranges, snapshot.read_planned(planned))
            self._captured = capture(snapshot, interpreter, snapshot.read_frozen_many, fetched)

    def add_frames(self, space: AddressSpace, modules: ModuleMap, backtrace: Backtrace) -> None:
        """Puts each thread's Python frames on the native frames of ``backtrace``.

        What the stop captured, if :meth:`capture` ran (the threads it left
        are walked now, from its copy); otherwise ``space`` is read now (a
        core, a process still stopped).  Problems are added to the backtrace's.
        """
        captured, self._captured = self._captured, None
        collected = None if captured is None else finish(captured, space)
        if collected is None:
            interpreter = self.interpreter(modules)
            if interpreter is not None:
                collected = collect(Memory(space.read_frozen, space.read_frozen_many), interpreter)
        problems = [*self._search_problems, *([] if collected is None else collected.problems)]
        if collected is not None:
            threads = describe(collected)
            if self.live_pid is not None:
                _match_namespaced_ids(self.live_pid, backtrace, threads)
            placed = place_all(backtrace, threads)
            for thread in backtrace.threads:
                found = placed.get(thread.tid)
                if found is not None:
                    found.apply(thread)
        if problems:
            backtrace.problems = [*backtrace.problems, *problems]


def _match_namespaced_ids(pid: int, backtrace: Backtrace, threads: list[PythonThread]) -> None:
    """Gives the Python threads of a process in a pid namespace (a container) their host ids.

    CPython records the id its thread has where it runs; the walk has the
    ids this side sees.  Only when some Python thread's id is not among the
    walked ones are the threads' ``NSpid`` lines read, and an id is changed
    only for a process whose threads have ids of their own.
    """
    from liveunwind.targets.live.procfs import status_field

    walked = {native.tid for native in backtrace.threads}
    if all(thread.native_id in walked for thread in threads):
        return
    inner_to_host: dict[int, int] = {}
    for tid in walked:
        ids = status_field(f"/proc/{pid}/task/{tid}/status", "NSpid").split()
        if len(ids) > 1 and ids[-1].isdigit():
            inner_to_host[int(ids[-1])] = tid
    if inner_to_host:
        for thread in threads:
            thread.native_id = inner_to_host.get(thread.native_id, thread.native_id)
