"""A live process watched over time: one backtrace, or many with warm caches.

Each backtrace stops the process only while its registers, live stacks and
JIT registries are copied (or, without the snapshot, for the whole backtrace);
what liveunwind learned about the process's files is kept for the next one,
its perf map too: read on from where the last backtrace stopped reading.
"""

from __future__ import annotations

from time import perf_counter

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import chosen
from liveunwind.backtrace.phases import Phases
from liveunwind.errors import LiveUnwindError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.cpython.reader import PythonReader
    from liveunwind.formats.unwind.perfmap import PerfMapView
    from liveunwind.frames import Backtrace
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.modules.perfmapfile import PerfMapFile
    from liveunwind.targets.base import AddressSpace
    from liveunwind.targets.live.procfs import TaskStatFiles
    from liveunwind.targets.live.ptrace import PtraceProcess, Tracer, Turn
    from liveunwind.targets.live.snapshot import Snapshot
    from liveunwind.unwinder.cache import UnwindCache
    from liveunwind.unwinder.layouts import Layouts
    from liveunwind.unwinder.remembered import RememberedWalk


#: Bytes of the perf map read before each stop: the first backtrace reads that
#: much of a map that is there already (what used to be read of it whole), the
#: later ones what was appended since.
PERF_MAP_AHEAD = 16 << 20
#: ...and in the stop: what the JIT appended since, normally a line or two.
#: More waits for the next backtrace.
PERF_MAP_IN_STOP = 1 << 20


