"""``liveunwind perf PERF.DATA``: the samples of a ``perf record --call-graph dwarf`` file.

Each sample holds the user registers and a copy of the stack from the
stack pointer up, taken by the kernel at the instant of the sample; each is
walked by the stepper on its own address space (``targets/sample``) against
the files of the process as the file's mmap records place them, found on
this machine (under ``--sysroot`` first, by build-id where the recording
names one: a file with another build-id is not used, and its frames stay
unnamed).  The stacks are counted into the same profile ``liveunwind
profile`` makes, with the same outputs.  A thread's CPU share is the sum of
its samples' periods over the recording's length when the event is a CPU
clock (``cpu-clock``, ``task-clock``: perf's default without hardware
counters), else unknown.
"""

from __future__ import annotations

from liveunwind.errors import LiveUnwindError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Generator, Iterator
    from types import SimpleNamespace

    from liveunwind.arch import Arch
    from liveunwind.arch.base import PerfRegisters
    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.profile import CountedThread, FrameSite, ModuleSite, Profile
    from liveunwind.backtrace.samples import SampleReplay, Unwound
    from liveunwind.formats.perfevents import EventAttr
    from liveunwind.frames import Backtrace, ThreadBacktrace
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.sample.perfdata import PerfDataFile

_NANOSECONDS = 1e9

if TYPE_CHECKING:
    #: One sample as a worker sends it (:class:`_Sender`): its time, pid, tid, period and
    #: thread name; each thread walked as (tid, name, state, why its walk ended early or None,
    #: its stack's number); the stacks not sent before (names, frame sites); the problems of
    #: its walk if they changed since the last item, else None; file problems new since then.
    #: A sample that says nothing new beside the sender's last (the same process, thread,
    #: name and threads walked; no new stack, problem or file problem) is sent as its
    #: time and period only (:data:`_Again`).  The seconds of the phases are summed in
    #: the worker (:attr:`_Sender.timings`) and sent with its summary.
    _Item = tuple[
        int,
        int,
        int,
        int,
        str,
        list[tuple[int, str, str, str | None, int]],
        list[tuple[tuple[str, ...], list[FrameSite]]],
        tuple[str, ...] | None,
        tuple[str, ...],
    ]
    _Again = tuple[int, int]


def perf_command(arguments: SimpleNamespace, options: BacktraceOptions) -> int:
    """Reads ``arguments.file``, unwinds its samples, writes and prints what ``profile`` does.

    Exit status: 0 every walk reached the end of its stack, 1 some did not
    or the file is cut short or corrupt inside its data (what is before
    that is reported), 2 the file cannot be read as a perf.data made for
    unwinding (:class:`~liveunwind.targets.sample.perfdata.PerfDataError`).
    """
    from liveunwind.cli.profile import deliver, open_outputs
    from liveunwind.targets.sample.perfdata import PerfDataFile

    outputs = open_outputs(arguments)
    try:
        with PerfDataFile(arguments.file) as recording:
            profile = _profile(recording, arguments, options)
    except BaseException:
        for output in outputs.values():
            output.discard()
        raise
    status = deliver(profile, arguments, outputs)
    # A file cut short or corrupt in its data: what was read is reported, and it is incomplete.
    return max(status, 1) if recording.problems else status


def _arch(recording: PerfDataFile) -> Arch:
    from liveunwind.arch import arch_by_name, host_arch
    from liveunwind.targets.sample.perfdata import PerfDataError

    if not recording.arch_name:
        return host_arch()
    try:
        arch = arch_by_name(recording.arch_name)
    except LiveUnwindError:
        raise PerfDataError(
            f"{recording.path}: recorded on {recording.arch_name}, which liveunwind does not read"
        ) from None
    return arch


def check_unwindable(recording: PerfDataFile, arch: Arch) -> PerfRegisters:
    """How the samples number registers; PerfDataError unless they carry registers and stack."""
    from liveunwind.formats import perfevents
    from liveunwind.targets.sample.perfdata import PerfDataError

    attr = recording.attr
    wanted = perfevents.SAMPLE_REGS_USER | perfevents.SAMPLE_STACK_USER | perfevents.SAMPLE_TID
    perf = arch.perf_registers
    registers = perf.registers(attr.sample_regs_user, tuple(range(64))) if perf else {}
    if (
        perf is None
        or attr.sample_type & wanted != wanted
        or arch.pc not in registers
        or arch.sp not in registers
    ):
        raise PerfDataError(
            f"{recording.path}: its samples hold no user registers and stack copy: "
            "record with perf record --call-graph dwarf"
        )
    return perf


