"""``liveunwind profile``: sample a process, then report where its threads spent their time.

The report opens with the threads sorted by CPU (the kernel's count, not
the samples'), then the stacks most often seen running.  ``--json`` prints
the same as one document (``schemas/profile.schema.json``);
``--collapsed-out`` and ``--svg`` write the folded stacks and the flame
graph, ``--pprof`` and ``--speedscope`` the profile for pprof and
speedscope (liveunwind/cli/pprof.py, speedscope.py), each whole or not at
all.  Threads are counted by name (a
thread-per-request server's threads under one name), ``--per-thread``
keeps them apart by tid.  Ctrl-C (or SIGTERM, as ``timeout`` sends) ends
sampling early and everything is still written; a second one while the
files are written ends liveunwind (130 or 143) and leaves no file half
written.  While sampling, one line of progress is kept
up to date on stderr when stderr is a terminal.
"""

from __future__ import annotations

import gc
import signal
import sys
import time

from liveunwind.backtrace.profile import (
    END_DURATION,
    MAX_FRAMES,
    MAX_NAMES,
    MAX_RATE,
    MAX_STACKS,
    OVERFLOW,
    record,
)
from liveunwind.cli.output import AtomicFile, emit
from liveunwind.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType, SimpleNamespace
    from typing import Any

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.profile import Profile, ThreadProfile

#: The shape of the ``profile --json`` document and the ``$id`` of its schema;
#: any change of shape raises the version (the schema is closed).
SCHEMA_VERSION = 3
SCHEMA_ID = "urn:liveunwind:profile:3"
#: Stacks in the text summary, and frames shown of each (innermost first).
HOTTEST = 10
SHOWN_FRAMES = 8
#: Seconds between two redraws of the progress line.
PROGRESS_EVERY = 0.2
#: The cyclic garbage collector's first threshold while the wall clock is sampled
#: (Python's is 700).  A sample makes about a thousand objects (a frame and its
#: list of notes per frame, none in a cycle) and drops them at the next, and 700
#: set the collector off every second sample to scan what the sample still held,
#: and now and then every object kept: 56 ms of the 0.7 s of CPU of 500 samples
#: of bench/target.c's 9 threads, 14 ms with this.  Cyclic garbage is still
#: collected, once this many more objects are alive than at the last collection.
SAMPLING_GC_THRESHOLD = 10_000


