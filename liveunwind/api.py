"""The public entry points: one call from a target to a finished Backtrace."""

from __future__ import annotations

import time
from collections.abc import Sequence

from liveunwind.frames import Backtrace
from liveunwind.stepper import AUTO_UNWINDERS, DEFAULT_MAX_FRAMES, Stepper, unwind_all
from liveunwind.targets.base import AddressSpace


def attach(
    pid: int,
    *,
    threads: Sequence[int] | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
    unwinders: Sequence[str] = AUTO_UNWINDERS,
    symbols: bool = True,
    snapshot: bool = True,
    stack_cap: int | None = None,
    verbose: bool = False,
) -> Backtrace:
    """Stops the live process ``pid``, walks the stacks of its threads, and lets it go.

    With ``snapshot`` (the default) the process is stopped only while its
    registers and live stacks are copied, and the walk runs on the copy;
    without it the process stays stopped for the whole walk.  Either way it
    is running again (or still stopped, if it was) before this returns.
    """
    from liveunwind.targets.ptrace import PtraceProcess
    from liveunwind.targets.snapshot import DEFAULT_STACK_CAP, Snapshot

    timings: dict[str, float] = {}
    started = time.perf_counter()
    process = PtraceProcess(pid, thread_ids=list(threads) if threads else None)
    with process:
        stopped = time.perf_counter()
        timings["attach"] = stopped - started
        if snapshot:
            space: AddressSpace = Snapshot.capture(
                process, stack_cap=stack_cap or DEFAULT_STACK_CAP
            )
            timings["copy"] = time.perf_counter() - stopped
        else:
            space = process
            backtrace = _walk(space, max_frames, unwinders, symbols, verbose, timings, process)
        detaching = time.perf_counter()
    resumed = process.resumed_at or time.perf_counter()
    timings["detach"] = resumed - detaching
    timings["freeze"] = resumed - (process.stopped_at or stopped)
    if snapshot:
        backtrace = _walk(space, max_frames, unwinders, symbols, verbose, timings, process)
    timings["total"] = time.perf_counter() - started
    return backtrace


def open_core(
    core: str,
    executable: str | None = None,
    *,
    sysroot: str | None = None,
    search_path: Sequence[str] = (),
    max_frames: int = DEFAULT_MAX_FRAMES,
    unwinders: Sequence[str] = AUTO_UNWINDERS,
    symbols: bool = True,
    verbose: bool = False,
) -> Backtrace:
    """Backtraces of every thread recorded in a core file (ELF; Mach-O once supported).

    The thread that received the fatal signal comes first.  Files the core
    refers to are found by their recorded path, the same path under
    ``sysroot``, by name along ``search_path``, and by build-id.
    """
    from liveunwind.targets.elfcore import ElfCore

    started = time.perf_counter()
    space = ElfCore.open(core, executable, sysroot=sysroot, search_path=search_path)
    timings = {"open": time.perf_counter() - started}
    backtrace = _walk(space, max_frames, unwinders, symbols, verbose, timings, None)
    backtrace.crash = space.crash_info()
    backtrace.problems = sorted({*backtrace.problems, *space.problems})
    timings["total"] = time.perf_counter() - started
    return backtrace


def _walk(
    space: AddressSpace,
    max_frames: int,
    unwinders: Sequence[str],
    symbols: bool,
    verbose: bool,
    timings: dict[str, float],
    process: object,
) -> Backtrace:
    """Unwinds and symbolizes every thread of ``space``."""
    from liveunwind.modules.modulemap import ModuleMap

    started = time.perf_counter()
    modules = ModuleMap(space)
    stepper = Stepper(
        space,
        modules,
        unwinders=unwinders,
        max_frames=max_frames,
        should_stop=lambda: getattr(process, "interrupted", False),
        verbose=verbose,
    )
    traces = unwind_all(space, space.threads(), stepper)
    unwound = time.perf_counter()
    timings["unwind"] = unwound - started
    if symbols:
        from liveunwind.symbolizer import symbolize

        symbolize(traces, modules)
        timings["symbolize"] = time.perf_counter() - unwound
    problems = sorted({problem for module in modules.modules for problem in module.problems})
    return Backtrace(
        pid=space.pid, threads=traces, arch=space.arch.name, problems=problems, timings=timings
    )
