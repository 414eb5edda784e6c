"""Backtraces of perf samples: each sample's stack copy walked by the one stepper.

A :class:`SampleUnwinder` keeps, per sampled process, a
:class:`~liveunwind.backtrace.backtracer.Backtracer` (its rules and names)
and the module map of the process's current mappings: a map is made again
only when the process's mappings change (its ``generation``) or its perf
map (JIT code, CPython's ``-X perf``) has grown, so a module
opens its file and reads its tables once for all the samples that land
in it.  Each sample becomes a one-thread
:class:`~liveunwind.frames.Backtrace` over a
:class:`~liveunwind.targets.sample.space.SampleSpace`; every unwind source
and fallback works on it, and a frame that needed memory the sample does
not hold ends the walk saying so.
"""

from __future__ import annotations

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.targets.sample.space import SampleSpace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.formats.unwind.perfmap import PerfMapView
    from liveunwind.frames import Backtrace
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.sample.process import SampledProcess

#: Processes kept warm at once; the one sampled longest ago goes first.
MAX_PROCESSES = 256


class _Warm:
    __slots__ = ("backtracer", "generation", "modules", "perf_map_entries")

    def __init__(self, backtracer: Backtracer) -> None:
        self.backtracer = backtracer
        self.modules: ModuleMap | None = None
        self.generation = -1
        self.perf_map_entries = 0


class SampleUnwinder:
    """Unwinds samples of any number of processes, each process's caches kept warm."""

    def __init__(self, options: BacktraceOptions) -> None:
        # A sample has no interpreter memory to read Python frames from.
        self.options = options.replace(python=False, python_locals=False, python_tasks=False)
        self._warm: dict[SampledProcess, _Warm] = {}

    def modules(self, process: SampledProcess, perf_map: PerfMapView | str = "") -> ModuleMap:
        """The module map of ``process``'s mappings (remade when they or the perf map changed)."""
        warm = self._warm.pop(process, None)
        if warm is None:
            if len(self._warm) >= MAX_PROCESSES:
                del self._warm[next(iter(self._warm))]
            warm = _Warm(Backtracer(self.options))
        self._warm[process] = warm  # the most recently used last
        entries = len(perf_map)
        if (
            warm.modules is None
            or warm.generation != process.generation
            or warm.perf_map_entries != entries
        ):
            warm.modules = warm.backtracer.module_map(process, perf_map)
            warm.generation = process.generation
            warm.perf_map_entries = entries
        return warm.modules

    def unwind(
        self,
        process: SampledProcess,
        tid: int,
        name: str,
        registers: dict[int, int],
        stack: bytes | memoryview,
        *,
        perf_map: PerfMapView | str = "",
    ) -> tuple[Backtrace, ModuleMap]:
        """The backtrace of one sample (registers by DWARF number, the stack copy from sp).

        Returns it with the module map it was named from (which the
        profile's writers describe modules with).  ``perf_map`` (a live
        process's, as read so far) names code no file does.
        """
        modules = self.modules(process, perf_map)
        space = SampleSpace(process, tid, name, registers, stack)
        backtracer = self._warm[process].backtracer
        return backtracer.backtrace(space, {}, modules=modules), modules
