"""``liveunwind pid`` over several processes: each frozen on its own, one report.

Each process is backtraced and rendered into its piece of the report (its
text, its JSON entry, or its folded stacks) by :class:`ProcessPieces`,
sharing what was read of the files the processes have in common
(``backtrace/shared.py``), so the second process of a program costs its
freeze and its walk.  The pieces are taken in the order of the pids by
:class:`Report`, whether they were made here one after the other or by
forked workers (``cli/manyworkers.py``, the default with several idle
CPUs): the output is the same either way, and never are two processes
stopped at once.  A process that exited, cannot be traced or could not be
used is a line of the report, and the run goes on.

Text is printed process by process as it comes; ``--json`` is one
document at the end (``cli/report.py``'s shape); ``--collapsed`` sums the
folded stacks of every process under a first level naming it (its name,
or name:pid with ``--per-process``).
"""

from __future__ import annotations

import sys
import time

from liveunwind.cli.output import emit
from liveunwind.cli.report import ProcessResult
from liveunwind.errors import LiveUnwindError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable, Iterable
    from types import SimpleNamespace
    from typing import Any

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.cli.manyworkers import Piece
    from liveunwind.frames import Backtrace
    from liveunwind.targets.live.ptrace import Tracer, Turn

    #: A folded stack (its frames, outermost first) and its count.
    FoldedStacks = list[tuple[tuple[str, ...], int]]

#: Exit codes (those of cli/__init__.py): every walk complete, some ended early.
_COMPLETE = 0
_INCOMPLETE = 1
#: Objects allocated (less those freed) between two young collections of the cyclic
#: garbage collector in a run (Python's is 700; ``profile``'s sampling takes the same
#: figure): what a process's backtrace and piece make (frames, their lists, tuples)
#: set it off 118 times over 100 copies of bench/target.c, 12 of the run's 260 ms of CPU
#: (--workers 1); 5 times, 1.6 ms, with this.  Cyclic garbage is still collected, once
#: this many more objects are alive than at the last collection.
MANY_GC_THRESHOLD = 10_000


def many_processes(
    arguments: SimpleNamespace,
    options: BacktraceOptions,
    pids: list[int],
    *,
    print_stats: Callable[[Backtrace, str], None],
) -> int:
    """Backtraces ``pids``; the exit code is the worst of theirs (docs/cli.md)."""
    import gc

    thresholds = gc.get_threshold()
    gc.set_threshold(MANY_GC_THRESHOLD, *thresholds[1:])  # the workers inherit it
    try:
        return _many_processes(arguments, options, pids, print_stats)
    finally:
        gc.set_threshold(*thresholds)


def _many_processes(
    arguments: SimpleNamespace,
    options: BacktraceOptions,
    pids: list[int],
    print_stats: Callable[[Backtrace, str], None],
) -> int:
    from liveunwind.backtrace.shared import SharedFiles

    pieces = ProcessPieces(arguments, options, SharedFiles(once=True), print_stats)
    report = Report(arguments)
    began = time.perf_counter()
    workers = 1
    if not arguments.no_snapshot:  # without it a process is stopped for its whole walk
        from liveunwind.cli.manyworkers import in_workers, workers_for

        workers = workers_for(arguments.workers, len(pids))
    adopted = moved = 0  # in the workers: what each summed up
    try:
        if workers > 1:
            workers, adopted, moved = in_workers(pids, pieces, report.add, workers)
        else:
            for pid in pids:
                report.add(pieces.piece(pid))
    finally:
        pieces.end_tracer()  # idle: what it traced it let go
    report.finish()
    if arguments.stats:
        seconds = time.perf_counter() - began
        adopted += pieces.shared.adopted
        moved += pieces.moved
        in_parallel = f" ({workers} workers)" if workers > 1 else ""
        print(
            f"liveunwind: stats: {len(pids)} processes in {seconds * 1000:.1f} ms{in_parallel}; "
            f"{adopted} modules taken from another process instead of read; "
            f"{moved} threads' walks moved from another process of their program",
            file=sys.stderr,
        )
    return report.status


