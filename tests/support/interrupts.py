"""liveunwind ended by a signal: what Python's own start-up may print, and the target let go."""

from __future__ import annotations

from liveunwind.targets.live import procfs
from tests.support.waits import wait_until


def python_start_up(stderr: str) -> bool:
    """What Python itself prints when a signal comes before any of liveunwind's code runs.

    While it starts (``site``, ``runpy`` looking for the package) Python dies
    of SIGINT or says "Fatal Python error"; its traceback then names none of
    liveunwind's files (docs/hostile-input.md: what liveunwind promises, and
    from when).
    """
    return "Fatal Python error" in stderr or (
        "Traceback" in stderr and "/liveunwind/" not in stderr
    )


def held(pid: int) -> dict[int, tuple[str, int]]:
    """Threads of ``pid`` that are traced or stopped: tid → (state, TracerPid)."""
    found = {}
    for tid in procfs.list_tids(pid):
        try:
            state = procfs.read_stat(f"/proc/{pid}/task/{tid}/stat").state
            tracer = procfs.tracer_of(pid, tid)
        except OSError:
            continue  # it exited meanwhile
        if tracer or state in "tT":
            found[tid] = (state, tracer)
    return found


def assert_let_go(pid: int) -> None:
    """Nothing traced or stopped; a thread still on its way out of a stop gets a moment."""
    wait_until(lambda: not held(pid), 1, f"threads of {pid} let go; still held: {held(pid)}")
