"""liveunwind: native backtraces of Linux processes, core dumps and the calling process.

``attach(pid)`` returns a :class:`Backtrace` of every thread of a live
process, ``open_core(path)`` of every thread recorded in a core file;
a :class:`Session` takes many backtraces of one process with warm caches.
Every entry point takes ``options=BacktraceOptions(...)`` (or each option
as a keyword of its own) for how to walk and name the stacks.
Names are imported lazily so that ``import liveunwind`` stays cheap.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from liveunwind.backtrace.api import attach, open_core
    from liveunwind.backtrace.local import local_backtrace
    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.remote import gdb_remote
    from liveunwind.backtrace.session import Session
    from liveunwind.frames import Backtrace, Frame, ThreadBacktrace

__all__ = [
    "Backtrace",
    "BacktraceOptions",
    "Frame",
    "Session",
    "ThreadBacktrace",
    "attach",
    "gdb_remote",
    "local_backtrace",
    "open_core",
]

_EXPORTS = {
    "attach": "liveunwind.backtrace.api",
    "open_core": "liveunwind.backtrace.api",
    "Session": "liveunwind.backtrace.session",
    "local_backtrace": "liveunwind.backtrace.local",
    "gdb_remote": "liveunwind.backtrace.remote",
    "BacktraceOptions": "liveunwind.backtrace.options",
    "Backtrace": "liveunwind.frames",
    "Frame": "liveunwind.frames",
    "ThreadBacktrace": "liveunwind.frames",
}


def _end_quietly_while_starting() -> None:
    """Run as the command, SIGINT or SIGTERM before it is ready ends it at once and silently.

    This package is the first of liveunwind's code the command runs (``python
    -m liveunwind`` imports it first; the ``liveunwind`` script imports
    ``liveunwind.cli`` through it).  Until the command installs its own
    handlers (``cli.run``) nothing is held and nothing written, so exiting
    on the spot, 128 + the signal's number as shells report it, is all there
    is to do — where a KeyboardInterrupt in the middle of an import would
    print a traceback.  Imported as a library, nothing changes.
    """
    if not _run_as_the_command():
        return
    # Python loaded _signal (the C module under signal.py) before any of this:
    # taking it is a lookup, where importing signal.py would be half a
    # millisecond of import machinery a Ctrl-C could still land in.
    signals = sys.modules.get("_signal") or __import__("signal")

    def end(signum: int, _frame: object) -> None:
        os._exit(128 + signum)

    for signum in (signals.SIGINT, signals.SIGTERM):
        signals.signal(signum, end)


def _run_as_the_command() -> bool:
    """Whether Python was started as ``python -m liveunwind`` or as the ``liveunwind`` script."""
    arguments = sys.orig_argv
    if "-m" in arguments[:-1]:
        return arguments[arguments.index("-m") + 1] == "liveunwind"
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "liveunwind"


_end_quietly_while_starting()


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'liveunwind' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
