"""``liveunwind pid`` over several processes: each frozen on its own, one report.

The processes are backtraced one after the other — never two stopped at
once, each for its own freeze — sharing what was read of the files they
have in common (``backtrace/shared.py``), so the second process of a
program costs its freeze and its walk.  A process that exited, cannot be
traced or could not be used is a line of the report, and the run goes on.

Text is printed process by process as it comes; ``--json`` is one
document at the end (``cli/report.py``); ``--collapsed`` sums the folded
stacks of every process under a first level naming it (its name, or
name:pid with ``--per-process``).
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
    from collections.abc import Callable
    from types import SimpleNamespace

    from liveunwind.backtrace.options import BacktraceOptions
    from liveunwind.frames import Backtrace

#: Exit codes (those of cli/__init__.py): every walk complete, some ended early.
_COMPLETE = 0
_INCOMPLETE = 1


def many_processes(
    arguments: SimpleNamespace,
    options: BacktraceOptions,
    pids: list[int],
    *,
    print_stats: Callable[[Backtrace, str], None],
) -> int:
    """Backtraces ``pids`` in order; the exit code is the worst of theirs (docs/cli.md)."""
    from liveunwind.backtrace.session import Session
    from liveunwind.backtrace.shared import SharedFiles
    from liveunwind.cli.targets import process_name

    shared = SharedFiles(once=True)
    results: list[ProcessResult] = []
    folded: Counter[tuple[str, ...]] | None = None
    if arguments.collapsed:
        from collections import Counter

        folded = Counter()
    status = _COMPLETE
    moved = 0  # threads given the walk of another process of their program, moved
    began = time.perf_counter()
    for index, pid in enumerate(pids):
        name = process_name(pid)
        try:
            session = Session(
                pid,
                options=options,
                snapshot=not arguments.no_snapshot,
                stack_cap=arguments.stack_cap,
                total_cap=arguments.total_stack_cap,
                stop_timeout=arguments.stop_timeout,
                shared=shared,
                once=True,
            )
            result = ProcessResult(pid, name, session.backtrace())
            moved += session.cache.suffixed
        except (LiveUnwindError, OSError) as error:
            code = error.exit_code if isinstance(error, LiveUnwindError) else 2
            result = ProcessResult(pid, name, None, _one_line(error), code)
        backtrace = result.backtrace
        if backtrace is None:
            status = max(status, result.exit_code)
        else:
            status = max(status, _COMPLETE if backtrace.complete else _INCOMPLETE)
            if arguments.stats:
                print_stats(backtrace, f"process {pid}: ")
        if folded is not None:
            if backtrace is not None:
                label = f"{result.name or '?'}:{pid}" if arguments.per_process else result.name
                fold(folded, label or "?", backtrace, per_thread=arguments.per_thread)
            else:
                print(f"liveunwind: {_failure(result)}", file=sys.stderr)
        elif arguments.json:
            results.append(result)
        else:
            from liveunwind.cli.report import format_process_text

            text = format_process_text(
                result, symbols=not arguments.no_symbols, verbose=arguments.verbose
            )
            emit(("\n" if index else "") + text)
    if folded is not None:
        emit("".join(f"{';'.join(stack)} {count}\n" for stack, count in sorted(folded.items())))
    elif arguments.json:
        from liveunwind.cli.report import format_processes_json

        emit(format_processes_json(results))
    if arguments.stats:
        seconds = time.perf_counter() - began
        print(
            f"liveunwind: stats: {len(pids)} processes in {seconds * 1000:.1f} ms; "
            f"{shared.adopted} modules taken from another process instead of read; "
            f"{moved} threads' walks moved from another process of their program",
            file=sys.stderr,
        )
    return status


def _one_line(error: BaseException) -> str:
    text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return " ".join(str(text).split())


def _failure(result: ProcessResult) -> str:
    name = f' "{result.name}"' if result.name else ""
    return f"process {result.pid}{name}: not backtraced: {result.error}"


def fold(
    folded: Counter[tuple[str, ...]], label: str, backtrace: Backtrace, *, per_thread: bool
) -> None:
    """Adds one target's folded stacks under ``label``, bounded as ``profile`` is.

    Beyond MAX_STACKS distinct stacks in all, a new stack is counted under
    the label's OVERFLOW entry instead.  ``core`` over many cores uses it too.
    """
    from liveunwind.backtrace.profile import MAX_STACKS, OVERFLOW, Profile

    profile = Profile(backtrace.pid or 0, 1.0, per_thread=per_thread)
    profile.add(backtrace)
    for stack, count in profile.folded().items():
        key = (label, *stack)
        if key not in folded and len(folded) >= MAX_STACKS:
            key = (label, *OVERFLOW)
        folded[key] += count
