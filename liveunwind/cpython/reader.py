"""What a Backtracer asked for Python frames keeps between backtraces, and the order of the reads.

:class:`PythonReader` keeps the interpreter it found (with the code objects
it has read) until the module holding it moves.  A live process is read in
three steps around its stop (:mod:`~liveunwind.cpython.stop`): before it, a
walk of the running process that reads code objects ahead and plans the
stop's copy; in it, that copy, one request, and the walk of any thread that
moved since; after it, the walk of the others from the copy, then describe
and place.  Any other target is read in one step after the native walk.
"""

from __future__ import annotations

import contextlib

from liveunwind.cpython.interpreter import find_interpreter
from liveunwind.cpython.memory import Memory
from liveunwind.cpython.placement import place_all
from liveunwind.cpython.stacks import describe, describe_tasks
from liveunwind.cpython.stop import capture, finish, prepare
from liveunwind.cpython.tasks import find_asyncio
from liveunwind.cpython.walk import collect
from liveunwind.errors import LiveUnwindError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.interpreter import Interpreter
    from liveunwind.cpython.stacks import PythonThread
    from liveunwind.cpython.stop import Captured
    from liveunwind.frames import Backtrace
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.base import AddressSpace
    from liveunwind.targets.live.snapshot import Snapshot
    from liveunwind.targets.live.syscalls import PlannedRead


class PythonReader:
    """The Python side of one target's backtraces: its interpreter, found once and kept.

    The interpreter (and so its code cache) is kept for as long as the
    module that holds it is the same in each new module map; a search that
    found nothing is not repeated until the modules change.

    A live process's backtrace calls, in this order: :meth:`before_stop`
    with the map of the running process, :meth:`capture` in the stop, and
    :meth:`add_frames` with the backtrace made after it.  Any other
    target's calls :meth:`add_frames` alone.
    """

    def __init__(
        self, live_pid: int | None = None, *, with_locals: bool = False, with_tasks: bool = False
    ) -> None:
        """``live_pid`` is the pid of the live process whose backtraces these are (a
        session's): its threads may have other ids inside its pid namespace, the ids
        the interpreter knows them by (see :func:`_match_namespaced_ids`).
        ``with_locals``: each Python frame gets its variables (``--locals``);
        ``with_tasks``: the backtrace gets the asyncio tasks (``--tasks``)."""
        self._with_locals = with_locals
        self._with_tasks = with_tasks
        #: Why ``--tasks`` found no tasks to read, for the backtrace's problems.
        self._task_problems: list[str] = []
        self._interpreter: Interpreter | None = None
        #: The module the interpreter was found in, as the module map hands it on.
        self._module: Module | None = None
        #: The modules of the last search that found nothing, and what it said.
        self._searched: frozenset[tuple[object, ...]] | None = None
        self._search_problems: list[str] = []
        self._live_pid = live_pid
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

    def before_stop(self, running: ModuleMap) -> bool:
        """Finds the interpreter of a running process and walks it ahead: code objects, plan.

        ``running`` is the module map of the process as it runs, made just
        before the stop; the walk reads the process through its space.
        Returns whether there is an interpreter, i.e. whether :meth:`capture`
        has anything to do in the stop.  What goes wrong reading ahead costs
        only speed: the stop reads what was missed.
        """
        self._captured = self._planned = None
        interpreter = self.interpreter(running)
        if interpreter is None:
            return False
        self._find_asyncio(interpreter, running)
        process = running.space
        # The stop reads what this misses; a process that is gone fails its attach.
        with contextlib.suppress(LiveUnwindError, OSError):
            prepare(
                process.read,
                interpreter,
                process.read_frozen_many,
                with_locals=self._with_locals,
            )
        from liveunwind.targets.live.syscalls import PlannedRead

        self._planned = PlannedRead(interpreter.plan) if interpreter.plan else None
        return True

    def _find_asyncio(self, interpreter: Interpreter, modules: ModuleMap) -> None:
        """With ``--tasks``: where asyncio keeps its tasks, looked for until found.

        asyncio may be imported at any time, so a search that found nothing
        is made again in the next backtrace.
        """
        self._task_problems = []
        if self._with_tasks and interpreter.asyncio is None:
            interpreter.asyncio = find_asyncio(modules.space, modules.modules, self._task_problems)

    def capture(self, snapshot: Snapshot) -> None:
        """While the process is stopped: copies its Python stacks through the snapshot.

        Only what must be read in the stop is (see :func:`~liveunwind.cpython.stop.capture`);
        :meth:`add_frames` walks the rest after the process runs again.
        """
        interpreter, planned, self._planned = self._interpreter, self._planned, None
        if interpreter is not None:
            fetched = None if planned is None else (planned.ranges, snapshot.read_planned(planned))
            self._captured = capture(
                snapshot,
                interpreter,
                snapshot.read_frozen_many,
                fetched,
                with_locals=self._with_locals,
                with_tasks=self._with_tasks,
            )

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
                self._find_asyncio(interpreter, modules)
                collected = collect(
                    Memory(space.read_frozen, space.read_frozen_many),
                    interpreter,
                    with_locals=self._with_locals,
                    with_tasks=self._with_tasks,
                )
        problems = [
            *self._search_problems,
            *self._task_problems,
            *([] if collected is None else collected.problems),
        ]
        if collected is not None:
            threads = describe(collected)
            if self._live_pid is not None:
                _match_namespaced_ids(self._live_pid, backtrace, threads)
            if self._with_tasks:
                backtrace.tasks = describe_tasks(collected)
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
