"""From an address space to a finished Backtrace: module map, stepper, symbols.

A Backtracer keeps what it learned about a target — opened files, parsed
tables and symbol tables (in the modules of its last module map), decoded
rules and per-pc facts (in its UnwindCache) — for the next address space of
the same target, so the second backtrace of a process costs a fraction of the
first.  The cache says what it drops when the process's modules change.
"""

from __future__ import annotations

from liveunwind.backtrace.phases import Phases
from liveunwind.frames import Backtrace
from liveunwind.unwinder.cache import UnwindCache
from liveunwind.unwinder.stepper import Stepper, unwind_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.cpython.reader import PythonReader
    from liveunwind.formats.unwind.perfmap import PerfMapView
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.base import AddressSpace


class Backtracer:
    """Unwinds and symbolizes every thread of successive address spaces of one target."""

    def __init__(
        self,
        options: BacktraceOptions,
        *,
        live_pid: int | None = None,
        shared: SharedFiles | None = None,
        once: bool = False,
    ) -> None:
        """``live_pid`` is the pid of the live process whose address spaces these are
        (a session's), which ``options.python`` needs to match its threads by id;
        ``shared`` holds what other targets of the run read of the files they share;
        ``once``: only one backtrace is asked for (nothing is kept for a next one)."""
        self.options = options
        self.shared = shared
        self._modules: ModuleMap | None = None
        #: Owned here, for as long as this backtracer lives; see UnwindCache for its drops.
        #: Its plans and names by file are the run's, shared with the other targets.
        self.cache = UnwindCache(None if shared is None else shared.facts, once=once)
        #: With ``options.python``: the interpreter found, kept with its code objects.
        self.python: PythonReader | None = None
        if options.python:
            from liveunwind.cpython.reader import PythonReader

            self.python = PythonReader(
                live_pid, with_locals=options.python_locals, with_tasks=options.python_tasks
            )

    @property
    def modules(self) -> ModuleMap | None:
        """The last module map made (by :meth:`module_map` or a backtrace)."""
        return self._modules

    def module_map(self, space: AddressSpace, perf_map: PerfMapView | str = "") -> ModuleMap:
        """The modules of ``space``, taking over those of the previous map that did not move.

        The new map becomes the one the next map (and :meth:`backtrace`) starts
        from, so a map made of a running process before it is stopped hands
        its opened files and found registry roots on to the backtrace.
        """
        from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS
        from liveunwind.modules.modulemap import ModuleMap

        modules = ModuleMap(
            space,
            debug_dirs=(*self.options.debug_dirs, *DEFAULT_DEBUG_DIRS),
            perf_map=perf_map,
            previous=self._modules,
            adopt=None if self.shared is None else self.shared.adopt,
        )
        self._modules = modules
        return modules

    def backtrace(
        self,
        space: AddressSpace,
        timings: dict[str, float],
        *,
        should_stop: Callable[[], bool] = lambda: False,
        perf_map: PerfMapView | str = "",
        modules: ModuleMap | None = None,
    ) -> Backtrace:
        """The backtrace of every thread of ``space``; its phases' seconds are added to ``timings``.

        ``timings`` (a caller's phases so far, or empty) becomes the
        backtrace's; :class:`~liveunwind.backtrace.phases.Phases` says in which order.

        ``modules`` is the map of ``space`` if :meth:`module_map` already made it.
        With ``options.python``, the Python frames a stop captured (see
        :class:`~liveunwind.cpython.reader.PythonReader`) or, without one,
        those read from ``space`` now are put on the frames that run them.
        """
        options = self.options
        phases = Phases(timings)
        with phases.timed("unwind"):
            if modules is None:
                modules = self.module_map(space, perf_map)
            self.cache.begin(modules)
            stepper = Stepper(
                space,
                modules,
                unwinders=options.unwinders,
                max_frames=options.max_frames,
                should_stop=should_stop,
                verbose=options.verbose,
                cache=self.cache,
            )
            threads = space.threads()
        if options.lines:
            # Started before the walk, from each thread's pc, and again after it,
            # from every frame's: compressed DWARF inflates on a thread meanwhile.
            from liveunwind.backtrace.sourcelines import read_ahead, read_ahead_at_pcs, spare_core

            with phases.timed("lines"):
                spare = spare_core()
                read_ahead_at_pcs(threads, modules, space.arch.pc, spare)
        with phases.timed("unwind"):
            traces = unwind_all(space, threads, stepper)
            stepper.close()
        lookup_order = None
        if options.lines:
            with phases.timed("lines"):
                lookup_order = read_ahead(traces, modules, spare)
        if options.symbols:
            from liveunwind.backtrace.symbolizer import symbolize

            with phases.timed("symbolize"):
                symbolize(traces, modules, self.cache)
        if options.lines:
            from liveunwind.backtrace.sourcelines import add_source_lines

            with phases.timed("lines"):
                add_source_lines(traces, modules, lookup_order)
        backtrace = Backtrace(
            pid=space.pid,
            threads=traces,
            arch=space.arch.name,
            problems=modules.problems,
            timings=timings,
        )
        if self.python is not None:
            with phases.timed("python"):
                self.python.add_frames(space, modules, backtrace)
        return backtrace
