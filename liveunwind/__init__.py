"""liveunwind: native backtraces of Linux processes, core dumps and the calling process.

``attach(pid)`` returns a :class:`Backtrace` of every thread of a live
process, ``open_core(path)`` of every thread recorded in a core file;
a :class:`Session` takes many backtraces of one process with warm caches.
Every entry point takes ``options=BacktraceOptions(...)`` (or each option
as a keyword of its own) for how to walk and name the stacks.
Names are imported lazily so that ``import liveunwind`` stays cheap.
"""

from __future__ import annotations

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


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'liveunwind' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
