"""Each thread's Python stack as a user reads it: runs of frames with function, file and line.

:func:`describe` turns what a walk collected into
:class:`~liveunwind.frames.PythonFrame` records without reading anything,
so a live process runs again meanwhile: decoding line tables is the
CPU-bound part of ``--python``.
"""

from __future__ import annotations

from liveunwind.frames import PythonFrame, PythonTask

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.collected import Collected


class PythonRun:
    """The Python frames one call of the eval loop runs, innermost first.

    ``anchor`` is an address inside that C call's stack frame, which places
    the run in the native stack: the entry frame the eval call keeps on its
    C stack (3.12+), or its ``_PyCFrame`` (3.11).  None when it is not known.
    """

    __slots__ = ("anchor", "frames")

    def __init__(self, anchor: int | None, frames: list[PythonFrame]) -> None:
        self.anchor = anchor
        self.frames = frames


class PythonThread:
    """One thread's Python stack: its runs of frames, innermost run first."""

    __slots__ = ("native_id", "runs", "thread_state")

    def __init__(self, native_id: int, thread_state: int, runs: list[PythonRun]) -> None:
        #: The kernel's id of the thread (``PyThreadState.native_thread_id``).
        self.native_id = native_id
        self.thread_state = thread_state
        self.runs = runs

    def join(self, runs: list[PythonRun]) -> None:
        """Adds the runs of the thread's state in another interpreter.

        A thread that entered a subinterpreter (``Interpreter.exec``) has a
        thread state in each: its runs are put in native order by their
        anchors where every run has one, else after the ones already here
        (the interpreters are walked newest first, and the newest one entered
        is the innermost).
        """
        joined = [*self.runs, *runs]
        if all(run.anchor is not None for run in joined):
            joined.sort(key=lambda run: run.anchor or 0)
        self.runs = joined

    @property
    def frames(self) -> list[PythonFrame]:
        """Every Python frame of the thread, innermost first."""
        return [frame for run in self.runs for frame in run.frames]

    def __repr__(self) -> str:
        return f"<PythonThread {self.native_id} {len(self.frames)} frames>"


def describe(collected: Collected) -> list[PythonThread]:
    """The collected stacks as Python frames; reads nothing, so the target may run meanwhile.

    A thread with a thread state in several interpreters (one that entered a
    subinterpreter) is one thread, its runs in native order (see
    :meth:`PythonThread.join`), each frame saying which interpreter runs it.
    Frames CPython itself does not show are left out as it leaves them out:
    a frame not yet started (before its first traceable instruction; 3.11
    and 3.12 only, the versions whose layout says where that is) and one
    whose code object could not be read.
    """
    threads: dict[int, PythonThread] = {}
    local_values = collected.locals
    for raw in collected.threads:
        runs = []
        for anchor, frames in raw.runs:
            described = []
            for address, instr, generator, frame in frames:
                code = collected.codes.get(address)
                if code is None or not (generator or code.started(instr)):
                    continue
                shown = None if local_values is None else local_values.get(frame)
                described.append(
                    PythonFrame(
                        code.function, code.filename, code.line_at(instr), shown, raw.interpreter
                    )
                )
            runs.append(PythonRun(anchor, described))
        thread = threads.get(raw.native_id)
        if thread is None:
            threads[raw.native_id] = PythonThread(raw.native_id, raw.thread_state, runs)
        else:
            thread.join(runs)
    return list(threads.values())


def describe_tasks(collected: Collected) -> list[PythonTask]:
    """The asyncio tasks read, each with its coroutines' frames innermost first."""
    tasks = []
    for raw in collected.tasks or ():
        frames = []
        for address, instr in reversed(raw.chain):
            code = collected.codes.get(address)
            if code is not None:
                frames.append(PythonFrame(code.function, code.filename, code.line_at(instr)))
        tasks.append(PythonTask(raw.name, raw.thread, frames, raw.address))
    return tasks