def parse_rate(text: str) -> float:
    """``--rate``: samples per second, more than 0 and at most MAX_RATE."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number of samples per second: {text!r}") from None
    if not 0 < value <= MAX_RATE:
        raise ValueError(f"must be more than 0 and at most {MAX_RATE:g}")
    return value


def profile_command(arguments: SimpleNamespace, options: BacktraceOptions) -> int:
    """Samples ``arguments.pid``, writes the requested files and prints the report.

    Exit status as for ``pid``: 0 if every walk of every sample reached the
    end of its stack, 1 if some ended early.  The files are written whole or
    not at all (:class:`~liveunwind.cli.output.AtomicFile`).
    """
    progress = _Progress(arguments.pid, arguments.duration) if sys.stderr.isatty() else None
    outputs = open_outputs(arguments)
    try:
        try:
            with _StopRequest() as stop:
                profile = _sample(
                    arguments,
                    options,
                    should_stop=stop.requested,
                    on_sample=progress.update if progress is not None else None,
                )
        finally:
            if progress is not None:
                progress.finish()
    except BaseException:
        for output in outputs.values():
            output.discard()
        raise
    return deliver(profile, arguments, outputs)


def deliver(profile: Profile, arguments: SimpleNamespace, outputs: dict[str, AtomicFile]) -> int:
    """Writes the files ``outputs`` were opened for and prints the report (text or JSON).

    Every source of a :class:`~liveunwind.backtrace.profile.Profile` (the
    sampling of ``profile``, the samples of ``perf``) ends here.  Returns
    the exit status: 0 if every walk reached the end of its stack, else 1.
    """
    try:
        if "folded" in outputs:
            outputs["folded"].commit(format_folded(profile, merge=arguments.merge))
        if "svg" in outputs:
            outputs["svg"].commit(render_svg(profile, merge=arguments.merge))
        if "pprof" in outputs:
            outputs["pprof"].commit(render_pprof(profile, lines=arguments.lines))
        if "speedscope" in outputs:
            outputs["speedscope"].commit(render_speedscope(profile))
    finally:  # interrupted, or an output failed: no temporary file is left behind
        for output in outputs.values():
            output.discard()
    if arguments.json:
        emit(format_json(profile))
    else:
        written = {kind: output.path for kind, output in outputs.items()}
        emit(format_text(profile, written))
    if arguments.stats:
        print(f"liveunwind: stats: {format_stats(profile)}", file=sys.stderr)
    return 0 if not profile.incomplete else 1


def _sample(
    arguments: SimpleNamespace,
    options: BacktraceOptions,
    *,
    should_stop: Callable[[], bool],
    on_sample: Callable[[Profile, float], None] | None,
) -> Profile:
    """The profile, by the wall clock (stopping the process) or the kernel's (``--on-cpu``)."""
    if arguments.on_cpu:
        from liveunwind.backtrace.oncpu import record_on_cpu

        if arguments.threads:
            raise UsageError("profile: --threads is not taken with --on-cpu (every thread is)")
        return record_on_cpu(
            arguments.pid,
            options,
            rate=arguments.rate,
            duration=arguments.duration,
            stack_size=arguments.stack_size,
            per_thread=arguments.per_thread,
            should_stop=should_stop,
            on_sample=on_sample,
        )
    from liveunwind.backtrace.session import Session

    session = Session(arguments.pid, threads=arguments.threads, options=options, counts_stacks=True)
    thresholds = gc.get_threshold()
    gc.set_threshold(SAMPLING_GC_THRESHOLD, *thresholds[1:])
    try:
        return record(
            session,
            rate=arguments.rate,
            duration=arguments.duration,
            per_thread=arguments.per_thread,
            should_stop=should_stop,
            on_sample=on_sample,
        )
    finally:
        gc.set_threshold(*thresholds)


def open_outputs(arguments: SimpleNamespace) -> dict[str, AtomicFile]:
    """The output files asked for, begun before sampling: a path that cannot be written fails
    at once."""
    paths = {
        "folded": arguments.collapsed_out,
        "svg": arguments.svg,
        "pprof": arguments.pprof,
        "speedscope": arguments.speedscope,
    }
    outputs: dict[str, AtomicFile] = {}
    try:
        for kind, path in paths.items():
            if path is not None:
                outputs[kind] = AtomicFile(path)
    except BaseException:
        for output in outputs.values():
            output.discard()
        raise
    return outputs


class _StopRequest:
    """Inside ``with``: SIGINT and SIGTERM ask sampling to end instead of ending liveunwind."""

    def __init__(self) -> None:
        self._requested = False
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        return self._requested

    def _ask(self, signum: int, frame: FrameType | None) -> None:
        self._requested = True

    def __enter__(self) -> _StopRequest:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._ask)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class _Progress:
    """One line on stderr, redrawn in place: elapsed time, samples, achieved rate."""

    def __init__(self, pid: int, duration: float | None) -> None:
        self._pid = pid
        self._of = f"/{duration:g}" if duration is not None else ""
        self._drawn = 0.0
        self._shown = False

    def update(self, profile: Profile, elapsed: float) -> None:
        now = time.perf_counter()
        if now - self._drawn < PROGRESS_EVERY:
            return
        self._drawn = now
        rate = profile.samples / elapsed if elapsed > 0 else 0.0
        sys.stderr.write(
            f"\r\x1b[Kprofiling {self._pid}: {elapsed:.1f}{self._of} s, "
            f"{profile.samples} samples, {rate:.1f} Hz (Ctrl-C to stop)"
        )
        sys.stderr.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


# -- the outputs ---------------------------------------------------------------------


def format_folded(profile: Profile, *, merge: bool = False) -> str:
    """Folded stacks, ``thread;outer;…;inner count`` (no thread with ``merge``), sorted."""
    counts = profile.folded(merge=merge)
    return "".join(f"{';'.join(stack)} {count}\n" for stack, count in sorted(counts.items()))


