"""``local_backtrace()``: the native backtrace of a thread of the calling process.

For a crash reporter, a hang watchdog or a test helper: the calling thread
(``thread=None``) or another thread of this process, unwound with the same
stepper, unwind tables and symbols as a ptrace target.  The thread is
sampled by a signal it handles itself (:mod:`liveunwind.targets.local.capture`),
so no ptrace is needed and it works under QEMU user mode too.

The calling thread cannot sample itself, so a short-lived helper thread
samples it while it waits for that helper: the calling thread's first frames
are that wait (a futex wait in the interpreter's lock), then the frames of
``local_backtrace`` and of its caller, down to ``_start``.  What was learned
about the process's modules is kept for the next call, as a session keeps it
for a live process: a watchdog's second backtrace costs a fraction of the first.
"""

from __future__ import annotations

import os
import threading

from liveunwind.backtrace.backtracer import Backtracer
from liveunwind.backtrace.options import chosen
from liveunwind.backtrace.phases import Phases
from liveunwind.errors import LiveUnwindError, UsageError
from liveunwind.targets.local.capture import DEFAULT_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.frames import Backtrace
    from liveunwind.targets.local.capture import ThreadSample


def local_backtrace(
    thread: threading.Thread | int | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    options: BacktraceOptions | None = None,
    **keywords: Any,
) -> Backtrace:
    """The backtrace of ``thread`` of this process: the caller's own by default.

    ``thread`` is a ``threading.Thread`` or a native thread id (as in
    ``/proc/self/task``).  A thread that does not take the sampling signal
    within ``timeout`` seconds (one that blocks signals) is a TargetError.
    ``options`` (or each as a keyword of its own) say how to walk and name
    the stack; Python frames (``python``) are not read here.
    """
    from liveunwind.targets.local.process import LocalProcess

    asked = chosen(options, keywords)
    if asked.python:
        raise UsageError("local_backtrace does not read Python frames (python=True)")
    phases = Phases()
    with phases.timed("sample"):
        tid, pthread_id = _identify(thread)
        if tid == threading.get_native_id():
            sampled = _sample_caller(tid, pthread_id, timeout)
        else:
            sampled = _sample(tid, pthread_id, timeout)
    with _backtracer_lock:
        backtracer = _backtracers.get(asked)
        if backtracer is None:
            _backtracers.clear()  # one set of options kept: a watchdog asks the same way
            backtracer = _backtracers[asked] = Backtracer(asked)
        backtrace = backtracer.backtrace(LocalProcess([sampled]), phases.seconds)
    phases.total()
    return backtrace


#: The backtracer of the last options, kept so the next local backtrace finds this
#: process's modules opened and parsed; its module map drops what was unmapped since.
_backtracers: dict[BacktraceOptions, Backtracer] = {}
_backtracer_lock = threading.Lock()


def _identify(thread: threading.Thread | int | None) -> tuple[int, int | None]:
    """The native id of ``thread`` and its ``pthread_t`` when the threading module knows it."""
    if thread is None:
        return threading.get_native_id(), threading.get_ident()
    if isinstance(thread, threading.Thread):
        if thread.native_id is None or not thread.is_alive():
            raise UsageError(f"{thread.name} is not running")
        return thread.native_id, thread.ident
    if isinstance(thread, bool) or not isinstance(thread, int) or thread <= 0:
        raise UsageError(f"not a thread: {thread!r}")
    if not os.path.isdir(f"/proc/self/task/{thread}"):
        raise UsageError(f"this process has no thread {thread}")
    known = [t.ident for t in threading.enumerate() if t.native_id == thread]
    return thread, known[0] if known else None


def _sample(tid: int, pthread_id: int | None, timeout: float) -> ThreadSample:
    from liveunwind.targets.local.process import sample

    return sample(tid, pthread_id, timeout=timeout)


def _sample_caller(tid: int, pthread_id: int | None, timeout: float) -> ThreadSample:
    """The calling thread, sampled by a helper thread while the caller waits for it."""
    result: list[ThreadSample] = []
    failure: list[LiveUnwindError] = []

    def run() -> None:
        try:
            result.append(_sample(tid, pthread_id, timeout))
        except LiveUnwindError as error:
            failure.append(error)

    helper = threading.Thread(target=run, name="liveunwind-sampler", daemon=True)
    helper.start()
    helper.join()
    if failure:
        raise failure[0]
    return result[0]
