"""The public entry points: one call from a target to a finished Backtrace."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

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
    debug_dirs: Sequence[str] = (),
) -> Backtrace:
    """Stops the live process ``pid``, walks the stacks of its threads, and lets it go.

    With ``snapshot`` (the default) the process is stopped only while its
    registers and live stacks are copied, and the walk runs on the copy;
    without it the process stays stopped for the whole walk.  Either way it
    is running again (or still stopped, if it was) before this returns.
    """
    from liveunwind.targets.procfs import read_perf_map
    from liveunwind.targets.ptrace import PtraceProcess
    from liveunwind.targets.snapshot import DEFAULT_STACK_CAP, Snapshot

    options = WalkOptions(max_frames, tuple(unwinders), symbols, verbose, tuple(debug_dirs))
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
            backtrace = _walk(space, options, timings, process, read_perf_map(pid))
        detaching = time.perf_counter()
    resumed = process.resumed_at or time.perf_counter()
    timings["detach"] = resumed - detaching
    timings["freeze"] = resumed - (process.stopped_at or stopped)
    if snapshot:
        backtrace = _walk(space, options, timings, process, read_perf_map(pid))
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
    debug_dirs: Sequence[str] = (),
) -> Backtrace:
    """Backtraces of every thread recorded in a core file (ELF; Mach-O once supported).

    The thread that received the fatal signal comes first.  Files the core
    refers to are found by their recorded path, the same path under
    ``sysroot``, by name along ``search_path``, and by build-id.
    """
    options = WalkOptions(max_frames, tuple(unwinders), symbols, verbose, tuple(debug_dirs))
    started = time.perf_counter()
    if _is_mach_o_core(core):
        from liveunwind.targets.machocore import MachOCore

        with MachOCore(core, tuple(search_path)) as mach_o:
            backtrace = _walk(mach_o, options, {"open": time.perf_counter() - started}, None)
        backtrace.timings["total"] = time.perf_counter() - started
        return backtrace
    from liveunwind.targets.elfcore import ElfCore

    with ElfCore.open(core, executable, sysroot=sysroot, search_path=search_path) as space:
        timings = {"open": time.perf_counter() - started}
        backtrace = _walk(space, options, timings, None)
        backtrace.crash = space.crash_info()
        backtrace.problems = sorted({*backtrace.problems, *space.problems})
    timings["total"] = time.perf_counter() - started
    return backtrace


def _is_mach_o_core(path: str) -> bool:
    """A 64-bit little-endian Mach-O file of type MH_CORE (compressed cores are ELF here)."""
    try:
        with open(path, "rb") as stream:
            header = stream.read(16)
    except OSError:
        return False  # ElfCore.open reports the problem in its words
    return header[:4] == b"\xcf\xfa\xed\xfe" and header[12:16] == b"\x04\x00\x00\x00"


@dataclass(frozen=True)
class WalkOptions:
    """How to walk and name the frames of a target (the options every command shares)."""

    max_frames: int = DEFAULT_MAX_FRAMES
    unwinders: Sequence[str] = AUTO_UNWINDERS
    symbols: bool = True
    verbose: bool = False
    #: Separate debug files are looked for here, then in the default folders.
    debug_dirs: Sequence[str] = ()


def _walk(
    space: AddressSpace,
    options: WalkOptions,
    timings: dict[str, float],
    process: object,
    perf_map: str = "",
) -> Backtrace:
    """Unwinds and symbolizes every thread of ``space``."""
    from liveunwind.modules.debuginfo import DEFAULT_DEBUG_DIRS
    from liveunwind.modules.modulemap import ModuleMap

    started = time.perf_counter()
    debug_dirs = (*options.debug_dirs, *DEFAULT_DEBUG_DIRS)
    modules = ModuleMap(space, debug_dirs=debug_dirs, perf_map=perf_map)
    stepper = Stepper(
        space,
        modules,
        unwinders=options.unwinders,
        max_frames=options.max_frames,
        should_stop=lambda: getattr(process, "interrupted", False),
        verbose=options.verbose,
    )
    traces = unwind_all(space, space.threads(), stepper)
    unwound = time.perf_counter()
    timings["unwind"] = unwound - started
    if options.symbols:
        from liveunwind.symbolizer import symbolize

        symbolize(traces, modules)
        timings["symbolize"] = time.perf_counter() - unwound
    problems = sorted({problem for module in modules.modules for problem in module.problems})
    return Backtrace(
        pid=space.pid, threads=traces, arch=space.arch.name, problems=problems, timings=timings
    )
