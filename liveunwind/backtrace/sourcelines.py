"""Source lines for frames: the file, line and inlined calls of each pc, from DWARF (``--lines``).

Physical frames stay as the walk found them: a frame gets the file and line
of its own function and, innermost first, the logical frames of the calls
inlined into it at its pc.  Nothing here is imported without ``--lines``.

The work is spread around the walk and the naming of frames:
:func:`read_ahead_at_pcs`, before the walk, opens the DWARF of the modules
the threads are stopped in and, with a core to spare (:func:`spare_core`),
sets their compressed ``.debug_info`` inflating on a thread (and
``.debug_line`` after it); :func:`read_ahead`, after the walk, does so for
every module with frames and tells each thread how far to go; :func:`add_source_lines`, after
the names, looks the pcs up in the order their units lie in the section, so
that each lookup waits only for its own unit while a thread inflates the next.
"""

from __future__ import annotations

import gc
import os

from liveunwind.modules.lines import locate, read_ahead_pcs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import ParamSpec, TypeVar

    from liveunwind.frames import ThreadBacktrace
    from liveunwind.modules.module import Module
    from liveunwind.modules.modulemap import ModuleMap
    from liveunwind.targets.base import ThreadState

    #: Per module, its frames' (pc, exact) in the order to look them up.
    LookupOrder = list[tuple[Module, list[tuple[int, bool]]]]
    P = ParamSpec("P")
    R = TypeVar("R")


def _gc_paused(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` with the cyclic garbage collector paused while it runs.

    Reading DWARF allocates tens of thousands of small objects (tuples of
    .debug_aranges, rows of line tables), none in a cycle, and the
    collector's passes over them — 28 during a backtrace of testprogs/lines,
    against 14 without ``--lines`` — took 2 ms.
    """

    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        collecting = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if collecting:
                gc.enable()

    return paused


def spare_core() -> bool:
    """Whether a core is idle now: then compressed DWARF inflates on threads.

    The kernel's count of runnable tasks (/proc/loadavg), this one among
    them, against the CPUs this process may use.  On a busy machine the
    threads only add work (switching the GIL, ~4 ms more CPU for
    testprogs/lines) and hide none of it.
    """
    from liveunwind.targets.files import read_kernel_file

    try:
        running = int(read_kernel_file("/proc/loadavg").split()[3].split(b"/")[0])
        cpus = len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError):
        return False
    return running < cpus


@_gc_paused
def read_ahead_at_pcs(
    threads: list[ThreadState], modules: ModuleMap, pc_register: int, spare: bool
) -> None:
    """Starts reading the DWARF of the modules the threads are stopped in, before the walk.

    Frame 0 of most threads is in one library (libc, blocked in a system
    call): with a ``spare`` core its ``.debug_info`` inflates while the
    stacks are walked.
    """
    pcs: dict[int, tuple[Module, list[tuple[int, bool]]]] = {}
    for thread in threads:
        pc = thread.registers.get(pc_register) if thread.stopped else None
        module = None if pc is None else modules.find(pc)
        if pc is not None and module is not None:
            pcs.setdefault(id(module), (module, []))[1].append((pc, True))
    for module, frames in pcs.values():
        read_ahead_pcs(module, frames, spare)


@_gc_paused
def read_ahead(traces: list[ThreadBacktrace], modules: ModuleMap, spare: bool) -> LookupOrder:
    """Starts reading the DWARF of every module with frames (on threads with a ``spare``
    core); the order to look them up in."""
    pcs: dict[int, tuple[Module, list[tuple[int, bool]]]] = {}
    for thread in traces:
        for frame in thread.frames:
            module = modules.find(frame.lookup_pc)
            if module is not None:
                entry = pcs.setdefault(id(module), (module, []))
                entry[1].append((frame.pc, frame.exact_pc))
    return [(module, read_ahead_pcs(module, frames, spare)) for module, frames in pcs.values()]


@_gc_paused
def add_source_lines(
    traces: list[ThreadBacktrace], modules: ModuleMap, order: LookupOrder | None = None
) -> None:
    """Fills ``file``, ``line`` and ``inlined`` of every frame whose module has DWARF.

    ``order`` is what :func:`read_ahead` returned, if it was called: those
    lookups are made first, in that order (each module keeps the answers).
    """
    for module, frames in order or ():
        for pc, exact in frames:
            locate(module, pc, exact)
    for thread in traces:
        for frame in thread.frames:
            found = modules.find(frame.lookup_pc)
            if found is None:
                continue
            located = locate(found, frame.pc, frame.exact_pc)
            if located:
                frame.file, frame.line = located[-1].file, located[-1].line
                frame.inlined = tuple(located[:-1])