def replay(
    recording: PerfDataFile, arguments: SimpleNamespace, options: BacktraceOptions
) -> tuple[SampleReplay, Iterator[Unwound]]:
    """The replay of ``recording`` and its samples unwound, those ``--pid``/``--tid`` ask for.

    Files are looked for under ``--sysroot`` and along ``--search-path``.
    """
    samples = _sample_replay(recording, arguments, options)
    unwound = _unwound(recording, samples, arguments, _Share())
    return samples, (each for each in unwound if each is not None)


def _sample_replay(
    recording: PerfDataFile, arguments: SimpleNamespace, options: BacktraceOptions
) -> SampleReplay:
    from liveunwind.backtrace.samples import SampleReplay
    from liveunwind.targets.filefinder import FileFinder
    from liveunwind.targets.sample.process import RecordedFiles

    arch = _arch(recording)
    check_unwindable(recording, arch)
    finder = FileFinder(
        sysroot=arguments.sysroot,
        search_path=[part for part in arguments.search_path.split(":") if part],
    )
    build_ids = {entry.path: entry.build_id for entry in recording.build_ids}
    return SampleReplay(
        arch,
        recording.attr,
        RecordedFiles(finder, []),
        options,
        build_ids=build_ids,
        vdso=_own_vdso(recording, arch, build_ids.get("[vdso]")),
        perf_maps=arguments.sysroot or "/",
    )


class _Share:
    """Which of the samples asked for a process unwinds: all before ``first``, then the
    ``worker``-th of every ``workers``; the others are another worker's (None)."""

    __slots__ = ("first", "worker", "workers")

    def __init__(self) -> None:
        self.first, self.worker, self.workers = 0, 0, 1

    def mine(self, index: int) -> bool:
        return index < self.first or (index - self.first) % self.workers == self.worker


def _unwound(
    recording: PerfDataFile, samples: SampleReplay, arguments: SimpleNamespace, share: _Share
) -> Iterator[Unwound | None]:
    """Every record fed to ``samples``; of the samples asked for, those ``share`` gives this
    process unwound (None: it holds no user registers)."""
    from liveunwind.formats import perfevents

    wanted_pid, wanted_tids = arguments.pid, set(arguments.threads or ())
    index = -1
    for record in recording.records():
        if not isinstance(record, perfevents.Sample):
            samples.feed(record)
            continue
        if (wanted_pid is not None and record.pid != wanted_pid) or (
            wanted_tids and record.tid not in wanted_tids
        ):
            continue
        index += 1
        if share.mine(index):
            yield samples.feed(record)


