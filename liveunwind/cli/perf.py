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
    from types import SimpleNamespace

    from liveunwind.arch import Arch
    from liveunwind.arch.base import PerfRegisters
    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.profile import Profile
    from liveunwind.formats.perfevents import EventAttr
    from liveunwind.targets.sample.perfdata import PerfDataFile
    from liveunwind.targets.sample.process import FileSource, SampledProcess

#: PERF_TYPE_SOFTWARE, and its clocks whose period is nanoseconds on a CPU.
_TYPE_SOFTWARE = 1
_CPU_CLOCKS = (0, 1)  # PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK
#: PERF_SAMPLE_REGS_ABI_64: the only user register set read (a 32-bit process is not).
_ABI_64 = 2
_NANOSECONDS = 1e9


def perf_command(arguments: SimpleNamespace, options: BacktraceOptions) -> int:
    """Reads ``arguments.file``, unwinds its samples, writes and prints what ``profile`` does."""
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
    return deliver(profile, arguments, outputs)


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


def _profile(
    recording: PerfDataFile, arguments: SimpleNamespace, options: BacktraceOptions
) -> Profile:
    from liveunwind.backtrace.profile import Profile
    from liveunwind.backtrace.samples import SampleUnwinder
    from liveunwind.formats import perfevents
    from liveunwind.targets.filefinder import FileFinder
    from liveunwind.targets.sample.perfdata import compressed_note
    from liveunwind.targets.sample.process import RecordedFiles

    arch = _arch(recording)
    perf = check_unwindable(recording, arch)
    attr = recording.attr
    problems: list[str] = []
    finder = FileFinder(
        sysroot=arguments.sysroot,
        search_path=[part for part in arguments.search_path.split(":") if part],
    )
    files = RecordedFiles(finder, problems)
    build_ids = {entry.path: entry.build_id for entry in recording.build_ids}
    vdso = _own_vdso(arch, build_ids.get("[vdso]"))
    unwinder = SampleUnwinder(options)
    profile = Profile(arguments.pid or 0, _rate(attr), per_thread=arguments.per_thread)
    processes: dict[int, SampledProcess] = {}
    names: dict[int, str] = {}
    periods: dict[int, int] = {}
    first = last = None
    lost = without_registers = 0
    wanted_pid, wanted_tids = arguments.pid, set(arguments.threads or ())

    def process(pid: int) -> SampledProcess:
        found = processes.get(pid)
        if found is None:
            found = processes[pid] = _new_process(arch, pid, files, build_ids, vdso)
        return found

    for record in recording.records():
        if isinstance(record, perfevents.Sample):
            if wanted_pid is not None and record.pid != wanted_pid:
                continue
            if wanted_tids and record.tid not in wanted_tids:
                continue
            first = record.time if first is None else first
            last = record.time
            if record.abi != _ABI_64 or not record.registers:
                without_registers += 1
                continue
            registers = perf.registers(attr.sample_regs_user, record.registers)
            sampled = process(record.pid)
            name = names.get(record.tid, "")
            backtrace, modules = unwinder.unwind(sampled, record.tid, name, registers, record.stack)
            if record.tid == record.pid:
                profile.main_name = name
            profile.add(backtrace, modules, some_threads=True)
            periods[record.tid] = periods.get(record.tid, 0) + record.period
        elif isinstance(record, perfevents.Mmap):
            prot = record.prot if record.prot is not None else (5 if record.executable else 3)
            process(record.pid).map(
                record.start,
                record.end,
                record.pgoff,
                record.path,
                prot=prot,
                inode=record.inode,
                build_id=record.build_id,
            )
        elif isinstance(record, perfevents.Comm):
            names[record.tid] = record.name
            if record.exec and record.pid in processes:
                processes[record.pid].forget_mappings()
        elif isinstance(record, perfevents.Task):
            if not record.exit:
                names.setdefault(record.tid, names.get(record.ptid, ""))
                if record.pid != record.ppid and record.ppid in processes:
                    processes[record.pid] = processes[record.ppid].copy(record.pid)
        elif isinstance(record, perfevents.Lost):
            lost += record.lost
    if profile.pid == 0 and len(processes) == 1:
        profile.pid = next(iter(processes))
    profile.duration = (last - first) / _NANOSECONDS if first is not None and last else 0.0
    _cpu(profile, attr, periods)
    notes = [*recording.problems, *problems]
    if lost:
        notes.append(f"{lost} samples were lost by the kernel (perf's buffers were full)")
    if without_registers:
        notes.append(
            f"{without_registers} samples hold no 64-bit user registers (kernel threads, "
            "32-bit processes): not counted"
        )
    compressed = compressed_note(recording.skipped)
    if compressed:
        notes.append(compressed)
    for process_ in processes.values():
        notes += process_.problems
    profile.note(notes)
    return profile


def _new_process(
    arch: Arch,
    pid: int,
    files: FileSource,
    build_ids: dict[str, bytes],
    vdso: bytes | None,
) -> SampledProcess:
    from liveunwind.targets.sample.process import SampledProcess

    created = SampledProcess(arch, pid, files)
    created.build_ids.update(build_ids)
    created.vdso = vdso
    return created


def _rate(attr: EventAttr) -> float:
    """The samples per second asked (``-F``), or 0 when a period was asked instead."""
    return float(attr.sample_period) if attr.freq else 0.0


def _cpu(profile: Profile, attr: EventAttr, periods: dict[int, int]) -> None:
    """Each thread's CPU share from its samples' periods, where the event is a CPU clock."""
    if attr.type != _TYPE_SOFTWARE or attr.config not in _CPU_CLOCKS or profile.duration <= 0:
        return
    wall = profile.duration * _NANOSECONDS
    profile.cpu_percent = 100.0 * sum(periods.values()) / wall
    for tid, entry in profile.last_tids().items():
        share = 100.0 * periods.get(tid, 0) / wall
        entry.cpu_percent = (entry.cpu_percent or 0.0) + share


def _own_vdso(arch: Arch, build_id: bytes | None) -> bytes | None:
    """This machine's vDSO, if it is the one the recording names (same build-id)."""
    from liveunwind.arch import host_arch
    from liveunwind.errors import FormatError
    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.local.process import LocalProcess

    if not build_id or arch is not host_arch():
        return None
    own = LocalProcess([])
    for mapping in own.mappings():
        if mapping.path == "[vdso]":
            try:
                data = own.read(mapping.start, mapping.end - mapping.start)
                return data if ElfImage(data, origin="[vdso]").build_id == build_id else None
            except (LiveUnwindError, FormatError):
                return None
    return None
