"""Python frames placed in the native stack: each run on the eval-loop call that runs it.

CPython runs Python code in ``_PyEval_EvalFrameDefault``; one call of it
runs a *run* of Python frames (a Python function calling another does not
enter C), and a C function called from Python that calls back into Python
(``sorted`` with a key function, ``map``) starts a new call, and so a new
run.  The walk (:mod:`liveunwind.cpython.walk`) hands over each thread's runs, each
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
live process in a pid namespace (a container) the reader first gives them
the ids they have on this side (:mod:`liveunwind.cpython.reader`).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.stacks import PythonThread
    from liveunwind.frames import Backtrace, Frame, PythonFrame, ThreadBacktrace

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
