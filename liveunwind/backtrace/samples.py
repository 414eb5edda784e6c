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
not hold ends the walk saying so.  A :class:`SampleReplay` takes perf
records in time order (a perf.data file's, a ring buffer's), keeps the
processes they describe, and unwinds each sample.
"""

from __future__ import annotations

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.phases import Phases
from liveunwind.backtrace.profile import stack_of
from liveunwind.backtrace.symbolizer import symbolize
from liveunwind.errors import UsageError
from liveunwind.formats import perfevents
from liveunwind.frames import Backtrace
from liveunwind.targets.sample.process import SampledProcess
from liveunwind.targets.sample.space import SampleSpace
from liveunwind.unwinder.stepper import Stepper, add_remembered_frames, unwind_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.arch import Arch
    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.formats.perfevents import EventAttr, Record, Sample
    from liveunwind.formats.unwind.perfmap import PerfMapView
    from liveunwind.frames import ThreadBacktrace
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.modules.perfmapfile import PerfMapFile
    from liveunwind.targets.base import Mapping
    from liveunwind.targets.sample.process import FileSource
    from liveunwind.unwinder.remembered import FrameFacts

    #: A walk the stepper left without its frames, the facts they are made of, the first.
    Remembered = tuple[ThreadBacktrace, tuple[FrameFacts, ...], int]

#: Processes kept warm at once; the one sampled longest ago goes first.
MAX_PROCESSES = 256
#: Walks whose stacks of names are kept (``SampleUnwinder.stacks_only``), per module map;
#: then they are forgotten and kept anew (each ~0.6 KB: its pcs and its names' tuple).
MAX_KNOWN_STACKS = 10_000
#: Frames of the remembered suffixes whose walks' stacks are kept (``_known_walks``): each
#: entry holds its suffix's facts (about 0.1 KB a frame) after the cache has let it go.
MAX_KNOWN_WALK_FRAMES = 32_768


class _Warm:
    """What is kept of one process: its backtracer; for its current mappings, the module map,
    and the sample space and stepper over it that each of its samples is loaded into."""

    __slots__ = ("backtracer", "generation", "modules", "perf_map_entries", "space", "stepper")

    def __init__(self, backtracer: Backtracer) -> None:
        self.backtracer = backtracer
        self.modules: ModuleMap | None = None
        self.generation = -1
        self.space: SampleSpace | None = None
        self.stepper: Stepper | None = None
        #: Entries of the perf map the module map was made with.
        self.perf_map_entries = 0


class SampleUnwinder:
    """Unwinds samples of any number of processes, each process's caches kept warm."""

    def __init__(self, options: BacktraceOptions) -> None:
        # A sample has no interpreter memory to read Python frames from.
        self.options = options.replace(python=False, python_locals=False, python_tasks=False)
        self._warm: dict[SampledProcess, _Warm] = {}
        #: Set by a caller that wants each walk's stacks of names (perf's workers): they
        #: come with every backtrace, and a walk whose frames are at the pcs of one walked
        #: before over the same module map takes its stacks without its frames being named
        #: (naming them and making the names were a quarter of a warm sample's time); a
        #: walk the stepper takes whole from a remembered one (Stepper.frameless) does not
        #: even get its frames when its stack is known by that walk.
        self.stacks_only = False
        self._known_stacks: dict[tuple[int, ...], tuple[str, ...]] = {}
        #: The same stacks by the remembered suffix a frameless walk was taken from (the
        #: id of its facts, which the entry holds, and its first index): found without
        #: making its frames or its pcs; and the frames of the facts held.
        self._known_walks: dict[tuple[int, int], tuple[tuple[FrameFacts, ...], tuple[str, ...]]]
        self._known_walks = {}
        self._known_walk_frames = 0
        self._known_over: ModuleMap | None = None

    def modules(self, process: SampledProcess, perf_map: PerfMapView | str = "") -> ModuleMap:
        """The module map of ``process``'s current mappings (made when they changed).

        ``perf_map``: the process's perf map as known now, taken when the map is made;
        a map made with fewer of its entries than it now has is made anew (a live
        process's JIT, CPython's ``-X perf``, adds code without mapping memory).
        """
        warm = self._warm.pop(process, None)
        if warm is None:
            if len(self._warm) >= MAX_PROCESSES:
                del self._warm[next(iter(self._warm))]
            warm = _Warm(Backtracer(self.options))
        self._warm[process] = warm  # the most recently used last
        grown = not isinstance(perf_map, str) and len(perf_map) != warm.perf_map_entries
        if warm.modules is None or warm.generation != process.generation or grown:
            warm.modules = warm.backtracer.module_map(process, perf_map)
            warm.generation = process.generation
            warm.perf_map_entries = len(perf_map)
            warm.space = warm.stepper = None
        return warm.modules

    def stale(self, process: SampledProcess) -> bool:
        """Whether the next sample of ``process`` makes its module map anew."""
        warm = self._warm.get(process)
        return warm is None or warm.modules is None or warm.generation != process.generation

    def unwind(
        self,
        process: SampledProcess,
        tid: int,
        name: str,
        registers: dict[int, int],
        stack: bytes | memoryview,
        perf_map: PerfMapView | str = "",
    ) -> tuple[Backtrace, ModuleMap, list[tuple[str, ...]] | None]:
        """The backtrace of one sample (registers by DWARF number, the stack copy from sp).

        ``perf_map`` names JIT code when the process's module map is made anew.

        Returns it with the module map it was named from (which the
        profile's writers describe modules with) and, with
        :attr:`stacks_only`, each thread's stack of names
        (:func:`~liveunwind.backtrace.profile.stack_of`; the frames are then
        named only if no walk before had their pcs).  ``perf_map`` (a live
        process's, as read so far) names code no file does.
        """
        modules = self.modules(process, perf_map)
        warm = self._warm[process]
        if self.options.lines:  # source lines read ahead on a thread: the backtracer's way
            space = SampleSpace(process, tid, name, registers, stack)
            backtrace = warm.backtracer.backtrace(space, {}, modules=modules)
            stacks = [stack_of(each) for each in backtrace.threads] if self.stacks_only else None
            return backtrace, modules, stacks
        return self._walk(warm, process, modules, tid, name, registers, stack)

    def _walk(
        self,
        warm: _Warm,
        process: SampledProcess,
        modules: ModuleMap,
        tid: int,
        name: str,
        registers: dict[int, int],
        stack: bytes | memoryview,
    ) -> tuple[Backtrace, ModuleMap, list[tuple[str, ...]] | None]:
        """What ``Backtracer.backtrace`` does for one thread, the stepper kept across samples.

        Made anew for every sample, the stepper and the backtrace around it
        were a fifth of the walk's time (8,730 samples of a 30-frame stack:
        0.91 s of CPU against 0.72 kept; the whole ``liveunwind perf`` of
        10,683 samples, 2.01 s against 1.88).  With ``--lines`` the
        backtracer's own path is taken (it reads source lines ahead).
        """
        options, cache = self.options, warm.backtracer.cache
        phases = Phases()
        with phases.timed("unwind"):
            space = warm.space
            if space is None:
                space = warm.space = SampleSpace(process, tid, name, registers, stack)
            else:
                space.load(tid, name, registers, stack)
            cache.begin(modules)
            stepper = warm.stepper
            if stepper is None:
                stepper = warm.stepper = Stepper(
                    space,
                    modules,
                    unwinders=options.unwinders,
                    max_frames=options.max_frames,
                    verbose=options.verbose,
                    cache=cache,
                )
                stepper.frameless = self.stacks_only
            traces = unwind_all(space, space.threads(), stepper)
        stacks = remembered = None
        if self.stacks_only:
            remembered, stepper.remembered = stepper.remembered, None
            stacks = self._stacks_known(traces, modules, remembered)
        if stacks is None:
            if options.symbols:
                with phases.timed("symbolize"):
                    symbolize(traces, modules, cache)
            if self.stacks_only:
                stacks = self._stacks_made(traces, remembered)
        backtrace = Backtrace(
            pid=process.pid,
            threads=traces,
            arch=process.arch.name,
            problems=modules.problems,
            timings=phases.seconds,
        )
        return backtrace, modules, stacks

    def _stacks_known(
        self, traces: list[ThreadBacktrace], modules: ModuleMap, remembered: Remembered | None
    ) -> list[tuple[str, ...]] | None:
        """The stacks of walks at these pcs over ``modules`` made before, else None.

        A frame's name is its pc's in the module map (looked up at pc - 1 for a
        return address: an exact pc is kept as its complement), so the same
        pcs over the same map give the same names, and so does the same
        remembered walk (its facts hold the pcs).  A walk the stepper left
        without its frames (``remembered``) gets them unless its stack is known
        by that walk.
        """
        if remembered is not None:
            walked, facts, start = remembered
            if modules is self._known_over and len(traces) == 1 and traces[0] is walked:
                kept = self._known_walks.get((id(facts), start))
                if kept is not None and kept[0] is facts:
                    return [kept[1]]
            add_remembered_frames(walked, facts, start)
        if modules is not self._known_over:
            self._known_stacks.clear()
            self._known_walks.clear()
            self._known_walk_frames = 0
            self._known_over = modules
            return None
        known = self._known_stacks
        stacks = []
        for trace in traces:
            found = known.get(_pcs(trace))
            if found is None:
                return None
            stacks.append(found)
        self._keep_walk(stacks, remembered)
        return stacks

    def _stacks_made(
        self, traces: list[ThreadBacktrace], remembered: Remembered | None
    ) -> list[tuple[str, ...]]:
        """The stacks of named walks, kept by their pcs for :meth:`_stacks_known`."""
        known = self._known_stacks
        if len(known) + len(traces) > MAX_KNOWN_STACKS:
            known.clear()
        stacks = []
        for trace in traces:
            stack = known[_pcs(trace)] = stack_of(trace)
            stacks.append(stack)
        self._keep_walk(stacks, remembered)
        return stacks

    def _keep_walk(self, stacks: list[tuple[str, ...]], remembered: Remembered | None) -> None:
        """Keeps the stack of a sample's one thread by the remembered walk it was taken from."""
        if remembered is None or len(stacks) != 1:
            return
        _walked, facts, start = remembered
        walks = self._known_walks
        key = (id(facts), start)
        if key not in walks:
            if self._known_walk_frames + len(facts) > MAX_KNOWN_WALK_FRAMES:
                walks.clear()
                self._known_walk_frames = 0
            self._known_walk_frames += len(facts)
        walks[key] = (facts, stacks[0])


