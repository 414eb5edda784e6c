"""``profile --on-cpu``: the kernel's samples of a process, unwound as they arrive, counted.

The process is never stopped: the kernel samples each thread on its own CPU
clock (:mod:`liveunwind.targets.perfevent`) and copies its user registers
and the top of its stack; here, outside the target's time, each sample is
fed to :class:`~liveunwind.backtrace.samples.SampleReplay` (the records of
mappings, names and tasks; each sample walked by the one stepper over a
:class:`~liveunwind.targets.sample.space.SampleSpace` (registers, stack
copy, and the process's files for the rest)) and counted in a
:class:`~liveunwind.backtrace.profile.Profile`, so every writer of the
wall-clock profile writes this one too.

The process's mappings are those of ``/proc/PID/maps`` when sampling
starts, then what the mmap records say (a library dlopened, JIT code);
thread names those of ``/proc`` then of the comm records; its perf map
(``/tmp/perf-PID.map``: JITs, CPython's ``-X perf``) is read on after
every batch and names code no file does.  Samples of other processes (a
child the process forked inherits the events) are counted and left out.
A CPython process without ``-X perf`` is said to need the wall-clock mode
for its Python frames.

Records are taken in batches, one per drain of the rings; each batch is put
in time order first (the rings are one per CPU), so a mapping precedes the
samples that land in it.
"""

from __future__ import annotations

import contextlib
import os
import time

from liveunwind.arch import host_arch
from liveunwind.backtrace.profile import (
    END_DURATION,
    END_INTERRUPTED,
    END_TARGET_LOST,
    Profile,
    _add_cpu,
    _cpu_times,
)
from liveunwind.backtrace.samples import SampleReplay
from liveunwind.errors import FormatError, TargetError, UsageError
from liveunwind.formats.perfevents import EventAttr, Sample, Task, decode, record_time
from liveunwind.frames import StopReason
from liveunwind.modules.perfmapfile import PerfMapFile
from liveunwind.targets.files import read_kernel_file
from liveunwind.targets.live.procfs import list_tids, perf_map_path, read_maps, started_at
from liveunwind.targets.live.syscalls import read_remote
from liveunwind.targets.perfevent.recorder import END_EXITED, END_STOPPED, Recorder
from liveunwind.targets.sample.process import RootFiles

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.targets.base import Mapping
    from liveunwind.targets.sample.process import SampledProcess

#: Bytes of the perf map read on after each batch (the rest on the next).
PERF_MAP_STEP = 1 << 20
#: Thread names read from /proc at the start (the comm records name the rest).
MAX_NAMES = 100_000
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
#: What a profile of a Python process without ``-X perf`` says.
PYTHON_NOTE = (
    "process {pid} runs CPython{how}: its Python functions are not in these stacks (only the "
    "interpreter's C functions); CPython 3.12+ started with -X perf (or PYTHONPERFSUPPORT=1) "
    "names them here, and the wall-clock mode (profile --python, without --on-cpu) reads "
    "them from any CPython"
)


def record_on_cpu(
    pid: int,
    options: BacktraceOptions,
    *,
    rate: float,
    duration: float | None,
    stack_size: int,
    per_thread: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    on_sample: Callable[[Profile, float], None] | None = None,
) -> Profile:
    """Samples ``pid`` on its threads' CPU clock, ``rate`` times a CPU-second, for ``duration``.

    Ends early when ``should_stop()`` turns true, on KeyboardInterrupt, or
    when the process exits; the profile says why.  Errors of opening the
    events (no such process, no permission) are raised.
    """
    if rate < 1:
        raise UsageError("profile --on-cpu: --rate must be at least 1 (samples per CPU-second)")
    arch = host_arch()
    if arch.perf_registers is None:
        raise TargetError(f"profile --on-cpu cannot read perf samples' registers on {arch.name}")
    profile = Profile(pid, rate, per_thread=per_thread)
    profile.source = "perf_event"
    perf_map = PerfMapFile(f"/proc/{pid}/root", perf_map_path(pid), lambda: started_at(pid))
    others = undecoded = 0
    with Recorder(
        pid, rate=round(rate), regs_mask=arch.perf_registers.unwind_mask, stack_size=stack_size
    ) as recorder:
        attr = EventAttr.from_bytes(recorder.attr)
        replay = SampleReplay(arch, attr, RootFiles(f"/proc/{pid}/root", []), options)
        # After the events are open (a refusal is theirs to explain): mappings made
        # from here on come as records too, and one applied twice is the same mapping.
        replay.names.update(_thread_names(pid))
        _seed(replay.process(pid), pid)
        before = _cpu_times(pid)
        started = time.perf_counter()
        profile.started_at = time.time()
        try:
            for batch in recorder.batches(duration, should_stop):
                replay.perf_map = perf_map.update(PERF_MAP_STEP)
                for raw in _in_time_order(attr, batch):
                    try:
                        record = decode(attr, raw)[0]
                    except FormatError:
                        undecoded += 1  # the kernel's records are whole: not expected
                        continue
                    if isinstance(record, Sample) and record.pid != pid:
                        others += 1  # a child process: it inherited the events
                        continue
                    if getattr(record, "pid", pid) != pid:
                        continue  # a child's mappings and names
                    unwound = replay.feed(record)
                    if unwound is not None:
                        profile.add(unwound.backtrace, unwound.modules, some_threads=True)
                    elif isinstance(record, Task) and record.exit:
                        replay.names.pop(record.tid, None)
                        profile.thread_ended(record.tid)
                if on_sample is not None:
                    on_sample(profile, time.perf_counter() - started)
        except KeyboardInterrupt:
            profile.end = END_INTERRUPTED
        ended = time.perf_counter()
        if recorder.end == END_STOPPED:
            profile.end = END_INTERRUPTED
        elif recorder.end == END_EXITED:
            profile.end, profile.end_detail = END_TARGET_LOST, f"process {pid} exited"
        # Ended by the clock, the profile covers the time asked (the last drain ran past it).
        if duration is not None and profile.end == END_DURATION:
            profile.duration = duration
        else:
            profile.duration = ended - started
        _add_cpu(profile, before, _cpu_times(pid), ended - started)
        _notes(profile, recorder, replay, others, stack_size, options, undecoded)
    return profile


