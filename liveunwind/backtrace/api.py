"""The public entry points: one call from a target to a finished Backtrace."""

from __future__ import annotations

from collections.abc import Sequence

from liveunwind.backtrace.backtracer import BacktraceOptions, Backtracer
from liveunwind.backtrace.phases import Phases
from liveunwind.frames import Backtrace
from liveunwind.unwinder.stepper import AUTO_UNWINDERS, DEFAULT_MAX_FRAMES


def attach(
    pid: int,
    *,
    threads: Sequence[int] | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
    unwinders: Sequence[str] = AUTO_UNWINDERS,
    symbols: bool = True,
    snapshot: bool = True,
    stack_cap: int | None = None,
    total_cap: int | None = None,
    stop_timeout: float | None = None,
    verbose: bool = False,
    debug_dirs: Sequence[str] = (),
    lines: bool = False,
    python: bool = False,
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
    ``StopReason.NOT_STOPPED``.  ``lines`` gives each frame its source file,
    line and inlined calls; ``python`` gives each frame of CPython's eval loop
    the Python frames it runs (``Frame.python``), read while the process is
    stopped.
    """
    from liveunwind.backtrace.session import Session

    options = BacktraceOptions(
        max_frames, tuple(unwinders), symbols, verbose, tuple(debug_dirs), lines, python
    )
    session = Session(
        pid,
        threads=threads,
        options=options,
        snapshot=snapshot,
        stack_cap=stack_cap,
        total_cap=total_cap,
        stop_timeout=stop_timeout,
    )
    return session.backtrace()


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
    lines: bool = False,
    python: bool = False,
) -> Backtrace:
    """Backtraces of every thread recorded in a core file (ELF; Mach-O once supported).

    The thread that received the fatal signal comes first.  Files the core
    refers to are found by their recorded path, the same path under
    ``sysroot``, by name along ``search_path``, and by build-id.  ``lines``
    gives each frame its source file, line and inlined calls; ``python`` the
    Python frames each frame of CPython's eval loop runs.
    """
    options = BacktraceOptions(
        max_frames, tuple(unwinders), symbols, verbose, tuple(debug_dirs), lines, python
    )
    phases = Phases()
    opening = phases.timed("open")
    if _is_mach_o_core(core):
        from liveunwind.targets.cores.machocore import MachOCore

        with MachOCore(core, tuple(search_path)) as mach_o:
            opening.stop()
            backtrace = Backtracer(options).backtrace(mach_o, phases.seconds)
        phases.total()
        return backtrace
    from liveunwind.targets.cores.elfcore import ElfCore

    with ElfCore.open(core, executable, sysroot=sysroot, search_path=search_path) as space:
        opening.stop()
        backtrace = Backtracer(options).backtrace(space, phases.seconds)
        backtrace.crash = space.crash_info()
        backtrace.problems = sorted({*backtrace.problems, *space.problems})
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
