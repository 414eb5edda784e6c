"""A sampling profile of a live process: where each thread spends its time.

Each sample is one backtrace of a warm :class:`Session` — the process is
stopped only while its registers and live stacks are copied (about a
millisecond), and the walk runs on the copy.  Samples are taken on a fixed
schedule (the n-th is due at ``start + n / rate``), so a late sample does
not push every later one back (see :func:`_next_slot` for how far behind
sampling catches up).  Every sample's stacks are counted as they arrive,
per thread *name* by default: a thread-per-request server starts a new
thread (a new tid) for every request, and an hour of it kept apart by tid
would grow without end.  Asked to keep threads apart (``per_thread``), at
most MAX_THREADS are, the rest counted under their name.  Memory is bounded
by MAX_STACKS distinct stacks, MAX_FRAMES frames in them and MAX_NAMES
names (what goes beyond is counted under one OVERFLOW stack per thread
and said), not by the duration.

CPU time comes from the kernel (psutil, at the start and at the end), not
from the samples: a sample says where a thread was, the kernel how much it
ran.

Each name is kept with where it was first seen (:class:`FrameSite`: its pc,
function, file and line, and the module it is in with its build-id), which
the pprof and speedscope writers need beyond the name; those are bounded
with the names.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from functools import partial

from liveunwind.errors import LiveUnwindError
from liveunwind.targets.live.procfs import state_word

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from liveunwind.backtrace.session import Session
    from liveunwind.frames import Backtrace, Frame, ThreadBacktrace
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.unwinder.remembered import RememberedWalk

    #: One thread of a sample walked and named elsewhere (:meth:`Profile.add_counted`): its
    #: tid, name, state, why its walk ended early (None: it did not), its stack as
    #: :func:`stack_of` names it, and the sites of its frames (:func:`frame_sites`).
    CountedThread = tuple[int, str, str, str | None, tuple[str, ...], list["FrameSite"]]

#: Samples per second above this are refused: one sample of even a small
#: process takes a few milliseconds, so the schedule could not be kept.
MAX_RATE = 1000.0
#: How far behind its schedule sampling may fall and still catch up (seconds).
CATCH_UP = 0.1
#: What the profile keeps, over all threads: every sample of a hostile or
#: chaotic target could be a new stack of new names, for as long as the
#: profile runs.  A stack beyond any of the three is counted under OVERFLOW
#: instead.  Stacks share their names' strings.  Measured with tracemalloc:
#: 49,000 stacks of 20 frames, each with 2 names of its own and counted
#: running too (all three bounds reached), hold 27 MB; every frame a new
#: name (3,333 stacks of 30), 14 MB; 33,333 stacks of 30 frames drawn from
#: 2,000 names, 10 MB.
MAX_STACKS = 50_000
MAX_FRAMES = 1_000_000
MAX_NAMES = 100_000
#: Modules described for the frames' sites (pprof's mappings): a process that
#: loads and unloads libraries for as long as it runs shows new ones all along.
#: A frame in a module beyond them is kept without its module.
MAX_MODULES = 10_000
#: Threads kept apart by tid when asked (``per_thread``); later ones are
#: counted under their name.
MAX_THREADS = 10_000
#: The stack samples are counted under once the bounds are reached.
OVERFLOW = ("[stacks beyond those kept]",)
#: The state /proc gives a thread that is on a CPU or waiting for one.
RUNNING = state_word("R")

#: Why sampling ended.
END_DURATION = "duration"
END_INTERRUPTED = "interrupted"
END_TARGET_LOST = "target lost"


def frame_name(frame: Frame) -> str:
    """A frame's name in folded stacks: its function, else ``module+offset``, else its pc.

    ``;`` separates frames, so it may not appear in a name; spaces (C++
    names have them) become ``_``, which tools that split a line at every
    space need.  Readers of the format take the count after the last space,
    so the ``(file:line)`` of :func:`stack_of` keeps its space, as py-spy
    writes it.
    """
    if frame.function:
        name = frame.function
    elif frame.module and frame.module_offset is not None:
        name = f"{os.path.basename(frame.module)}+{frame.module_offset:#x}"
    else:
        name = f"{frame.pc:#x}"
    return _clean(name)


def add_timings(totals: dict[str, list[float]], timings: Iterable[tuple[str, float]]) -> None:
    """Adds one sample's seconds of each phase to ``totals``: [total, longest] by phase
    (:attr:`Profile.timings`; ``liveunwind perf``'s workers sum their samples' alike)."""
    for phase, seconds in timings:
        kept = totals.get(phase)
        if kept is None:
            totals[phase] = [seconds, seconds]
        else:
            kept[0] += seconds
            if seconds > kept[1]:
                kept[1] = seconds


def stack_of(thread: ThreadBacktrace) -> tuple[str, ...]:
    """The thread's frames as names, outermost first.

    With ``--python``, the Python frames an eval-loop frame runs follow it,
    outermost first, each ``function (file.py:line)`` as py-spy names them,
    and before the frames the Python code called.  With source lines
    (``--lines``) every call inlined into a frame is a level of its own,
    under the function it was inlined into, and each name carries its line:
    ``function (file.c:42)``.  Python frames no native frame could be found
    to run are left out: where they belong is unknown.
    """
    names = []
    for frame in reversed(thread.frames):
        function = frame.function
        if function and frame.file is None:
            # frame_name and _located inlined for the common frame (a profile names
            # every frame of every sample): 0.43 → 0.18 µs a frame.
            names.append(function.replace(";", ":").replace(" ", "_"))
        else:
            names.append(_located(frame_name(frame), frame.file, frame.line))
        if not (frame.python or frame.inlined):
            continue
        for python in reversed(frame.python):
            names.append(_located(_clean(python.function), python.file, python.line))
        for place in reversed(frame.inlined):
            names.append(_located(_clean(place.function or "??"), place.file, place.line))
    return tuple(names)


def _stack_by_walk(
    walked: ThreadBacktrace, walks: dict[int, RememberedWalk]
) -> tuple[tuple[str, ...], RememberedWalk | None]:
    """The thread's stack, and the remembered walk it was counted by when its frames were
    not made (their sites are then made of the walk's facts, :func:`_sites_of_facts`).

    The stepper gave ``walked`` from its remembered walk (replayed, taken from a suffix, or
    walked and recorded): the stack of names kept with that walk (or its suffix) counts
    again, for the same frame facts in the same generation of the module map, which the
    walk does not outlast, name the same; else the frames are named and the stack kept
    (tests/system/test_profile.py compares every output with walks named anew).
    """
    walk = walks.get(walked.tid)
    if walk is None or walk.given is not walked:
        return stack_of(walked), None
    if walk.stack is None:
        stack = stack_of(walked)
        walk.keep_stack(stack)
        return stack, None
    return walk.stack, walk if not walked.frames else None


def _sites_of_facts(
    walk: RememberedWalk, modules: ModuleMap | None, sites_of: Callable[..., list[FrameSite]]
) -> list[FrameSite]:
    """The sites of a walk counted without its frames: the frames made of its facts and
    named as the backtrace names them (asked only of a stack new to the profile: counted
    first by another profile of the same session)."""
    from liveunwind.backtrace.symbolizer import symbolize
    from liveunwind.frames import ThreadBacktrace
    from liveunwind.unwinder.cache import UnwindCache
    from liveunwind.unwinder.stepper import add_remembered_frames

    thread = ThreadBacktrace(0, "", [], walk.reason)
    add_remembered_frames(thread, walk.frames, 0)
    if modules is not None:
        symbolize([thread], modules, UnwindCache())
    return sites_of(thread, modules)


class ModuleSite:
    """A module kept frames are in, as pprof's mapping describes it."""

    __slots__ = ("build_id", "end", "file_offset", "path", "start")

    def __init__(self, path: str, start: int, end: int, file_offset: int, build_id: str) -> None:
        self.path = path
        #: Where it is mapped (its lowest and highest address), and the file
        #: offset its lowest mapping starts at.
        self.start = start
        self.end = end
        self.file_offset = file_offset
        #: The GNU build-id (or Mach-O UUID) in hex; "" when the file has none.
        self.build_id = build_id


class FrameSite:
    """What is known of a frame name beyond the name, from where it was first seen.

    The profile counts by name, so a function sampled at several pcs is
    one name, kept with the first pc it was seen at; with ``--lines`` each
    line is a name of its own.  Python frames and inlined calls have the pc
    (and module) of the native frame that runs them.  One is kept per name,
    up to MAX_NAMES, about 100 bytes each.  Measured with tracemalloc at the
    name bound: 49,000 stacks of 20 frames, 2 names of their own each and
    counted running, 25.1 MiB without sites and 34.8 MiB with them; 5,000
    stacks of 20 new names with lines, 13.2 and 26.1 MiB.
    """

    __slots__ = ("file", "line", "module", "name", "pc", "python")

    def __init__(
        self,
        name: str,
        file: str | None,
        line: int | None,
        pc: int,
        module: ModuleSite | None,
        *,
        python: bool = False,
    ) -> None:
        self.name = name
        #: A Python function's frame (it has no symbol of its own).
        self.python = python
        self.file = file
        self.line = line
        self.pc = pc
        self.module = module

    @property
    def function(self) -> str:
        """The name without its ``(file:line)`` (derived, not kept: a string per name less).

        Names have no spaces but the one before the place (:func:`_clean`).
        """
        return self.name.rpartition(" (")[0] if self.file is not None else self.name


def _clean(name: str) -> str:
    return name.replace(";", ":").replace(" ", "_")


def _located(name: str, file: str | None, line: int | None) -> str:
    if file is None:
        return name
    place = os.path.basename(file).replace(";", ":")
    return f"{name} ({place}:{line})" if line else f"{name} ({place})"


def frame_sites(
    thread: ThreadBacktrace, module_of: Callable[[int], ModuleSite | None]
) -> list[FrameSite]:
    """The sites of the thread's frames, in the order of :func:`stack_of`'s names.

    ``module_of(pc)``: the module a frame's pc is in, asked once per frame.
    """
    sites = []
    for frame in reversed(thread.frames):
        module = module_of(frame.pc)
        function = frame_name(frame)
        name = _located(function, frame.file, frame.line)
        sites.append(FrameSite(name, frame.file, frame.line, frame.pc, module))
        # As stack_of names them: Python frames, then inlined calls.
        for python in reversed(frame.python):
            name = _located(_clean(python.function), python.file, python.line)
            site = FrameSite(name, python.file, python.line, frame.pc, module, python=True)
            sites.append(site)
        for place in reversed(frame.inlined):
            name = _located(_clean(place.function or "??"), place.file, place.line)
            sites.append(FrameSite(name, place.file, place.line, frame.pc, module))
    return sites


def describe(module: Module) -> ModuleSite:
    """A module as pprof's mapping describes it: where, its lowest file offset, its build-id."""
    lowest = min(module.mappings, key=lambda mapping: mapping.start, default=None)
    build_id = module.build_id
    return ModuleSite(
        module.path,
        module.start,
        module.end,
        lowest.offset if lowest is not None else 0,
        build_id.hex() if build_id else "",
    )


class ThreadProfile:
    """The samples of one thread, or of every thread of one name.

    How many, where, and how much CPU the kernel says they used.
    """

    __slots__ = (
        "by_name",
        "cpu_percent",
        "incomplete",
        "name",
        "running",
        "running_stacks",
        "samples",
        "stacks",
        "thread_count",
        "tid",
    )

    def __init__(self, tid: int, name: str, *, by_name: bool = False) -> None:
        #: The thread, or the last one of the name that was sampled.
        self.tid = tid
        #: The thread's name when it was last sampled (the name, ``by_name``).
        self.name = name
        #: Whether this counts every thread of the name, and how many threads it counted.
        self.by_name = by_name
        self.thread_count = 0
        #: Samples that held this thread, and those in which it was running (by
        #: name: each thread of the name in each sample counts once).
        self.samples = 0
        self.running = 0
        #: Samples whose walk of this thread ended before the end of its stack.
        self.incomplete = 0
        #: Stack (outermost first) → samples; the second only of samples it was running in.
        self.stacks: Counter[tuple[str, ...]] = Counter()
        self.running_stacks: Counter[tuple[str, ...]] = Counter()
        #: CPU time over the profile's wall time, from the kernel; None if the
        #: thread ended before the profile did (its last CPU time is lost with it).
        self.cpu_percent: float | None = None

    @property
    def label(self) -> str:
        """The root frame in folded stacks: the name, or ``name-tid`` for a thread kept apart."""
        name = _clean(self.name or "?")
        return name if self.by_name else f"{name}-{self.tid}"

    def top_function(self) -> tuple[str, int] | None:
        """The function most often innermost in this thread's samples, and how often."""
        innermost: Counter[str] = Counter()
        for stack, count in self.stacks.items():
            if stack:
                innermost[stack[-1]] += count
        return innermost.most_common(1)[0] if innermost else None


class Profile:
    """What sampling found: per-thread stacks and CPU, how many samples, at what rate."""

    def __init__(self, pid: int, rate_asked: float, *, per_thread: bool = False) -> None:
        self.pid = pid
        self.rate_asked = rate_asked
        #: Where the samples came from: "ptrace" (every thread, stopped), "perf_event"
        #: (the kernel's samples of a live process), "perf.data" (a perf record file).
        self.source = "ptrace"
        #: Whether threads are kept apart by tid (at most MAX_THREADS) or counted by name.
        self.per_thread = per_thread
        #: Samples taken, and schedule slots given up because a sample ran late.
        self.samples = 0
        self.missed = 0
        #: Seconds on the clock: from the end of the (cold) first sample to the end of sampling.
        self.duration = 0.0
        #: Why sampling ended (END_*), and the error that ended it, if one did.
        self.end = END_DURATION
        self.end_detail = ""
        #: By tid (``per_thread``) or by name; a name's threads beyond MAX_THREADS by name.
        self.threads: dict[int | str, ThreadProfile] = {}
        #: Threads seen (a tid not in the sample before is a new thread), and how many of
        #: them were counted under their name although ``per_thread`` asked otherwise.
        self.threads_seen = 0
        self.threads_by_name = 0
        #: tid → its entry, for the threads of the last sample: new threads are
        #: told from it, and CPU times are summed through it at the end.
        self._last: dict[int, ThreadProfile] = {}
        #: Each frame name once, with where it was first seen: stacks share
        #: their names' strings.
        self.sites: dict[str, FrameSite] = {}
        #: (path, start) → the module's description, at most MAX_MODULES.
        self._modules: dict[tuple[str, int], ModuleSite] = {}
        #: Wall-clock time (seconds since the epoch) the profile's clock started at.
        self.started_at = 0.0
        #: The main thread's name, for titles.
        self.main_name = ""
        #: Problems the backtraces reported (missing files, …), each once, in order.
        self._problems: dict[str, None] = {}
        #: The whole process's CPU time over the wall time; None if it ended first.
        self.cpu_percent: float | None = None
        #: Per phase of a sample (attach, copy, freeze, unwind, …): total seconds and the longest.
        self.timings: dict[str, list[float]] = {}
        #: Distinct stacks kept so far (at most MAX_STACKS; each thread's OVERFLOW
        #: not counted) and their frames (at most MAX_FRAMES), and the samples
        #: counted under OVERFLOW instead of their own stack.
        self.distinct = 0
        self.frames_kept = 0
        self.overflowed = 0
        #: Walks that ended before the end of their stack, by why (StopReason's words).
        self.incomplete_reasons: Counter[str] = Counter()

    @property
    def rate(self) -> float:
        """Samples per second achieved."""
        return self.samples / self.duration if self.duration > 0 else 0.0

    @property
    def problems(self) -> list[str]:
        """Problems the backtraces reported (unreadable files, …), each once."""
        return list(self._problems)

    def note(self, problems: list[str]) -> None:
        """Adds problems found outside the backtraces (of the recording they came from)."""
        self._problems.update(dict.fromkeys(problems))

    @property
    def incomplete(self) -> int:
        """Thread walks, over every sample, that ended before the end of the stack."""
        return sum(thread.incomplete for thread in self.threads.values())

    def add(
        self,
        backtrace: Backtrace,
        modules: ModuleMap | None = None,
        *,
        some_threads: bool = False,
        stacks: list[tuple[str, ...]] | None = None,
        walks: dict[int, RememberedWalk] | None = None,
    ) -> None:
        """Counts one sample's stacks; ``modules`` (its module map) describes new names' modules.

        ``some_threads``: the sample holds only some threads of the process (a
        perf sample holds the one on the CPU), so a thread is new the first
        time it is seen at all, not when the sample before did not hold it.
        ``stacks``: each thread's :func:`stack_of`, made already (perf samples:
        a thread whose frames were not named then has a stack counted before).
        ``walks``: tid → the remembered walk each thread's walk was given from
        (``Session.replayable_walks``): a walk's stack is named once and kept with
        it (and its suffix), and later walks given from it without frames count it.
        """
        last = self._begin(some_threads)
        for index, walked in enumerate(backtrace.threads):
            frameless = None
            if stacks is not None:
                stack = stacks[index]
            elif walks is None:
                stack = stack_of(walked)
            else:
                stack, frameless = _stack_by_walk(walked, walks)
            self._count(
                last,
                walked.tid,
                walked.name,
                walked.state,
                None if walked.complete else walked.stop_reason.value,
                stack,
                partial(self._sites_of, walked, modules)
                if frameless is None
                else partial(_sites_of_facts, frameless, modules, self._sites_of),
            )
        self._end(backtrace.problems, backtrace.timings.items())

    def add_counted(
        self,
        threads: Iterable[CountedThread],
        problems: Iterable[str],
        timings: Iterable[tuple[str, float]],
    ) -> None:
        """Counts one sample walked and named elsewhere, as :meth:`add` with ``some_threads``.

        Another process unwound it (``backtrace/workers.py``: ``liveunwind
        perf``'s workers) and sent each thread as a :data:`CountedThread`:
        the stack :func:`stack_of` made, and the sites of its frames, which
        are taken only when the stack is new here.  Samples counted in the
        order they were taken give the profile :meth:`add` gives.
        """
        last = self._begin(True)
        for tid, name, state, stopped, stack, sites in threads:
            self._count(last, tid, name, state, stopped, stack, partial(self._kept_sites, sites))
        self._end(problems, timings)

    def _begin(self, some_threads: bool) -> dict[int, ThreadProfile]:
        """A sample begins: the threads of the one before (every one so far, ``some_threads``)."""
        self.samples += 1
        last = self._last
        if not some_threads:
            self._last = {}
        return last

    def _count(
        self,
        last: dict[int, ThreadProfile],
        tid: int,
        name: str,
        state: str,
        stopped: str | None,
        stack: tuple[str, ...],
        sites: Callable[[], list[FrameSite]],
    ) -> None:
        """Counts one thread's ``stack``; ``stopped``: why its walk ended early (None: it did
        not); ``sites()``: its frames' sites, asked only when the stack is new."""
        thread = self._entry(tid, name, last)
        self._last[tid] = thread
        thread.samples += 1
        if tid == self.pid:
            self.main_name = name
        if stack not in thread.stacks:
            stack = self._keep(stack, sites)
        thread.stacks[stack] += 1
        if state == RUNNING:
            thread.running += 1
            thread.running_stacks[stack] += 1
        if stopped is not None:
            thread.incomplete += 1
            self.incomplete_reasons[stopped] += 1

    def _end(self, problems: Iterable[str], timings: Iterable[tuple[str, float]]) -> None:
        """A sample ends: the problems its walk met, the seconds of its phases."""
        self._problems.update(dict.fromkeys(problems))
        add_timings(self.timings, timings)

    def _keep(
        self, stack: tuple[str, ...], sites: Callable[[], list[FrameSite]]
    ) -> tuple[str, ...]:
        """A new stack as kept (its names shared), or OVERFLOW once a bound is reached."""
        names = self.sites
        new_names = {name for name in stack if name not in names}
        if (
            self.distinct >= MAX_STACKS
            or self.frames_kept + len(stack) > MAX_FRAMES
            or len(names) + len(new_names) > MAX_NAMES
        ):
            self.overflowed += 1
            return OVERFLOW
        self.distinct += 1
        self.frames_kept += len(stack)
        if new_names:
            for site in sites():
                if site.name in new_names:
                    names.setdefault(site.name, site)
        return tuple(names[name].name for name in stack)

    def _sites_of(self, thread: ThreadBacktrace, modules: ModuleMap | None) -> list[FrameSite]:
        """The sites of the thread's frames, each module described once (at most MAX_MODULES)."""

        def module_of(pc: int) -> ModuleSite | None:
            module = modules.find(pc) if modules is not None else None
            if module is None:
                return None
            return self._kept_module(module)

        return frame_sites(thread, module_of)

    def _kept_sites(self, sites: list[FrameSite]) -> list[FrameSite]:
        """Sites described elsewhere (:meth:`add_counted`), their modules made this profile's."""
        for site in sites:
            module = site.module
            if module is not None:
                site.module = self._kept_module(module)
        return sites

    def _kept_module(self, module: Module | ModuleSite) -> ModuleSite | None:
        """The module at ``module``'s path and start as first described; None beyond
        MAX_MODULES.  ``module``: a module of a module map, or one described elsewhere."""
        key = (module.path, module.start)
        site = self._modules.get(key)
        if site is None and len(self._modules) < MAX_MODULES:
            site = module if isinstance(module, ModuleSite) else describe(module)
            self._modules[key] = site
        return site

    def _entry(self, tid: int, name: str, last: dict[int, ThreadProfile]) -> ThreadProfile:
        """The entry a thread's sample counts in; a thread not in the sample before is new."""
        threads = self.threads
        new = tid not in last
        if new:
            self.threads_seen += 1
        if self.per_thread:
            thread = threads.get(tid)
            if thread is not None:
                thread.name = name
                thread.thread_count += new
                return thread
            if len(threads) < MAX_THREADS:
                thread = threads[tid] = ThreadProfile(tid, name)
                thread.thread_count = 1
                return thread
            self.threads_by_name += new
        thread = threads.get(name)
        if thread is None:
            thread = threads[name] = ThreadProfile(tid, name, by_name=True)
        thread.tid = tid
        thread.thread_count += new
        return thread

    def thread_ended(self, tid: int) -> None:
        """A thread of a profile of ``every_thread=False`` samples ended: its tid may come again."""
        self._last.pop(tid, None)

    @property
    def threads_folded(self) -> int:
        """Threads counted together with another of their name (what ``per_thread`` keeps apart)."""
        return self.threads_seen - len(self.threads)

    def last_tids(self) -> dict[int, ThreadProfile]:
        """The threads of the last sample, and the entry each was counted in."""
        return self._last

    def by_cpu(self) -> list[ThreadProfile]:
        """The threads, the busiest first (threads whose CPU is unknown last, then by tid)."""
        return sorted(
            self.threads.values(),
            key=lambda thread: (
                -(thread.cpu_percent or 0.0),
                thread.cpu_percent is None,
                thread.tid,
            ),
        )

    def folded(self, *, merge: bool = False) -> Counter[tuple[str, ...]]:
        """Stack (outermost first) → samples, every thread its own tower under its label.

        ``merge`` counts every thread's stacks together, with no thread level.
        """
        counts: Counter[tuple[str, ...]] = Counter()
        for thread in self.threads.values():
            for stack, count in thread.stacks.items():
                counts[stack if merge else (thread.label, *stack)] += count
        return counts

    def hottest(self, limit: int) -> list[tuple[ThreadProfile, tuple[str, ...], int]]:
        """The stacks most often on a CPU: (thread, stack, samples it was running in)."""
        found = [
            (thread, stack, count)
            for thread in self.threads.values()
            for stack, count in thread.running_stacks.items()
        ]
        found.sort(key=lambda entry: (-entry[2], entry[0].tid, entry[1]))
        return found[:limit]


def record(
    session: Session,
    *,
    rate: float,
    duration: float | None = None,
    per_thread: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    on_sample: Callable[[Profile, float], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> Profile:
    """Samples ``session``'s process ``rate`` times a second for ``duration`` seconds.

    The first sample is cold — it opens the process's files and reads their
    tables — so the clock (the schedule, the duration and the CPU times)
    starts when it is done.  Sampling ends early when ``should_stop()``
    turns true, on KeyboardInterrupt, or when the process can no longer be
    sampled (it exited): the profile of what was taken is returned either
    way, saying why it ended.  Errors of the first sample (no such process,
    no permission) are raised.  ``on_sample(profile, elapsed)`` is called
    after each sample.  ``per_thread`` keeps threads apart by tid instead
    of counting them by name.  ``clock`` (seconds) and ``sleep`` keep the
    schedule; they are the real ones unless a test simulates time, so that
    a check of the schedule does not depend on how busy the machine is.
    """
    if not 0 < rate <= MAX_RATE:
        raise ValueError(f"rate must be more than 0 and at most {MAX_RATE:g} per second")
    profile = Profile(session.pid, rate, per_thread=per_thread)
    period = 1.0 / rate
    profile.add(session.backtrace(), session.modules, walks=session.replayable_walks())
    before = _cpu_times(session.pid)
    started = clock()
    profile.started_at = time.time()
    # Slots are counted, not their times summed: a sum of periods drifts below
    # the deadline and took a 301st sample in a 3 s run at 100 Hz.
    slots = math.inf if duration is None else math.ceil(duration * rate - 1e-9)
    slot = 1  # slot 0 is the cold sample above
    if on_sample is not None:
        on_sample(profile, 0.0)
    try:
        while True:
            if should_stop():
                profile.end = END_INTERRUPTED
                break
            if slot >= slots:
                break
            due = started + slot * period
            now = clock()
            if due > now:
                sleep(due - now)
                continue  # asked to stop while asleep? checked first
            try:
                backtrace = session.backtrace()
            except LiveUnwindError as error:
                profile.end, profile.end_detail = END_TARGET_LOST, str(error)
                break
            profile.add(backtrace, session.modules, walks=session.replayable_walks())
            slot = _next_slot(profile, slot + 1, clock() - started, period, slots)
            if on_sample is not None:
                on_sample(profile, clock() - started)
    except KeyboardInterrupt:
        profile.end = END_INTERRUPTED
    ended = clock()
    # Ended by the clock, every slot up to the deadline was kept (the last
    # one's period reaches it); ended early, the profile covers until now.
    if duration is not None and profile.end == END_DURATION:
        profile.duration = duration
    else:
        profile.duration = ended - started
    _add_cpu(profile, before, _cpu_times(session.pid), ended - started)
    return profile


def _next_slot(profile: Profile, slot: int, elapsed: float, period: float, slots: float) -> int:
    """The slot of the next sample: ``slot``, unless sampling fell too far behind.

    ``elapsed`` is the time since the schedule started (slot 0).

    A sample that ran late is followed at once by the next, until the
    schedule is kept again — a short stall (liveunwind itself waiting for a
    CPU) is made up.  More than CATCH_UP behind, the whole periods missed
    are given up instead (counted in ``missed``, so that the samples and
    the missed slots of a run that ends by the clock add up to its slots,
    ``duration * rate``): a burst of back-to-back
    samples would stop the process again and again and crowd the samples
    into one moment.
    """
    late = elapsed - slot * period
    if late <= CATCH_UP:
        return slot
    # Slots past the last one (``slots``) were never due: not missed.
    skipped = int(min(late / period, max(slots - slot, 0)))
    profile.missed += skipped
    return slot + skipped


def _cpu_times(pid: int) -> tuple[float, dict[int, float]] | None:
    """The process's CPU seconds and each thread's (user + system), or None if it is gone."""
    import psutil  # type: ignore[import-untyped]  # only profiles need it; it ships no types

    try:
        process = psutil.Process(pid)
        with process.oneshot():
            total = process.cpu_times()
            threads = process.threads()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
    return total.user + total.system, {
        thread.id: thread.user_time + thread.system_time for thread in threads
    }


def _add_cpu(
    profile: Profile,
    before: tuple[float, dict[int, float]] | None,
    after: tuple[float, dict[int, float]] | None,
    wall: float,
) -> None:
    """Each entry's CPU percent between the two readings: the sum over its threads still there.

    A thread born since started at 0; one that ended took its CPU time with
    it (the kernel keeps no count of it), and an entry none of whose
    threads is left has none.
    """
    if before is None or after is None or wall <= 0:
        return
    profile.cpu_percent = 100.0 * max(after[0] - before[0], 0.0) / wall
    for tid, thread in profile.last_tids().items():
        end = after[1].get(tid)
        if end is not None:
            start = before[1].get(tid, 0.0)
            percent = 100.0 * max(end - start, 0.0) / wall
            thread.cpu_percent = (thread.cpu_percent or 0.0) + percent
