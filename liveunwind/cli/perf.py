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
    from collections.abc import Iterator
    from types import SimpleNamespace

    from liveunwind.arch import Arch
    from liveunwind.arch.base import PerfRegisters
    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.profile import Profile
    from liveunwind.backtrace.samples import SampleReplay, Unwound
    from liveunwind.formats.perfevents import EventAttr
    from liveunwind.targets.sample.perfdata import PerfDataFile

_NANOSECONDS = 1e9


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
    from liveunwind.backtrace.samples import SampleReplay
    from liveunwind.formats import perfevents
    from liveunwind.targets.filefinder import FileFinder
    from liveunwind.targets.sample.process import RecordedFiles

    arch = _arch(recording)
    check_unwindable(recording, arch)
    finder = FileFinder(
        sysroot=arguments.sysroot,
        search_path=[part for part in arguments.search_path.split(":") if part],
    )
    build_ids = {entry.path: entry.build_id for entry in recording.build_ids}
    files = RecordedFiles(finder, [])
    samples = SampleReplay(
        arch,
        recording.attr,
        files,
        options,
        build_ids=build_ids,
        vdso=_own_vdso(recording, arch, build_ids.get("[vdso]")),
        perf_maps=arguments.sysroot or "/",
    )
    wanted_pid, wanted_tids = arguments.pid, set(arguments.threads or ())

    def unwound() -> Iterator[Unwound]:
        for record in recording.records():
            if isinstance(record, perfevents.Sample) and (
                (wanted_pid is not None and record.pid != wanted_pid)
                or (wanted_tids and record.tid not in wanted_tids)
            ):
                continue
            result = samples.feed(record)
            if result is not None:
                yield result

    return samples, unwound()


def _profile(
    recording: PerfDataFile, arguments: SimpleNamespace, options: BacktraceOptions
) -> Profile:
    from liveunwind.backtrace.profile import Profile

    samples, unwound = replay(recording, arguments, options)
    attr = recording.attr
    profile = Profile(arguments.pid or 0, _rate(attr), per_thread=arguments.per_thread)
    profile.source = "perf.data"
    periods: dict[int, int] = {}
    #: Samples per process: the profile is titled by the most sampled one.
    sampled_pids: dict[int, int] = {}
    main_names: dict[int, str] = {}  # pid → its main thread's name, last seen
    first = last = None
    for each in unwound:
        sample = each.sample
        first = sample.time if first is None else first
        last = sample.time
        sampled_pids[sample.pid] = sampled_pids.get(sample.pid, 0) + 1
        if sample.tid == sample.pid:
            main_names[sample.pid] = each.name
        profile.add(each.backtrace, each.modules, some_threads=True)
        periods[sample.tid] = periods.get(sample.tid, 0) + sample.period
    if profile.pid == 0 and sampled_pids:
        profile.pid = max(sampled_pids, key=sampled_pids.__getitem__)
    profile.main_name = main_names.get(profile.pid, "")
    profile.duration = (last - first) / _NANOSECONDS if first is not None and last else 0.0
    if not profile.rate_asked:  # a period was asked (-c): the rate it gave stands for it
        profile.rate_asked = profile.rate or 1.0
    _cpu(profile, attr, periods)
    notes = [*recording.problems, *samples.files.problems, *samples.problems]
    if samples.lost:
        notes.append(f"{samples.lost} samples were lost by the kernel (perf's buffers were full)")
    if samples.without_registers:
        notes.append(
            f"{samples.without_registers} samples hold no 64-bit user registers (kernel "
            "threads, 32-bit processes): not counted"
        )
    profile.note(notes)
    return profile


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
    """
    import os

    from liveunwind.arch import host_arch
    from liveunwind.errors import FormatError
    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.local.process import LocalProcess

    if arch is not host_arch():
        return None
    if build_id is None:
        here = os.uname()
        if (recording.hostname, recording.osrelease) != (here.nodename, here.release):
            return None
    own = LocalProcess([])
    for mapping in own.mappings():
        if mapping.path == "[vdso]":
            try:
                data = own.read(mapping.start, mapping.end - mapping.start)
                ours = ElfImage(data, origin="[vdso]").build_id
            except (LiveUnwindError, FormatError):
                return None
            return data if build_id is None or ours == build_id else None
    return None