def render_svg(profile: Profile, *, merge: bool = False) -> str:
    from liveunwind.cli.flamegraph import render

    towers = "all threads merged" if merge else _towers(profile)
    return render(
        profile.folded(merge=merge),
        title=_title(profile),
        subtitle=f"{_summary(profile)}; {towers}",
        threads=not merge,
    )


def _title(profile: Profile) -> str:
    name = f" ({profile.main_name})" if profile.main_name else ""
    return f"liveunwind profile of process {profile.pid}{name}"


def render_pprof(profile: Profile, *, lines: bool = False) -> bytes:
    """The gzipped pprof file; its comments are the title, the summary and the notes."""
    from liveunwind.cli.pprof import render

    comments = (_title(profile), _summary(profile), *_notes(profile))
    return render(profile, lines=lines, comments=comments)


def render_speedscope(profile: Profile) -> str:
    from liveunwind.cli.speedscope import render

    return render(profile, title=f"{_title(profile)}: {_summary(profile)}", exporter="liveunwind")


def _towers(profile: Profile) -> str:
    return "one tower per thread" if profile.per_thread else "one tower per thread name"


def _summary(profile: Profile) -> str:
    return (
        f"{profile.samples} samples in {profile.duration:.2f} s at {profile.rate:.1f} Hz "
        f"({profile.rate_asked:g} Hz asked)"
    )


def format_text(profile: Profile, written: dict[str, str]) -> str:
    cpu = "" if profile.cpu_percent is None else f"; CPU {profile.cpu_percent:.1f} %"
    lines = [f"Process {profile.pid}: {_summary(profile)}{cpu}"]
    if profile.end != END_DURATION:
        detail = f": {profile.end_detail}" if profile.end_detail else ""
        lines.append(f"Sampling ended early ({profile.end}{detail}).")
    lines += ["", *_thread_table(profile.by_cpu(), profile)]
    hottest = profile.hottest(HOTTEST)
    lines += ["", "Hottest stacks (samples in which the thread was running or ready to run):"]
    if not hottest:
        lines.append("  no thread was seen running")
    for thread, stack, count in hottest:
        # Of the samples that held the thread (every thread of the name, for a name).
        share = 100.0 * count / max(thread.samples, 1)
        lines.append(f"  {share:5.1f} %  {count:6}  {thread.label}  {_shown_stack(stack)}")
    notes = _notes(profile)
    if notes:
        lines += ["", *notes]
    if written:
        lines.append("")
        names = {
            "folded": "Folded stacks",
            "svg": "Flame graph",
            "pprof": "pprof",
            "speedscope": "speedscope",
        }
        lines += [f"{names[kind]}: {path}" for kind, path in written.items()]
    return "\n".join(lines) + "\n"


def _thread_table(threads: list[ThreadProfile], profile: Profile) -> list[str]:
    width = min(max((len(thread.name) for thread in threads), default=4), 24)
    width = max(width, 4)
    tid_width = max((len(_tid_column(thread)) for thread in threads), default=3)
    tid_width = max(tid_width, 3)
    rows = [
        f"  {'TID':>{tid_width}}  {'NAME':<{width}}  {'CPU %':>6}  {'SAMPLES':>7}  TOP FUNCTION"
    ]
    for thread in threads:
        cpu = "?" if thread.cpu_percent is None else f"{thread.cpu_percent:.1f}"
        top = thread.top_function()
        where = ""
        if top is not None:
            function, count = top
            where = f"{_clip(function, 60)} ({100.0 * count / max(thread.samples, 1):.0f} %)"
        tid, name = _tid_column(thread), _clip(thread.name, width)
        rows.append(
            f"  {tid:>{tid_width}}  {name:<{width}}  {cpu:>6}  {thread.samples:>7}  {where}"
        )
    return rows


def _tid_column(thread: ThreadProfile) -> str:
    """The thread's tid, or how many threads of its name were counted together: ``×37``."""
    return str(thread.tid) if thread.thread_count <= 1 else f"×{thread.thread_count}"


