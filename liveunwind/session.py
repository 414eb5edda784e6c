"""A live process watched over time: one backtrace, or many with warm caches.

Each backtrace stops the process only while its registers and live stacks
are copied (or, without the snapshot, for the whole walk); what liveunwind
learned about the process's files is kept for the next one.
"""

from __future__ import annotations

import time

from liveunwind.walker import Walker, WalkOptions

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from liveunwind.frames import Backtrace
    from liveunwind.targets.base import AddressSpace


class Session:
    """Backtraces of one live process; keeps module, rule and symbol caches between them."""

    def __init__(
        self,
        pid: int,
        *,
        threads: Sequence[int] | None = None,
        options: WalkOptions | None = None,
        snapshot: bool = True,
        stack_cap: int | None = None,
    ) -> None:
        self.pid = pid
        self.threads = list(threads) if threads else None
        self.snapshot = snapshot
        self.stack_cap = stack_cap
        self._walker = Walker(options or WalkOptions())

    def backtrace(self) -> Backtrace:
        """Stops the process, takes what the walk needs, lets it go, and walks.

        The process is running again (or still stopped, if it was) before
        this returns, whatever happens.
        """
        from liveunwind.targets.procfs import read_perf_map
        from liveunwind.targets.ptrace import PtraceProcess
        from liveunwind.targets.snapshot import DEFAULT_STACK_CAP, Snapshot

        timings: dict[str, float] = {}
        started = time.perf_counter()
        process = PtraceProcess(self.pid, thread_ids=self.threads)
        perf_map = read_perf_map(self.pid)
        with process:
            stopped = time.perf_counter()
            timings["attach"] = stopped - started
            if self.snapshot:
                space: AddressSpace = Snapshot.capture(
                    process, stack_cap=self.stack_cap or DEFAULT_STACK_CAP
                )
                timings["copy"] = time.perf_counter() - stopped
            else:
                backtrace = self._walker.walk(
                    process,
                    timings,
                    should_stop=lambda: process.interrupted,
                    perf_map=perf_map,
                )
            detaching = time.perf_counter()
        resumed = process.resumed_at or time.perf_counter()
        timings["detach"] = resumed - detaching
        timings["freeze"] = resumed - (process.stopped_at or stopped)
        if self.snapshot:
            backtrace = self._walker.walk(space, timings, perf_map=perf_map)
        timings["total"] = time.perf_counter() - started
        return backtrace
