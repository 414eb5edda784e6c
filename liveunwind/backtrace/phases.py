"""Seconds per phase of one backtrace: what ``--stats`` prints and ``profile`` adds up.

The pipeline (``Session.backtrace``, ``Backtracer.backtrace``, the entry
points) names the pass it is in, ``with phases.timed("unwind"):``, and the
clock is kept here, so each method reads as its passes in order.  A piece of
a phase costs two ``perf_counter`` calls and a dictionary update, nothing
per frame.

A phase may run in pieces — ``--lines`` reads DWARF ahead before the walk,
after it and after naming — which add up.  Phases are listed in the order
they ended (a phase in pieces where its last piece ended), which is the
order of the pipeline: what ``--stats`` prints.
"""

from __future__ import annotations

from time import perf_counter


class Phases:
    """The seconds of each phase of one backtrace, measured from this timer's making."""

    __slots__ = ("seconds", "started")

    def __init__(self, seconds: dict[str, float] | None = None) -> None:
        """``seconds``: a dictionary to add to (a caller's phases so far) instead of a new one."""
        #: Phase → seconds, in the order the phases ended: the Backtrace's ``timings``.
        self.seconds: dict[str, float] = {} if seconds is None else seconds
        #: The start of ``total``.
        self.started = perf_counter()

    def timed(self, name: str) -> Timing:
        """A piece of phase ``name`` from now until its ``with`` block ends (or its ``stop``)."""
        return Timing(self, name)

    def add(self, name: str, seconds: float) -> None:
        """Adds ``seconds`` to phase ``name``, which moves to the end: it ended last."""
        self.seconds[name] = self.seconds.pop(name, 0.0) + seconds

    def total(self) -> None:
        """Ends phase ``total``: everything since this timer was made."""
        self.add("total", perf_counter() - self.started)


class Timing:
    """One piece of a phase: from its making until :meth:`stop`, which leaving ``with`` calls.

    Most pieces are ``with`` blocks.  A piece whose end is inside another
    ``with`` (attaching ends inside ``with process:``) or was recorded by
    the target (the moment a process was let go) calls :meth:`stop` itself.
    """

    __slots__ = ("_name", "_phases", "_started")

    def __init__(self, phases: Phases, name: str) -> None:
        self._phases = phases
        self._name = name
        self._started = perf_counter()

    def __enter__(self) -> None:
        """Nothing to do: the piece started when it was made, just before."""

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self, at: float | None = None) -> float:
        """Ends the piece now, or ``at`` (a ``perf_counter`` time); returns when it ended."""
        ended = perf_counter() if at is None else at
        self._phases.add(self._name, ended - self._started)
        return ended