class ProcessPieces:
    """Backtraces one process and renders its piece of the report, in whichever process
    of the run (the command or a worker) backtraces it."""

    def __init__(
        self,
        arguments: SimpleNamespace,
        options: BacktraceOptions,
        shared: SharedFiles,
        print_stats: Callable[[Backtrace, str], None],
    ) -> None:
        self.arguments = arguments
        self.options = options
        self.shared = shared
        self.print_stats = print_stats
        #: Threads given the walk of another process of their program, moved.
        self.moved = 0
        #: Runs each stop when no other process of the run is stopped (workers: their turn).
        self.freeze_turn: Turn | None = None
        #: The thread that makes the ptrace calls of this process's stops, one after the other.
        self._tracer: Tracer | None = None

    def end_tracer(self) -> None:
        """Ends the tracer thread (a process forks only alone: ``cli/manyworkers.py``); the
        next stop starts another."""
        if self._tracer is not None:
            self._tracer.retire()
            self._tracer = None

    def piece(self, pid: int) -> Piece:
        """``pid`` backtraced (or why not), as its piece of the report: its exit code, its
        output (its text; its JSON entry and whether it is complete; or its label and
        folded stacks, or its failure line) and its ``--stats`` line."""
        result = self._backtrace(pid)
        arguments = self.arguments
        backtrace = result.backtrace
        if backtrace is None:
            status = result.exit_code
        else:
            status = _COMPLETE if backtrace.complete else _INCOMPLETE
        stats = ""
        if backtrace is not None and arguments.stats:
            import contextlib
            import io

            with contextlib.redirect_stderr(io.StringIO()) as line:
                self.print_stats(backtrace, f"process {pid}: ")
            stats = line.getvalue()
        output: Any
        if arguments.collapsed:
            if backtrace is None:
                output = f"liveunwind: {_failure(result)}\n"
            else:
                label = f"{result.name or '?'}:{pid}" if arguments.per_process else result.name
                output = (label or "?", folded_stacks(backtrace, per_thread=arguments.per_thread))
        elif arguments.json:
            import json

            from liveunwind.cli.report import to_processes_document

            entry = to_processes_document([result])["processes"][0]
            output = (backtrace is not None and backtrace.complete, json.dumps(entry, indent=2))
        else:
            from liveunwind.cli.report import format_process_text

            output = format_process_text(
                result, symbols=not arguments.no_symbols, verbose=arguments.verbose
            )
        return status, output, stats

    def _backtrace(self, pid: int) -> ProcessResult:
        """``pid``'s backtrace, or why not, with its name: its main thread's, read in its stop
        (the process's ``stat`` names the main thread's), else read now (40 µs a process)."""
        from liveunwind.backtrace.session import Session
        from liveunwind.cli.targets import process_name

        arguments = self.arguments
        if self._tracer is None or not self._tracer.running:  # ended by a stop gone wrong
            from liveunwind.targets.live.ptrace import Tracer

            self._tracer = Tracer()
        try:
            session = Session(
                pid,
                options=self.options,
                snapshot=not arguments.no_snapshot,
                stack_cap=arguments.stack_cap,
                total_cap=arguments.total_stack_cap,
                stop_timeout=arguments.stop_timeout,
                shared=self.shared,
                once=True,
                freeze_turn=self.freeze_turn,
                tracer=self._tracer,
            )
            backtrace = session.backtrace()
            self.moved += session.cache.suffixed
        except (LiveUnwindError, OSError) as error:
            code = error.exit_code if isinstance(error, LiveUnwindError) else 2
            return ProcessResult(pid, process_name(pid), None, _one_line(error), code)
        main = next((thread.name for thread in backtrace.threads if thread.tid == pid), "")
        return ProcessResult(pid, main or process_name(pid), backtrace)


class Report:
    """The pieces of the processes, taken in order: printed as they come, or at the end."""

    def __init__(self, arguments: SimpleNamespace) -> None:
        self.arguments = arguments
        self.status = _COMPLETE
        self._count = 0
        self._complete = True
        self._entries: list[str] = []
        self._folded: Counter[tuple[str, ...]] | None = None
        if arguments.collapsed:
            from collections import Counter

            self._folded = Counter()

    def add(self, piece: Piece) -> None:
        """The next process's piece."""
        status, output, stats = piece
        self.status = max(self.status, status)
        if stats:
            sys.stderr.write(stats)
        if self._folded is not None:
            if isinstance(output, str):
                sys.stderr.write(output)
            else:
                label, stacks = output
                add_folded(self._folded, label, stacks)
        elif self.arguments.json:
            complete, entry = output
            self._complete = self._complete and complete
            self._entries.append(entry)
        else:
            emit(("\n" if self._count else "") + output)
        self._count += 1

    def finish(self) -> None:
        """Prints what is printed at the end: the JSON document, or the summed stacks."""
        if self._folded is not None:
            emit(
                "".join(
                    f"{';'.join(stack)} {count}\n" for stack, count in sorted(self._folded.items())
                )
            )
        elif self.arguments.json:
            emit(processes_json(self._complete, self._entries))


def processes_json(complete: bool, entries: list[str]) -> str:
    """``report.format_processes_json``'s document, byte for byte, from its entries already
    rendered (by ``json.dumps(entry, indent=2)``, in whichever process backtraced them)."""
    import json

    from liveunwind.cli.report import to_processes_document

    document = to_processes_document([])
    document["complete"] = complete
    text = json.dumps(document, indent=2)
    if not entries:
        return text + "\n"
    empty = "[]\n}"  # the document ends with its empty list of processes
    body = ",\n".join("    " + entry.replace("\n", "\n    ") for entry in entries)
    return f"{text[: -len(empty)]}[\n{body}\n  ]\n}}\n"


def _one_line(error: BaseException) -> str:
    text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return " ".join(str(text).split())


def _failure(result: ProcessResult) -> str:
    name = f' "{result.name}"' if result.name else ""
    return f"process {result.pid}{name}: not backtraced: {result.error}"


def folded_stacks(backtrace: Backtrace, *, per_thread: bool) -> FoldedStacks:
    """One target's folded stacks, as ``profile`` folds them."""
    from liveunwind.backtrace.profile import Profile

    profile = Profile(backtrace.pid or 0, 1.0, per_thread=per_thread)
    profile.add(backtrace)
    return list(profile.folded().items())


def add_folded(folded: Counter[tuple[str, ...]], label: str, stacks: Iterable[Any]) -> None:
    """Adds one target's folded stacks under ``label``, bounded as ``profile`` is.

    Beyond MAX_STACKS distinct stacks in all, a new stack is counted under
    the label's OVERFLOW entry instead.
    """
    from liveunwind.backtrace.profile import MAX_STACKS, OVERFLOW

    for stack, count in stacks:
        key = (label, *stack)
        if key not in folded and len(folded) >= MAX_STACKS:
            key = (label, *OVERFLOW)
        folded[key] += count


def fold(
    folded: Counter[tuple[str, ...]], label: str, backtrace: Backtrace, *, per_thread: bool
) -> None:
    """Adds one target's folded stacks under ``label`` (:func:`add_folded`); ``core`` over
    many cores uses it too."""
    add_folded(folded, label, folded_stacks(backtrace, per_thread=per_thread))
