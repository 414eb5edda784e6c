"""The kernel's samples of one process, drained until the time is up, it exits or we stop.

:class:`Recorder` opens the events (:mod:`.events`), maps one ring per CPU
(:mod:`.ring`), enables them, and then hands out batches of records as they
arrive: :meth:`Recorder.batches`.  Between two batches it waits in ``poll``
on the rings (readable once a quarter of a ring is written) and on a pidfd
of the process (readable when its last thread has exited), never longer
than DRAIN_EVERY, so a ring is emptied well before it fills at the highest
rate.  Whatever happens — the end, Ctrl-C, an error — :meth:`Recorder.close`
(``with``) disables the events, unmaps the rings and closes every
descriptor; the process never notices: it is never stopped, only sampled.

The records are handed out whole and undecoded (formats/perfevents.py
decodes them; LOST records say what the kernel dropped when a ring was full).
"""

from __future__ import annotations

import os
import select
import time

from liveunwind.arch import host_arch
from liveunwind.errors import NoSuchProcessError, TargetError
from liveunwind.targets.perfevent.events import (
    DEFAULT_STACK_SIZE,
    ProcessEvents,
    attr_bytes,
)
from liveunwind.targets.perfevent.ring import DEFAULT_DATA_PAGES, Ring

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: The longest wait between two drains of the rings (seconds).
DRAIN_EVERY = 0.05

#: Why recording ended.
END_DURATION = "duration"
END_STOPPED = "interrupted"
END_EXITED = "process exited"


class Recorder:
    """Samples of process ``pid`` on the CPU clock, ``rate`` a second per thread.

    ``regs_mask`` is the set of the architecture's perf register numbers each
    sample copies; ``stack_size`` the bytes of stack (a multiple of 8).
    """

    def __init__(
        self,
        pid: int,
        *,
        rate: int,
        regs_mask: int,
        stack_size: int = DEFAULT_STACK_SIZE,
        data_pages: int = DEFAULT_DATA_PAGES,
    ) -> None:
        arch = host_arch()
        if arch.perf_event_open is None:
            raise TargetError(f"profile --on-cpu does not know perf_event_open on {arch.name}")
        self.pid = pid
        self.stack_size = stack_size
        #: Why recording ended.
        self.end = END_DURATION
        self._rings: list[Ring] = []
        self._pidfd = -1
        self._events: ProcessEvents | None = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            raise NoSuchProcessError(f"no process {pid}") from None
        try:
            ring_bytes = data_pages * os.sysconf("SC_PAGE_SIZE")
            #: The events' ``perf_event_attr``, which the records are decoded with.
            self.attr = attr_bytes(
                rate=rate, regs_mask=regs_mask, stack_size=stack_size, wakeup_bytes=ring_bytes // 4
            )
            self._events = ProcessEvents(
                pid,
                self.attr,
                arch.perf_event_open,
                lambda fd: self._rings.append(Ring(fd, data_pages)),
            )
            self._poll = select.poll()
            self._poll.register(self._pidfd, select.POLLIN)
            for fd in self._events.leaders.values():
                self._poll.register(fd, select.POLLIN)
            self._events.enable()
        except BaseException:
            self.close()
            raise

    @property
    def threads(self) -> int:
        """Threads that had events opened for them (later ones inherit theirs)."""
        return self._events.threads if self._events is not None else 0

    @property
    def corrupt(self) -> int:
        """Bytes of the rings skipped as corrupt."""
        return sum(ring.corrupt for ring in self._rings)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def batches(
        self,
        duration: float | None,
        should_stop: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> Iterator[list[bytes]]:
        """Batches of whole records (header first), until ``duration`` seconds have passed.

        Ends early when ``should_stop()`` turns true or the process has exited
        (after what its last moments wrote is read): ``end`` says which.
        """
        deadline = None if duration is None else clock() + duration
        while True:
            exited = False
            for fd, events in self._poll.poll(self._wait(deadline, clock) * 1000):
                if fd == self._pidfd:
                    exited = True
                elif events & (select.POLLHUP | select.POLLERR):
                    # The event whose ring this is belonged to a thread that ended;
                    # the other threads' events of its CPU still write into it.
                    self._poll.unregister(fd)
            batch = self._drain()
            if batch:
                yield batch
            if exited:
                self.end = END_EXITED
                return
            if should_stop():
                self.end = END_STOPPED
                return
            if deadline is not None and clock() >= deadline:
                return

    def _wait(self, deadline: float | None, clock: Callable[[], float]) -> float:
        if deadline is None:
            return DRAIN_EVERY
        return max(0.0, min(DRAIN_EVERY, deadline - clock()))

    def _drain(self) -> list[bytes]:
        batch: list[bytes] = []
        for ring in self._rings:
            batch += ring.read()
        return batch

    def stop(self) -> list[bytes]:
        """Stops sampling and returns what the rings still held."""
        if self._events is not None:
            self._events.disable()
        return self._drain()

    def close(self) -> None:
        """Disables the events, unmaps the rings and closes every descriptor (again: nothing)."""
        if self._events is not None:
            self._events.disable()
        rings, self._rings = self._rings, []
        for ring in rings:
            ring.close()
        if self._events is not None:
            self._events.close()
            self._events = None
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
