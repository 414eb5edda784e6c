"""The public entry points: one call from a target to a finished Backtrace."""

from __future__ import annotations

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import chosen
from liveunwind.backtrace.phases import Phases

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.frames import Backtrace


def attach(
    pid: int,
    *,
    threads: Sequence[int] | None = None,
    snapshot: bool = True,
    stack_cap: int | None = None,
    total_cap: int | None = None,
    stop_timeout: float | None = None,
    options: BacktraceOptions | None = None,
    **keywords: Any,
) -> Backtrace:
    """Stops the live process ``pid``, walks the stacks of its threads, and lets it go.

    With ``snapshot`` (the default) the process is stopped only while its
    registers and live stacks are copied, and the unwinding runs on the copy;
    without it the process stays stopped for the whole backtrace.  Either way it
    is running again (or still stopped, if it was) before this returns.
    Each thread's stack copy holds at most ``stack_cap`` bytes (16 MiB) and
    all of them together ``total_cap`` (256 MiB); what the caps cut is in the
    backtrace's problems.  A thread that has not stopped ``stop_timeout``
    seconds (0.5) after being asked is let go and reported with
    ``StopReason.NOT_STOPPED``.  ``options`` say how to walk and name the
    stacks, and each may also be given as a keyword of its own: ``lines``
    gives each frame its source file, line and inlined calls; ``python``
    gives each frame of CPython's eval loop the Python frames it runs
    (``Frame.python``), read while the process is stopped.
    """
    from liveunwind.backtrace.session import Session

    session = Session(
        pid,
        threads=threads,
        snapshot=snapshot,
        stack_cap=stack_cap,
        total_cap=total_cap,
        stop_timeout=stop_timeout,
        options=options,
        **keywords,
    )
    return session.backtrace()


def open_core(
    core: str,
    executable: str | None = None,
    *,
    sysroot: str | None = None,
    search_path: Sequence[str] = (),
    options: BacktraceOptions | None = None,
    shared: SharedFiles | None = None,
    **keywords: Any,
) -> Backtrace:
    """Backtraces of every thread recorded in a core file (ELF or Mach-O).

    The thread that received the fatal signal comes first.  Files the core
    refers to are found by their recorded path, the same path under
    ``sysroot``, by name along ``search_path``, and by build-id.  ``options``
    (or each as a keyword of its own) say how to walk and name the stacks:
    ``lines`` gives each frame its source file, line and inlined calls;
    ``python`` the Python frames each frame of CPython's eval loop runs.
    ``shared`` (``SharedFiles(by_path=True)``): what cores before this one
    read of their files, used here and added to (a run over many ELF cores).
    """
    asked = chosen(options, keywords)
    phases = Phases()
    opening = phases.timed("open")
    if _is_mach_o_core(core):
        from liveunwind.targets.cores.machocore import MachOCore

        with MachOCore(core, tuple(search_path)) as mach_o:
            opening.stop()
            backtrace = Backtracer(asked).backtrace(mach_o, phases.seconds)
        phases.total()
        return backtrace
    from liveunwind.targets.cores.elfcore import ElfCore

    with ElfCore.open(core, executable, sysroot=sysroot, search_path=search_path) as space:
        opening.stop()
        backtracer = Backtracer(asked, shared=shared)
        backtrace = backtracer.backtrace(space, phases.seconds)
        if shared is not None:
            shared.keep(backtracer.modules)
        backtrace.crash = space.crash_info()
        backtrace.problems = sorted({*backtrace.problems, *space.problems})
        if asked.verbose:  # which file stands for each recorded path that is not here
            backtrace.problems += space.matches
    phases.total()
    return backtrace


def _is_mach_o_core(path: str) -> bool:
    """A 64-bit little-endian Mach-O file of type MH_CORE (compressed cores are ELF here).

    Only a regular file is looked at (a FIFO would block the read, a device
    would be opened); anything else is for ElfCore.open to refuse in its words.
    """
    from liveunwind.targets.files import FileError, open_file

    try:
        with open_file(path) as file:
            header = file.read(16)
    except FileError:
        return False
    return header[:4] == b"\xcf\xfa\xed\xfe" and header[12:16] == b"\x04\x00\x00\x00"