class Session:
    """Backtraces of one live process; keeps module, rule and symbol caches between them."""

    def __init__(
        self,
        pid: int,
        *,
        threads: Sequence[int] | None = None,
        options: BacktraceOptions | None = None,
        snapshot: bool = True,
        stack_cap: int | None = None,
        total_cap: int | None = None,
        stop_timeout: float | None = None,
        shared: SharedFiles | None = None,
        once: bool = False,
        freeze_turn: Turn | None = None,
        tracer: Tracer | None = None,
        counts_stacks: bool = False,
        **keywords: Any,
    ) -> None:
        """``stack_cap`` bounds the copy of each thread's stack, ``total_cap`` all
        copies together (see Snapshot.capture); ``stop_timeout`` is how long each
        thread is given to stop (seconds) before it is reported as not stopped.
        ``options`` say how to walk and name the stacks; each may also be
        given as a keyword of its own (``Session(pid, python=True)``).  ``shared``:
        what other processes of the run read of the files this one maps
        (``backtrace/shared.py``); each backtrace adds to it what it read.  ``once``: one
        backtrace will be asked for, so its walks are not recorded for a next one.
        ``freeze_turn``: taken by each stop of a snapshot before it seizes the first thread
        and given back as it lets the last go, so that no other process of the run is
        stopped meanwhile (``cli/many.py``'s workers take turns); None: at once.
        ``tracer``: a tracer thread lent by the run, which the session uses until it ends
        (a stop that could not detach every thread ends it) and never ends itself: a
        thread started and ended per process cost 0.07 ms of CPU of its 2.5.
        ``counts_stacks``: the one consumer of the backtraces counts stacks of names
        by their walks (``replayable_walks``, a wall-clock profile), so a thread's walk
        that comes again whole is given without frames once its stack is kept; a
        session whose backtraces are read frame by frame must not set it."""
        self.pid = pid
        self.threads = list(threads) if threads else None
        self.snapshot = snapshot
        self.stack_cap = stack_cap
        self.total_cap = total_cap
        self.stop_timeout = stop_timeout
        self.shared = shared
        self._once = once
        self._freeze_turn = freeze_turn
        self._backtracer = Backtracer(
            chosen(options, keywords), live_pid=pid, shared=shared, once=once
        )
        self._backtracer.cache.stacks_counted = counts_stacks
        self._perf_map: PerfMapFile | None = None
        #: The thread that makes the ptrace calls of every backtrace, made at the first;
        #: a stop that could not detach every thread ends it, and the next makes another.
        self._tracer: Tracer | None = tracer
        self._lent_tracer = tracer
        #: The threads' ``stat`` files, read before every stop.
        self._task_stats: TaskStatFiles | None = None
        #: The last map of the running process found nothing to read before the stop.
        self._plain = False

    def close(self) -> None:
        """Ends the session's tracer thread (idle: between backtraces nothing is traced)
        and closes the threads' ``stat`` files it kept open.

        A session of one backtrace (``once``) closes itself as the backtrace
        ends, in the command's own flow: left to ``__del__``, the closing ran
        wherever the session was freed, and a Ctrl-C landing in it was
        printed as an ignored exception and lost.
        """
        if self._tracer is not None:
            if self._tracer is not self._lent_tracer:
                self._tracer.retire()
            self._tracer = None
        if self._task_stats is not None:
            self._task_stats.close()
            self._task_stats = None

    def __del__(self) -> None:
        self.close()

    @property
    def cache(self) -> UnwindCache:
        """What the session learned per pc; its ``generation`` counts the module map's moves."""
        return self._backtracer.cache

    @property
    def modules(self) -> ModuleMap | None:
        """The module map of the last backtrace (what the session keeps of the process's files)."""
        return self._backtracer.modules

    def replayable_walks(self) -> dict[int, RememberedWalk] | None:
        """tid → the remembered walk the last backtrace gave each thread's walk from, by
        which a consumer counting stacks of names keeps each walk's (RememberedWalk.stack,
        ``Profile.add``); None where the session does not count stacks
        (``counts_stacks``) or a stack holds more than what its walk's facts name
        (Python frames read from the interpreter, source lines)."""
        options = self._backtracer.options
        if not self.cache.stacks_counted or options.python or options.lines or options.verbose:
            return None
        return self.cache.walks_given

    def backtrace(self) -> Backtrace:
        """Stops the process, takes what unwinding needs, lets it go, and unwinds.

        The process is running again (or still stopped, if it was) before
        this returns, whatever happens.
        """
        try:
            return self._backtrace()
        finally:
            if self._once:
                self.close()

    def _backtrace(self) -> Backtrace:
        from liveunwind.targets.live.procfs import TaskStatFiles
        from liveunwind.targets.live.ptrace import DEFAULT_STOP_TIMEOUT, PtraceProcess, Tracer

        stop_timeout = DEFAULT_STOP_TIMEOUT if self.stop_timeout is None else self.stop_timeout
        phases = Phases()
        with phases.timed("prepare"):
            if self._tracer is None or not self._tracer.running:
                self._tracer = Tracer()
            if self._task_stats is None:
                self._task_stats = TaskStatFiles(self.pid)
            process = PtraceProcess(
                self.pid,
                thread_ids=self.threads,
                stop_timeout=stop_timeout,
                tracer=self._tracer,
                task_stats=self._task_stats,
                turn=self._freeze_turn if self.snapshot else None,
            )
            perf_map = self._read_perf_map(PERF_MAP_AHEAD)
            running = None
            if self.snapshot and not self._nothing_ahead(process, perf_map):
                running = self._map_running(process, perf_map)
            jit_possible = running is not None and self._find_registry_roots(running)
            python = self._read_python_ahead(running)
            go = self._find_go(running)
            if running is not None:
                self._plain = not jit_possible and python is None and go is None
                if self._plain:
                    self._found_plain(process)
        attaching = phases.timed("attach")
        if self.snapshot:
            #: When the threads were all stopped, and when the copying ended.
            moments: list[float] = []

            def copy() -> tuple[Snapshot, ModuleMap | None, PerfMapView | str]:
                """Run on the tracer thread while every thread is stopped."""
                moments.append(attaching.stop())
                try:
                    return self._copy(process, phases, perf_map, jit_possible, python, go)
                finally:
                    moments.append(perf_counter())

            snapshot, modules, perf_map = process.hold(copy)
            resumed = process.resumed_at or perf_counter()
            phases.add("detach", resumed - moments[-1])
            phases.add("freeze", resumed - (process.stopped_at or moments[0]))
            backtrace = self._backtracer.backtrace(
                snapshot, phases.seconds, perf_map=perf_map, modules=modules
            )
            if snapshot.problems:  # what the caps cut; a new list: the modules own theirs
                backtrace.problems = [*snapshot.problems, *backtrace.problems]
        else:
            with process:
                stopped = attaching.stop()
                backtrace = self._backtracer.backtrace(
                    process,
                    phases.seconds,
                    should_stop=lambda: process.interrupted,
                    perf_map=perf_map,
                )
                detaching = phases.timed("detach")
            resumed = detaching.stop(at=process.resumed_at)
            phases.add("freeze", resumed - (process.stopped_at or stopped))
        if self.shared is not None:
            self.shared.keep(self._backtracer.modules)
        phases.total()
        return backtrace

    def _copy(
        self,
        process: PtraceProcess,
        phases: Phases,
        perf_map: PerfMapView | str,
        jit_possible: bool,
        python: PythonReader | None,
        go: Module | None,
    ) -> tuple[Snapshot, ModuleMap | None, PerfMapView | str]:
        """While every thread is stopped: the snapshot, and the map and perf map read in it.

        Copies the registers and stacks, and what the walk needs of the JIT
        registry, Python's interpreter and Go's scheduler where found before the stop.
        """
        from liveunwind.targets.live.snapshot import DEFAULT_STACK_CAP, DEFAULT_TOTAL_CAP, Snapshot

        modules = None
        with phases.timed("copy"):
            snapshot = Snapshot.capture(
                process,
                stack_cap=self.stack_cap or DEFAULT_STACK_CAP,
                total_cap=self.total_cap or DEFAULT_TOTAL_CAP,
            )
        if jit_possible:
            with phases.timed("registry"):
                perf_map = self._read_perf_map(PERF_MAP_IN_STOP, settle=False)
                modules = self._copy_registry(snapshot, perf_map)
        if python is not None:
            with phases.timed("python_copy"):
                python.capture(snapshot)
        if go is not None:
            from liveunwind.unwinder import goswitch

            with phases.timed("go_copy"):
                goswitch.capture(snapshot, go)
        return snapshot, modules, perf_map

    def _read_perf_map(self, limit: int, *, settle: bool = True) -> PerfMapView | str:
        """The process's perf map as known now: read on (at most ``limit`` more bytes).

        Entries are only ever appended: what is read before the stop stays
        true in it, and the stop reads only what was appended in between.
        """
        if self._perf_map is None:
            from liveunwind.modules.perfmapfile import PerfMapFile
            from liveunwind.targets.live.procfs import perf_map_path, started_at

            pid = self.pid  # not self: the session is let go (and its tracer ended) unused
            self._perf_map = PerfMapFile(
                f"/proc/{pid}/root", perf_map_path(pid), lambda: started_at(pid)
            )
        return self._perf_map.update(limit, settle=settle)

    def _nothing_ahead(self, process: PtraceProcess, perf_map: PerfMapView | str) -> bool:
        """Whether a map of the running process would find nothing to read before the stop.

        So it is when the last one found nothing (no JIT code, no Python asked
        for, no Go program), there is no perf map, and the process maps what
        it mapped at the last stop: making the map again (0.09 ms a sample of
        a 9-thread C program, 5 % of it) would find the same.  In the one
        backtrace of a many-process run's process, there is no perf map and
        another process of its layout found nothing (``Layouts.known_plain``).
        """
        if len(perf_map):
            return False
        layouts = self._run_layouts()
        if layouts is not None:
            try:
                return layouts.known_plain(process.mappings())
            except (OSError, LiveUnwindError):
                return False  # gone, or not ours to look at: the map's making says which
        last = self._backtracer.modules
        if not self._plain or last is None:
            return False
        try:
            return process.mappings() == last.space.mappings()
        except (OSError, LiveUnwindError):
            return False  # gone, or not ours to look at: the map's making says which

    def _run_layouts(self) -> Layouts | None:
        """The layouts of a many-process run's processes, where this session's one backtrace
        may skip its map of the running process when another process of its layout had
        nothing to read before the stop (not with Python's frames: they are read there)."""
        if not self._once or self.shared is None or self._backtracer.python is not None:
            return None
        return self.shared.facts.layouts

    def _found_plain(self, process: PtraceProcess) -> None:
        """Tells the run's layouts that this process had nothing to read before its stop
        (its mappings are those its running map was made of, kept: read no more)."""
        layouts = self._run_layouts()
        if layouts is not None:
            layouts.found_plain(process.mappings())

    def _map_running(self, process: PtraceProcess, perf_map: PerfMapView | str) -> ModuleMap | None:
        """The module map of the process while it still runs, or None if it cannot be made.

        What is read ahead of the stop (JIT registry roots, Python code) is
        read through it; the stop's map takes its modules over.
        """
        try:
            return self._backtracer.module_map(process, perf_map)
        except (OSError, LiveUnwindError):
            return None  # gone, or not ours to look at: attaching will say which

    def _find_registry_roots(self, running: ModuleMap) -> bool:
        """Whether the process, still running, can have JIT code; if so, finds its registry roots.

        Opening the modules' files and searching their symbols is the slow
        part of reading a JIT registry: done here, before the stop (or kept
        from an earlier backtrace), the stop itself only walks the lists.
        """
        if not running.jit_possible:
            return False
        running.find_registry_roots()
        return True

    def _read_python_ahead(self, running: ModuleMap | None) -> PythonReader | None:
        """With ``python``: finds the running process's interpreter and reads its code ahead.

        Returns the reader if there is an interpreter for the stop to read.
        """
        python = self._backtracer.python
        if python is None or running is None or not python.before_stop(running):
            return None
        return python

    def _find_go(self, running: ModuleMap | None) -> Module | None:
        """The Go program of the running process, its scheduler's layout read; or None.

        A thread stopped on Go's scheduler stack is followed into its
        goroutine from what the stop copies of the Ms and goroutines
        (``unwinder/goswitch.py``); their layout is read here, before it.
        """
        if running is None or not running.modules:
            return None
        program = running.modules[0]  # the executable, mapped below its libraries
        sections = getattr(program.image, "sections", None)
        if not sections or ".gopclntab" not in sections:
            return None  # not Go: nothing of Go's crossings imported (0.3 ms of a cold start)
        from liveunwind.unwinder.goswitch import prepare

        return prepare(program)

    def _copy_registry(self, space: AddressSpace, perf_map: PerfMapView | str) -> ModuleMap:
        """While the process is stopped: reads its JIT registry into the snapshot.

        The map of the stopped process takes over the modules found before
        the stop with their roots; a module that was mapped in the meantime
        is searched now, so no root found before the stop is used for a
        module that moved.  Returns the map, for the backtrace.
        """
        modules = self._backtracer.module_map(space, perf_map)
        registry = modules.registry
        if registry is not None:
            registry.read_all()
        return modules