class _Tally:
    """What the profile says of the samples beyond their stacks: their times, processes,
    main threads' names and periods."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.last = 0
        #: Samples per process: the profile is titled by the most sampled one.
        self.sampled_pids: dict[int, int] = {}
        self.main_names: dict[int, str] = {}  # pid → its main thread's name, last seen
        self.periods: dict[int, int] = {}

    def count(self, time: int, pid: int, tid: int, period: int, name: str) -> None:
        self.first = time if self.first is None else self.first
        self.last = time
        self.sampled_pids[pid] = self.sampled_pids.get(pid, 0) + 1
        if tid == pid:
            self.main_names[pid] = name
        self.periods[tid] = self.periods.get(tid, 0) + period


def _profile(
    recording: PerfDataFile, arguments: SimpleNamespace, options: BacktraceOptions
) -> Profile:
    from liveunwind.backtrace.profile import Profile
    from liveunwind.backtrace.workers import worker_count

    samples = _sample_replay(recording, arguments, options)
    attr = recording.attr
    profile = Profile(arguments.pid or 0, _rate(attr), per_thread=arguments.per_thread)
    profile.source = "perf.data"
    tally = _Tally()
    # Only stacks of names are counted: a walk at the pcs of one before need not be named.
    samples.unwinder.stacks_only = True
    workers = worker_count(arguments.workers)
    if workers > 1:
        outcome = _count_in_workers(recording, samples, arguments, workers, profile, tally)
    else:
        for each in _unwound(recording, samples, arguments, _Share()):
            if each is not None:
                sample = each.sample
                tally.count(sample.time, sample.pid, sample.tid, sample.period, each.name)
                profile.add(each.backtrace, each.modules, some_threads=True, stacks=each.stacks)
        outcome = _Outcome.of(recording, samples)
    if profile.pid == 0 and tally.sampled_pids:
        profile.pid = max(tally.sampled_pids, key=tally.sampled_pids.__getitem__)
    profile.main_name = tally.main_names.get(profile.pid, "")
    first, last = tally.first, tally.last
    profile.duration = (last - first) / _NANOSECONDS if first is not None and last else 0.0
    if not profile.rate_asked:  # a period was asked (-c): the rate it gave stands for it
        profile.rate_asked = profile.rate or 1.0
    _cpu(profile, attr, tally.periods)
    notes = [*recording.problems, *outcome.file_problems, *outcome.process_problems]
    if outcome.lost:
        notes.append(f"{outcome.lost} samples were lost by the kernel (perf's buffers were full)")
    if outcome.without_registers:
        notes.append(
            f"{outcome.without_registers} samples hold no 64-bit user registers (kernel "
            "threads, 32-bit processes): not counted"
        )
    profile.note(notes)
    return profile


class _Outcome:
    """What a replay found beyond its samples (a worker's summary, pickled); a worker's
    also the seconds of its samples' phases (:attr:`_Sender.timings`)."""

    __slots__ = (
        "file_problems",
        "lost",
        "process_problems",
        "recording_problems",
        "timings",
        "without_registers",
    )

    def __init__(
        self,
        recording_problems: list[str],
        file_problems: list[str],
        process_problems: list[str],
        lost: int,
        without_registers: int,
        timings: dict[str, list[float]] | None = None,
    ) -> None:
        self.recording_problems = recording_problems
        self.file_problems = file_problems
        self.process_problems = process_problems
        self.lost = lost
        self.without_registers = without_registers
        self.timings = timings or {}

    @classmethod
    def of(
        cls,
        recording: PerfDataFile,
        samples: SampleReplay,
        timings: dict[str, list[float]] | None = None,
    ) -> _Outcome:
        return cls(
            recording.problems,
            samples.files.problems,
            samples.problems,
            samples.lost,
            samples.without_registers,
            timings,
        )


#: Samples unwound before the workers are forked: the files, tables and names the first
#: opens and reads, and what the walks after it remember (walks and suffixes, and whether
#: remembering pays: its trials take 192 walks), are then every worker's without each
#: making them again (two workers on 10,700 samples: 6,300 page faults with 1, 5,000).
WARM_SAMPLES = 200


def _count_in_workers(
    recording: PerfDataFile,
    samples: SampleReplay,
    arguments: SimpleNamespace,
    count: int,
    profile: Profile,
    tally: _Tally,
) -> _Outcome:
    """The samples unwound by ``count`` workers, counted here in the order they were taken.

    The first :data:`WARM_SAMPLES` are unwound here; then each worker
    (forked: it goes on reading the file where this process stopped) reads
    every record and unwinds every ``count``-th sample (:class:`_Share`), and
    sends each as an :data:`_Item` (:class:`_Sender`): its stack by a number
    (the names and sites the first time), the problems its walk met when
    they changed; or, when it says nothing new beside the one before, as
    its time and period only (:data:`_Again`).  Counted in sample order
    (:class:`_Receiver`), the items make the profile a serial run makes,
    byte for byte in every output; the seconds of the phases (``--stats``)
    are each worker's sums, added at the end.
    """
    from liveunwind.backtrace.workers import CannotFork, Workers

    share = _Share()
    unwound = _unwound(recording, samples, arguments, share)
    sender, receiver = _Sender(samples), _Receiver(profile, tally)
    warm = 0
    for each in unwound:
        if each is not None:
            receiver.take(sender.item(each))
        warm += 1
        if warm == WARM_SAMPLES:
            break
    else:
        _add_timings(profile, sender.timings)
        return _Outcome.of(recording, samples)  # no samples left to share
    without_registers = samples.without_registers

    def work(worker: int, workers: int) -> Generator[_Item | _Again | None, None, _Outcome]:
        share.first, share.worker, share.workers = warm, worker, workers
        sender.timings = {}  # this process's sums are the command's
        for each in unwound:
            yield None if each is None else sender.item(each)
        return _Outcome.of(recording, samples, sender.timings)

    receivers = [receiver.copy() for _ in range(count)]
    try:
        pool = Workers(count, work)
    except CannotFork:  # this process walks the rest itself, as it walked the first
        for each in unwound:
            if each is not None:
                receiver.take(sender.item(each))
        _add_timings(profile, sender.timings)
        return _Outcome.of(recording, samples)
    with pool:
        for worker, sent in pool.results():
            if sent is not None:
                receivers[worker].take(sent)  # type: ignore[arg-type]  # what _Sender.item made
        outcomes: list[_Outcome] = [pool.summaries[worker] for worker in range(count)]  # type: ignore[misc]
    _add_timings(profile, sender.timings)
    for outcome in outcomes:
        _add_timings(profile, outcome.timings)
    first = outcomes[0]
    # Every worker read the whole file and fed every record: what they say of the file and
    # its processes is the same; samples without registers were each one worker's.
    recording.problems[:] = first.recording_problems
    file_problems: dict[str, None] = {}
    for taken in (receiver, *receivers):
        file_problems.update(taken.file_problems)
    for outcome in outcomes:
        file_problems.update(dict.fromkeys(outcome.file_problems))
    first.file_problems = list(file_problems)
    first.without_registers = without_registers + sum(
        outcome.without_registers - without_registers for outcome in outcomes
    )
    return first


class _Receiver:
    """One sender's items counted into the profile: its stacks by number, its last problems,
    and its last item's sample, which an :data:`_Again` is counted as."""

    __slots__ = ("file_problems", "last", "problems", "profile", "sites", "stacks", "tally")

    def __init__(self, profile: Profile, tally: _Tally) -> None:
        self.profile, self.tally = profile, tally
        self.stacks: list[tuple[str, ...]] = []
        self.sites: list[list[FrameSite]] = []
        self.problems: tuple[str, ...] = ()
        self.file_problems: dict[str, None] = {}
        #: The pid, tid and name of the last item, and its threads as counted.
        self.last: tuple[int, int, str, list[CountedThread]] | None = None

    def copy(self) -> _Receiver:
        """A receiver of a sender forked from this one's: it knows what this one was sent."""
        other = _Receiver(self.profile, self.tally)
        other.stacks, other.sites = list(self.stacks), list(self.sites)
        other.problems, other.last = self.problems, self.last
        return other

    def take(self, item: _Item | _Again) -> None:
        if len(item) == 2:
            # The sample of the last item again: its problems and file problems are known.
            time, period = item
            assert self.last is not None, "an _Again before any _Item"
            pid, tid, name, counted = self.last
            self.tally.count(time, pid, tid, period, name)
            self.profile.add_counted(counted, (), ())
            return
        time, pid, tid, period, name, threads, new, problems, new_files = item
        self.tally.count(time, pid, tid, period, name)
        for stack, frame_sites in new:
            self.stacks.append(stack)
            self.sites.append(frame_sites)
        if problems is not None:
            self.problems = problems
        self.file_problems.update(dict.fromkeys(new_files))
        stacks, sites = self.stacks, self.sites
        counted = [
            (tid, name, state, stopped, stacks[number], sites[number])
            for tid, name, state, stopped, number in threads
        ]
        self.last = (pid, tid, name, counted)
        self.profile.add_counted(counted, self.problems, ())


class _Sender:
    """A worker's side of :func:`_count_in_workers`: each sample's walk as an :data:`_Item`
    (or an :data:`_Again`)."""

    __slots__ = (
        "_add_timings",
        "_files_sent",
        "_last",
        "_problems",
        "_samples",
        "_stacks",
        "timings",
    )

    def __init__(self, samples: SampleReplay) -> None:
        from liveunwind.backtrace.profile import add_timings  # once, not per sample

        self._add_timings = add_timings
        self._samples = samples
        #: Stacks sent so far, by the number they are sent by.
        self._stacks: dict[tuple[str, ...], int] = {}
        #: The last problems sent; file problems sent.
        self._problems: tuple[str, ...] | None = None
        self._files_sent = 0
        #: The pid, tid, name and threads of the last item.
        self._last: tuple[int, int, str, list[tuple[int, str, str, str | None, int]]] | None
        self._last = None
        #: Per phase of the samples sent: total seconds and the longest (Profile.timings).
        self.timings: dict[str, list[float]] = {}

    def item(self, each: Unwound) -> _Item | _Again:
        """What :meth:`Profile.add_counted` and the tally take of one sample; its stacks by
        number (one not sent before: its names and sites, in ``new``); its time and period
        only when the rest is the last item's."""
        backtrace = each.backtrace
        threads, new = [], []
        stacks = each.stacks or self._stacks_of(backtrace)
        for walked, stack in zip(backtrace.threads, stacks, strict=True):
            number = self._stacks.get(stack)
            if number is None:
                # Its frames are named: a walk whose frames are not was at the pcs of one
                # named and sent before (SampleUnwinder.stacks_only), and so was its stack.
                number = self._stacks[stack] = len(self._stacks)
                new.append((stack, self._sites(walked, each.modules)))
            stopped = None if walked.complete else walked.stop_reason.value
            threads.append((walked.tid, walked.name, walked.state, stopped, number))
        # Compared, not told by identity: a module map's problems are a new list each time.
        problems, changed = tuple(backtrace.problems), None
        if problems != self._problems:
            changed = self._problems = problems
        file_problems = self._samples.files.problems
        new_files: tuple[str, ...] = ()
        if len(file_problems) != self._files_sent:
            new_files = tuple(file_problems[self._files_sent :])
            self._files_sent = len(file_problems)
        sample = each.sample
        self._add_timings(self.timings, backtrace.timings.items())
        last = (sample.pid, sample.tid, each.name, threads)
        if not new and changed is None and not new_files and last == self._last:
            return sample.time, sample.period
        self._last = last
        return (
            sample.time,
            sample.pid,
            sample.tid,
            sample.period,
            each.name,
            threads,
            new,
            changed,
            new_files,
        )

    @staticmethod
    def _stacks_of(backtrace: Backtrace) -> list[tuple[str, ...]]:
        """The stacks of a backtrace whose walks did not come with them."""
        from liveunwind.backtrace.profile import stack_of

        return [stack_of(walked) for walked in backtrace.threads]

    @staticmethod
    def _sites(walked: ThreadBacktrace, modules: ModuleMap) -> list[FrameSite]:
        """The sites of a new stack's frames, their modules described."""
        from liveunwind.backtrace.profile import describe, frame_sites

        def module_of(pc: int) -> ModuleSite | None:
            module = modules.find(pc)
            return None if module is None else describe(module)

        return frame_sites(walked, module_of)


def _add_timings(profile: Profile, timings: dict[str, list[float]]) -> None:
    """Adds one sender's sums of the phases' seconds to the profile's."""
    totals = profile.timings
    for phase, (total, longest) in timings.items():
        kept = totals.get(phase)
        if kept is None:
            totals[phase] = [total, longest]
        else:
            kept[0] += total
            kept[1] = max(kept[1], longest)


def _rate(attr: EventAttr) -> float:
    """The samples per second asked (``-F``), or 0 when a period was asked instead (``-c``)."""
    return float(attr.sample_period) if attr.freq else 0.0


def _cpu(profile: Profile, attr: EventAttr, periods: dict[int, int]) -> None:
    """Each thread's CPU share from its samples' periods, where the event is a CPU clock."""
    from liveunwind.formats import perfevents

    cpu_clock = attr.type == perfevents.TYPE_SOFTWARE and attr.config in (
        perfevents.SW_CPU_CLOCK,
        perfevents.SW_TASK_CLOCK,
    )
    if not cpu_clock or profile.duration <= 0:
        return
    wall = profile.duration * _NANOSECONDS
    profile.cpu_percent = 100.0 * sum(periods.values()) / wall
    for tid, entry in profile.last_tids().items():
        share = 100.0 * periods.get(tid, 0) / wall
        entry.cpu_percent = (entry.cpu_percent or 0.0) + share


def _own_vdso(recording: PerfDataFile, arch: Arch, build_id: bytes | None) -> bytes | None:
    """This machine's vDSO, if it is the recording's.

    It is when its build-id is the one the recording names; where the
    recording names none (``perf record -z`` writes no build-ids), when the
    recording was made on this host under the kernel release running now.
    Read through /proc/self/mem (as ``targets/files.py`` says, not a file to
    open through it): ``LocalProcess`` read it the same, but importing it took
    4 ms of CPU (of the 0.08 s before the workers start).
    """
    import os

    from liveunwind.arch import host_arch
    from liveunwind.errors import FormatError
    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.live.procfs import read_maps

    if arch is not host_arch():
        return None
    if build_id is None:
        here = os.uname()
        if (recording.hostname, recording.osrelease) != (here.nodename, here.release):
            return None
    for mapping in read_maps("self"):
        if mapping.path == "[vdso]":
            try:
                data = _read_own_memory(mapping.start, mapping.end - mapping.start)
                ours = ElfImage(data, origin="[vdso]").build_id
            except (OSError, LiveUnwindError, FormatError):
                return None
            return data if build_id is None or ours == build_id else None
    return None


#: The largest vDSO read (the kernel's are two to four pages).
MAX_VDSO = 1 << 20


def _read_own_memory(address: int, size: int) -> bytes:
    """``size`` bytes of this process at ``address`` (at most MAX_VDSO); OSError if unreadable."""
    import os

    if not 0 < size <= MAX_VDSO:
        raise OSError(f"a vDSO of {size} bytes")
    fd = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, size, address)
    finally:
        os.close(fd)
    if len(data) != size:
        raise OSError(f"{len(data)} of the vDSO's {size} bytes read")
    return data
