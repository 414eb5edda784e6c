"""``pid`` over many processes, spread over forked workers that take turns to stop them.

Most of a process's cost in a many-process run is not its freeze but what
comes after (the walk, naming, rendering: 1.7 of 2.5 ms of CPU for the
9-thread C target): on a machine with an idle CPU a second process can do
that for one process while the next is frozen.  So the command first
backtraces, itself, the first process of each program that has several
in the run (reading its files once, for all of them), then forks workers
(``backtrace/workers.py``) that inherit what it read and each backtrace
every N-th of the rest.  A worker stops a process only in its turn
(:class:`~liveunwind.backtrace.workers.Turns`): never are two targets
stopped at once, each for its own freeze.  Each worker renders its
processes' pieces of the report, which the command takes in the order of
the pids: the output is byte for byte that of the run in one process.

A worker that dies ends the run with one line (exit 2), every worker
killed; a target a worker held stopped is let go by the kernel as that
worker's tracer thread ends (a PTRACE_SEIZE'd thread resumes when its
tracer exits), so none is left stopped or traced.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator
    from typing import Any, Protocol

    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.targets.live.ptrace import Turn

    #: One process's part of the report: its exit code, its output (what it is depends on
    #: the output asked for: ``cli/many.py``) and its ``--stats`` line.
    Piece = tuple[int, Any, str]

    class ProcessPieces(Protocol):
        """What makes the pieces (``cli/many.py``): here and, forked, in each worker."""

        shared: SharedFiles
        moved: int
        freeze_turn: Turn | None

        def piece(self, pid: int) -> Piece: ...

        def end_tracer(self) -> None: ...


#: Fewer processes than this are backtraced in the command alone (unless --workers says):
#: two workers cost 11-23 ms of CPU more than one process (the fork, the pages each copies,
#: a walk each records), and on 2 busy CPUs (load 5) 8-24 copies of the C target took as
#: long or longer with them (8: 118 against 101 ms; 24: 110 against 111; 48: 234 against
#: 255; 64: 235 against 299).  With idle CPUs, which the default also asks, the second
#: saves about 1.3 ms a process.
MIN_PROCESSES = 16
#: Seconds to wait for the tracer threads of the command's own backtraces to end
#: before forking (a fork beside another thread is refused: ``Workers``).
_THREADS_END = 1.0


def workers_for(asked: int | None, processes: int) -> int:
    """Workers for ``processes`` processes: ``asked`` (``--workers``), else one per idle CPU,
    none (1) for fewer than MIN_PROCESSES."""
    if asked is None and processes < MIN_PROCESSES:
        return 1
    from liveunwind.backtrace.workers import worker_count

    return worker_count(asked)


def in_workers(
    pids: list[int], pieces: ProcessPieces, add: Callable[[Piece], None], count: int
) -> tuple[int, int, int]:
    """Backtraces ``pids`` with ``count`` workers, ``add``-ing every piece in the order of
    ``pids``; returns the workers used (1: none), the modules adopted and the walks moved
    in them.

    In the command alone when no worker can be forked, or too few processes are left.
    """
    from liveunwind.backtrace.workers import CannotFork, Turns, Workers

    made = {index: pieces.piece(pids[index]) for index in _first_of_each_program(pids)}
    rest = [index for index in range(len(pids)) if index not in made]
    count = min(count, len(rest))
    pool = None
    pieces.end_tracer()  # each worker starts its own
    if count > 1 and _alone():
        turns = Turns()
        pieces.freeze_turn = turns
        adopted, moved = pieces.shared.adopted, pieces.moved

        def work(worker: int, workers: int) -> Generator[Piece, None, tuple[int, int]]:
            for index in rest[worker::workers]:
                yield pieces.piece(pids[index])
            pieces.end_tracer()
            return pieces.shared.adopted - adopted, pieces.moved - moved

        try:
            pool = Workers(count, work, items="processes", plain=True)
        except CannotFork:
            pass
        finally:
            pieces.freeze_turn = None
            turns.close()  # the workers have theirs
    if pool is None:
        for index in range(len(pids)):
            add(made.pop(index) if index in made else pieces.piece(pids[index]))
        return 1, 0, 0
    with pool:
        _take_in_order(len(pids), made, pool.results(), add)
        summaries = list(pool.summaries.values())
    adopted = sum(summary[0] for summary in summaries)  # type: ignore[index]
    return count, adopted, sum(summary[1] for summary in summaries)  # type: ignore[index]


def _take_in_order(
    total: int,
    made: dict[int, Piece],
    results: Iterator[tuple[int, object]],
    add: Callable[[Piece], None],
) -> None:
    """Adds the pieces made here and those the workers send, in the order of the pids."""
    from liveunwind.backtrace.workers import WorkerError

    for index in range(total):
        if index in made:
            add(made.pop(index))
            continue
        taken = next(results, None)
        if taken is None:
            raise WorkerError("the workers backtraced fewer processes than they were given")
        add(taken[1])  # type: ignore[arg-type]
    for _extra in results:
        raise WorkerError("the workers backtraced more processes than they were given")


def _first_of_each_program(pids: list[int]) -> list[int]:
    """The index of the first process of each program (the file /proc/PID/exe is) that has
    more than one process in ``pids``: those the command backtraces before forking."""
    first: dict[tuple[int, int], int] = {}
    several: dict[tuple[int, int], int] = {}
    for index, pid in enumerate(pids):
        try:
            facts = os.stat(f"/proc/{pid}/exe")
        except OSError:
            continue  # gone, a kernel thread, or not ours to look at: its turn says which
        program = (facts.st_dev, facts.st_ino)
        if program in first:
            several[program] = first[program]
        else:
            first[program] = index
    return sorted(several.values())


def _alone() -> bool:
    """Whether this process runs one thread, once the tracer threads of its backtraces ended."""
    deadline = time.monotonic() + _THREADS_END
    while len(os.listdir("/proc/self/task")) > 1:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True