def _pcs(trace: ThreadBacktrace) -> tuple[int, ...]:
    """What a walk's names depend on over one module map: each frame's pc, an exact one
    (looked up at itself, not at pc - 1) as its complement."""
    return tuple([~frame.pc if frame.exact_pc else frame.pc for frame in trace.frames])


#: Bytes of a perf map read on each time a process's module map is made anew.
PERF_MAP_READ = 64 << 20


def _maybe_jit(mapping: Mapping) -> bool:
    """Executable memory no file describes: where a JIT compiler's code (and a perf map) is."""
    return mapping.executable and not mapping.is_file and not mapping.path.startswith("[v")


#: PERF_SAMPLE_REGS_ABI_64: the only user register set walked (a 32-bit process is not).
ABI_64 = 2


class Unwound:
    """One sample and its walk: what :meth:`SampleReplay.feed` gives for a sample record."""

    __slots__ = ("backtrace", "modules", "name", "sample", "stacks")

    def __init__(
        self,
        sample: Sample,
        name: str,
        backtrace: Backtrace,
        modules: ModuleMap,
        stacks: list[tuple[str, ...]] | None = None,
    ) -> None:
        self.sample = sample
        #: The thread's name as the COMM records left it ("" if none was seen).
        self.name = name
        self.backtrace = backtrace
        self.modules = modules
        #: With ``SampleUnwinder.stacks_only``, each thread's stack of names (its frames
        #: are then not named if a walk before had their pcs, and left out if it was
        #: taken whole from a remembered walk whose stack is known).
        self.stacks = stacks