def _shown_stack(stack: tuple[str, ...]) -> str:
    """Innermost first, as a backtrace reads: ``inner <- caller <- …``."""
    shown = " <- ".join(reversed(stack[-SHOWN_FRAMES:]))
    hidden = len(stack) - SHOWN_FRAMES
    return shown + (f" <- … {hidden} more" if hidden > 0 else "")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _notes(profile: Profile) -> list[str]:
    notes = []
    walks = sum(thread.samples for thread in profile.threads.values())
    if profile.incomplete:
        ended = "; ".join(
            f"{thread.label}: {thread.incomplete}"
            for thread in profile.by_cpu()
            if thread.incomplete
        )
        notes.append(f"note: {profile.incomplete} of {walks} walks ended early ({ended})")
        why = "; ".join(
            f"{reason}: {count}" for reason, count in profile.incomplete_reasons.most_common()
        )
        notes.append(f"note: why they ended early: {why}")
    notes += folding_notes(profile)
    if profile.missed:
        notes.append(
            f"note: {profile.missed} samples were not taken: sampling fell behind the schedule"
        )
    notes += [f"note: {problem}" for problem in profile.problems]
    return notes


def folding_notes(profile: Profile) -> list[str]:
    """What was counted together to bound memory: stacks beyond the bound, threads by name."""
    notes = []
    if profile.overflowed:
        notes.append(
            f"note: {profile.overflowed} samples had a stack beyond those kept (at most "
            f"{MAX_STACKS:,} stacks, {MAX_FRAMES:,} frames, {MAX_NAMES:,} names); they are "
            f"counted under {OVERFLOW[0]}"
        )
    if profile.threads_folded:
        how = (
            f"{profile.threads_by_name} beyond the threads kept apart"
            if profile.per_thread
            else "--per-thread keeps them apart"
        )
        notes.append(
            f"note: {profile.threads_seen} threads were seen; {profile.threads_folded} were "
            f"counted together with another of their name ({how})"
        )
    return notes


def to_json_document(profile: Profile) -> dict[str, Any]:
    threads = profile.by_cpu()
    stacks = [
        (thread, stack, count) for thread in threads for stack, count in thread.stacks.items()
    ]
    stacks.sort(key=lambda entry: (-entry[2], entry[0].tid, entry[1]))
    return {
        "$schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "source": profile.source,
        "pid": profile.pid,
        "rate_asked": profile.rate_asked,
        "rate": profile.rate,
        "samples": profile.samples,
        "missed": profile.missed,
        "duration": profile.duration,
        "end": profile.end,
        "end_detail": profile.end_detail,
        "cpu_percent": profile.cpu_percent,
        "incomplete": profile.incomplete,
        "incomplete_reasons": dict(profile.incomplete_reasons.most_common()),
        "problems": profile.problems,
        "per_thread": profile.per_thread,
        "threads_seen": profile.threads_seen,
        "threads_folded": profile.threads_folded,
        "stacks_kept": profile.distinct,
        "stacks_overflowed": profile.overflowed,
        "threads": [
            {
                "tid": thread.tid,
                "name": thread.name,
                "thread_count": thread.thread_count,
                "cpu_percent": thread.cpu_percent,
                "samples": thread.samples,
                "running": thread.running,
                "incomplete": thread.incomplete,
                "top_function": None if (top := thread.top_function()) is None else top[0],
            }
            for thread in threads
        ],
        "stacks": [
            {
                "tid": thread.tid,
                "frames": list(reversed(stack)),
                "samples": count,
                "running": thread.running_stacks.get(stack, 0),
            }
            for thread, stack, count in stacks
        ],
    }


def format_json(profile: Profile) -> str:
    import json

    return json.dumps(to_json_document(profile), indent=2) + "\n"


def format_stats(profile: Profile) -> str:
    """Per phase of a sample: the mean and the longest, in milliseconds."""
    samples = max(profile.samples, 1)
    return ", ".join(
        f"{phase} {total / samples * 1000:.2f} ms (max {longest * 1000:.2f})"
        for phase, (total, longest) in profile.timings.items()
    )
