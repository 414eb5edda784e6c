"""``gdb_remote()``: the backtrace of a process behind a GDB remote stub.

The stub keeps the target stopped while the backtrace reads its stacks (a stub
reads memory only of a stopped target), then the target runs on; see
:mod:`liveunwind.targets.remote.gdbremote` for how it is stopped and let go.
"""

from __future__ import annotations

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import chosen
from liveunwind.backtrace.phases import Phases
from liveunwind.errors import UsageError
from liveunwind.targets.remote.connection import DEFAULT_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.frames import Backtrace


def gdb_remote(
    address: str,
    executable: str | None = None,
    *,
    sysroot: str | None = None,
    search_path: Sequence[str] = (),
    after: float | None = None,
    attach: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    stats: dict[str, int] | None = None,
    options: BacktraceOptions | None = None,
    **keywords: Any,
) -> Backtrace:
    """Backtraces of every thread of the process behind the stub at ``address`` (``HOST:PORT``).

    ``executable`` is the program's file on this machine when the stub does
    not name it or names a path that is not here; ``sysroot`` and
    ``search_path`` find its libraries.  ``after`` lets the target run that
    many seconds before it is interrupted; ``attach`` makes a ``gdbserver
    --multi`` attach to that process first.  Every wait for the stub is
    bounded by ``timeout`` seconds.  ``stats``, if given, receives the
    protocol round trips and bytes received.  ``options`` (or each as a
    keyword of its own) say how to walk and name the stacks: ``python`` gives
    each frame of CPython's eval loop the Python frames it runs, read through
    the stub while the target is stopped.
    """
    from liveunwind.targets.remote.gdbremote import GdbRemote

    host, port = parse_address(address)
    asked = chosen(options, keywords)
    phases = Phases()
    stopping = phases.timed("stop")
    target = GdbRemote(
        host,
        port,
        executable=executable,
        sysroot=sysroot,
        search_path=tuple(search_path),
        timeout=timeout,
        after=after,
        attach=attach,
    )
    try:
        with target:
            stopping.stop()
            backtrace = Backtracer(asked).backtrace(target, phases.seconds)
            backtrace.problems = sorted({*backtrace.problems, *target.problems})
            if asked.verbose:
                backtrace.problems += target.matches
                if target.stopped_how:
                    backtrace.problems.append(f"the target was {target.stopped_how}")
    finally:
        if stats is not None:
            stats.update(target.stats)
    if target.stopped_at is not None and target.resumed_at is not None:
        phases.add("freeze", target.resumed_at - target.stopped_at)
    phases.total()
    return backtrace


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` (this machine), optionally after ``tcp:``."""
    text = address.removeprefix("tcp:")
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        port_text = rest[1:] if bracket and rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"not a HOST:PORT address: {address!r}")
    return host or "localhost", int(port_text)