def _in_time_order(attr: EventAttr, batch: list[bytes]) -> list[bytes]:
    """The records of one drain (one ring per CPU) in the order they happened."""

    def when(raw: bytes) -> int:
        return record_time(attr, int.from_bytes(raw[:4], "little"), raw, 0) or 0

    return sorted(batch, key=when)


def _thread_names(pid: int) -> dict[int, str]:
    """Each thread's name as ``/proc`` has it now."""
    names = {}
    for tid in list_tids(pid)[:MAX_NAMES]:
        try:
            names[tid] = (
                read_kernel_file(f"/proc/{pid}/task/{tid}/comm", 64)
                .decode("utf-8", "replace")
                .rstrip("\n")
            )
        except OSError:
            continue  # it ended
    return names


def _seed(process: SampledProcess, pid: int) -> None:
    """The mappings ``/proc/PID/maps`` has when sampling starts, and the vDSO's bytes."""
    try:
        mappings = read_maps(str(pid))
    except OSError as error:
        raise TargetError(f"cannot read the mappings of process {pid}: {error.strerror}") from None
    # /proc prints paths as we see them; the files are opened inside the process's root,
    # and mmap records name them as the process sees them (a chroot's own paths).
    try:
        root = os.readlink(f"/proc/{pid}/root").rstrip("/")
    except OSError:
        root = ""
    for mapping in mappings:
        path = mapping.path
        if root and path.startswith(root + "/"):
            path = path[len(root) :]
        process.map(
            mapping.start,
            mapping.end,
            mapping.offset,
            path,
            prot=_prot(mapping),
            inode=mapping.inode,
        )
        if mapping.path == "[vdso]":
            # Read while the process runs (process_vm_readv stops nothing); it never changes.
            # Unreadable, the vDSO's code is not walked through: its frames say so.
            with contextlib.suppress(OSError):
                process.vdso = read_remote(pid, [(mapping.start, mapping.end - mapping.start)])[0]


def _prot(mapping: Mapping) -> int:
    return (
        (_PROT_READ if mapping.readable else 0)
        | (_PROT_WRITE if mapping.writable else 0)
        | (_PROT_EXEC if mapping.executable else 0)
    )


def _notes(
    profile: Profile,
    recorder: Recorder,
    replay: SampleReplay,
    others: int,
    stack_size: int,
    options: BacktraceOptions,
    undecoded: int,
) -> None:
    """What the reader of an on-CPU profile must know: its clock, what was lost or cut."""
    notes = [
        f"on-CPU samples: the kernel's CPU clock, {profile.rate_asked:g} a second of each "
        f"thread's CPU time in user space (threads asleep or in the kernel are not sampled); "
        f"{stack_size} bytes of stack copied per sample (--stack-size)"
    ]
    if replay.lost:
        notes.append(
            f"{replay.lost} samples were lost: the kernel's buffers were full "
            "(unwinding fell behind; a lower --rate keeps up)"
        )
    if replay.without_registers:
        notes.append(f"{replay.without_registers} samples held no 64-bit user registers")
    if recorder.corrupt or undecoded:
        notes.append(
            f"{recorder.corrupt} bytes and {undecoded} records of the kernel's buffers "
            "made no sense and were skipped"
        )
    if others:
        notes.append(f"{others} samples of child processes were left out")
    cut = profile.incomplete_reasons[StopReason.UNREADABLE_MEMORY.value]
    if cut:
        notes.append(
            f"{cut} walks needed memory the sample does not hold (beyond the {stack_size} "
            "bytes of stack copied, or data the kernel does not copy): a larger --stack-size "
            "copies more"
        )
    process = replay.process(profile.pid)
    mappings = process.mappings()
    python = any("python" in mapping.path.rsplit("/", 1)[-1].lower() for mapping in mappings)
    if python and (options.python or not len(replay.perf_map)):
        how = (
            " (--python reads its frames only in the wall-clock mode)"
            if options.python
            else " without -X perf"
        )
        notes.append(PYTHON_NOTE.format(pid=profile.pid, how=how))
    notes += replay.problems
    # Files of code only: a data file mapped read-only (a locale archive) is no ELF file.
    code = {mapping.path for mapping in mappings if mapping.executable}
    files = replay.files.problems if isinstance(replay.files, RootFiles) else []
    notes += [problem for problem in files if problem.partition(": ")[0] in code]
    profile.note(notes)
