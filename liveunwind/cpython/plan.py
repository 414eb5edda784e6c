"""The plan: every range a walk read, which the next walk fetches with one request.

The stop of a live process should copy what the Python walk needs and
nothing more, in one system call made ready before it
(:class:`~liveunwind.targets.live.syscalls.PlannedRead`).  What to copy is
what the walk before the stop read: a process that moved on little (that
walk was a moment ago) has its thread states, frames and code objects where
they were.  Each walk leaves its ranges, sorted and coalesced, on the
:class:`~liveunwind.cpython.interpreter.Interpreter` for the next one, with
each thread's frame stack as it saw it: a thread whose stack is byte for
byte the same in the stop is walked after it, from the copy.
"""

from __future__ import annotations

from liveunwind.cpython.memory import END, MAX_CHUNK_PREFETCH, coalesce

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.cpython.collected import Collected

#: Room for frames pushed since the last walk, fetched with a frame stack's used part.
DATASTACK_SLACK = 512


def _grown(start: int, end: int) -> int:
    """The end of a frame stack's used part plus some slack.

    No more: every byte fetched in the stop is memory liveunwind touches for
    the first time while the process waits.  Where the chunk ends within
    the slack the fetch fails and the exact part is fetched on its own.
    """
    return min(end + DATASTACK_SLACK, start + MAX_CHUNK_PREFETCH)


def leave_plan(collected: Collected, codes: list[int]) -> None:
    """Leaves the next walk the ranges this one read and the frame stacks it saw.

    ``collected`` must have read ``_PyRuntime`` (its ``interpreters`` known);
    ``codes`` are the code objects its frames run.
    """
    interpreter = collected.interpreter
    interpreter.plan = coalesce(
        [
            (start, size)
            for start, size in _read_ranges(collected, codes)
            if start + size <= END  # pointers from corrupt memory plus offsets may pass it
        ]
    )
    interpreter.stacks = {
        thread.thread_state: (thread.frame, thread.stack_bytes)
        for thread in collected.threads
        if thread.stack is not None
    }


def _read_ranges(collected: Collected, codes: list[int]) -> list[tuple[int, int]]:
    """Every range a walk read, for the next walk's plan."""
    interpreter = collected.interpreter
    assert collected.interpreters is not None
    layout = interpreter.layout
    return [
        (interpreter.runtime + layout.runtime_interpreters_head, 8),
        *(
            (address + offset, 8)
            for address in collected.interpreters
            for offset in (layout.interp_next, layout.interp_threads_head, layout.interp_id)
        ),
        *((thread.thread_state, layout.tstate_read_size) for thread in collected.threads),
        *(
            (start, _grown(start, end) - start)
            for start, end in (thread.datastack for thread in collected.threads if thread.fetchable)
        ),
        *(range_ for thread in collected.threads for range_ in thread.outside),
        *((address, layout.code_read_size) for address in codes),
    ]
