"""From an address space to a finished Backtrace: module map, stepper, symbols.

A Walker keeps what it learned about a target — opened files, parsed
tables, decoded rules, symbol tables — for the next address space of the
same target, so the second backtrace of a process costs a fraction of the
first.  Caches keyed by module are dropped when the process's modules change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from liveunwind.formats.rules import UnwindRule
from liveunwind.frames import Backtrace, Method
from liveunwind.stepper import AUTO_UNWINDERS, DEFAULT_MAX_FRAMES, Stepper, unwind_all
from liveunwind.targets.base import AddressSpace

if TYPE_CHECKING:
    from liveunwind.modules.modulemap import ModuleMap


@dataclass(frozen=True)
class WalkOptions:
    """How to walk and name the frames of a target (the options every command shares)."""

    max_frames: int = DEFAULT_MAX_FRAMES
    unwinders: Sequence[str] = AUTO_UNWINDERS
    symbols: bool = True
    verbose: bool = False
    #: Separate debug files are looked for here, then in the default folders.
    debug_dirs: Sequence[str] = ()


class Walker:
    """Unwinds and symbolizes every thread of successive address spaces of one target."""

    def __init__(self, options: WalkOptions) -> None:
        self.options = options
        self._modules: ModuleMap | None = None
        self._rules: dict[tuple[str, int, int], tuple[UnwindRule, Method] | None] = {}

    def module_map(self, space: AddressSpace, perf_map: str = "") -> ModuleMap:
        """The modules of ``space``, taking over those of the previous map that did not move.

        The new map becomes the one the next map (and :meth:`walk`) starts
        from, so a map made of a running process before it is stopped hands
        its opened files and found registry roots on to the walk.
        """
        from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS
        from liveunwind.modules.modulemap import ModuleMap

        modules = ModuleMap(
            space,
            debug_dirs=(*self.options.debug_dirs, *DEFAULT_DEBUG_DIRS),
            perf_map=perf_map,
            previous=self._modules,
        )
        if self._modules is None or modules.unchanged_since != self._modules.unchanged_since:
            self._rules = {}  # rules are keyed by module start: a remapped module voids them
        self._modules = modules
        return modules

    def walk(
        self,
        space: AddressSpace,
        timings: dict[str, float],
        *,
        should_stop: Callable[[], bool] = lambda: False,
        perf_map: str = "",
        modules: ModuleMap | None = None,
    ) -> Backtrace:
        """The backtrace of every thread of ``space``, with ``timings`` filled in.

        ``modules`` is the map of ``space`` if :meth:`module_map` already made it.
        """
        started = time.perf_counter()
        options = self.options
        if modules is None:
            modules = self.module_map(space, perf_map)
        stepper = Stepper(
            space,
            modules,
            unwinders=options.unwinders,
            max_frames=options.max_frames,
            should_stop=should_stop,
            verbose=options.verbose,
            rule_cache=self._rules,
        )
        traces = unwind_all(space, space.threads(), stepper)
        unwound = time.perf_counter()
        timings["unwind"] = unwound - started
        if options.symbols:
            from liveunwind.symbolizer import symbolize

            symbolize(traces, modules)
            timings["symbolize"] = time.perf_counter() - unwound
        return Backtrace(
            pid=space.pid,
            threads=traces,
            arch=space.arch.name,
            problems=modules.problems,
            timings=timings,
        )