class SampleReplay:
    """Perf records in time order → the processes they describe → each sample unwound.

    MMAP/MMAP2 records place files in their process (``SampledProcess.map``),
    COMM names threads (and, for an exec, empties the process's mappings:
    the new program's follow), FORK of a new process copies its parent's
    mappings and a new thread takes its parent's name, LOST is counted.  The
    same for a perf.data file and a live ring buffer.
    """

    def __init__(
        self,
        arch: Arch,
        attr: EventAttr,
        files: FileSource,
        options: BacktraceOptions,
        *,
        build_ids: dict[str, bytes] | None = None,
        vdso: bytes | None = None,
        perf_maps: str | None = None,
    ) -> None:
        """``build_ids``: path → build-id the recording names; ``vdso``: this machine's
        vDSO when it is the recording's; ``perf_maps``: the root under which each
        process's ``/tmp/perf-PID.map`` is read (JIT code's names), None for none."""
        perf = arch.perf_registers
        if perf is None:
            raise UsageError(f"liveunwind reads no perf registers of {arch.name}")
        self.arch = arch
        self.attr = attr
        self._perf = perf
        self.files = files
        self.build_ids = build_ids or {}
        self.vdso = vdso
        self.unwinder = SampleUnwinder(options)
        self.perf_maps = perf_maps
        self._perf_map_files: dict[SampledProcess, PerfMapFile] = {}
        self.processes: dict[int, SampledProcess] = {}
        self.names: dict[int, str] = {}
        #: Samples the kernel dropped (LOST records), and samples without 64-bit user registers.
        self.lost = 0
        self.without_registers = 0
        #: A live process's perf map as read so far (``profile --on-cpu`` sets it): JIT code.
        self.perf_map: PerfMapView | str = ""

    def process(self, pid: int) -> SampledProcess:
        """The process ``pid`` as the records so far describe it."""
        found = self.processes.get(pid)
        if found is None:
            found = self.processes[pid] = SampledProcess(self.arch, pid, self.files)
            found.build_ids.update(self.build_ids)
            found.vdso = self.vdso
        return found

    def feed(self, record: Record) -> Unwound | None:
        """Takes one record in; a sample comes back unwound (else None)."""
        if isinstance(record, perfevents.Sample):
            return self.unwind(record)
        if isinstance(record, perfevents.Mmap):
            prot = record.prot if record.prot is not None else (5 if record.executable else 3)
            self.process(record.pid).map(
                record.start,
                record.end,
                record.pgoff,
                record.path,
                prot=prot,
                inode=record.inode,
                build_id=record.build_id,
            )
        elif isinstance(record, perfevents.Comm):
            self.names[record.tid] = record.name
            if record.exec and record.pid in self.processes:
                self.processes[record.pid].forget_mappings()
        elif isinstance(record, perfevents.Task):
            if not record.exit:
                self.names.setdefault(record.tid, self.names.get(record.ptid, ""))
                parent = self.processes.get(record.ppid)
                if record.pid != record.ppid and parent is not None:
                    self.processes[record.pid] = parent.copy(record.pid)
        elif isinstance(record, perfevents.Lost):
            self.lost += record.lost
        return None

    def unwind(self, sample: Sample) -> Unwound | None:
        """The walk of one sample; None (counted) when it holds no 64-bit user registers."""
        if sample.abi != ABI_64 or not sample.registers:
            self.without_registers += 1
            return None
        registers = self._perf.registers(self.attr.sample_regs_user, sample.registers)
        name = self.names.get(sample.tid, "")
        process = self.process(sample.pid)
        backtrace, modules, stacks = self.unwinder.unwind(
            process,
            sample.tid,
            name,
            registers,
            sample.stack,
            self.perf_map or self._perf_map(process),
        )
        return Unwound(sample, name, backtrace, modules, stacks)

    def _perf_map(self, process: SampledProcess) -> PerfMapView | str:
        """The process's perf map read on, when its module map is to be made anew; else ""."""
        if self.perf_maps is None or not self.unwinder.stale(process):
            return ""
        found = self._perf_map_files.get(process)
        if found is None:
            if not any(_maybe_jit(mapping) for mapping in process.mappings()):
                return ""
            from liveunwind.modules.perfmapfile import PerfMapFile

            found = PerfMapFile(self.perf_maps, f"/tmp/perf-{process.pid}.map")
            self._perf_map_files[process] = found
        return found.update(PERF_MAP_READ)

    @property
    def problems(self) -> list[str]:
        """What the processes' mappings and files said (each once)."""
        found: dict[str, None] = {}
        for process in self.processes.values():
            found.update(dict.fromkeys(process.problems))
        return list(found)
