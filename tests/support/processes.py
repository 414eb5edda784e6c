"""A many-process ``pid`` run's document against gdb, and its processes left as they were."""

from __future__ import annotations

from tests.support.hostile import assert_untraced, states
from tests.support.oracles import gdb_backtraces, pcs
from tests.support.waits import wait_until


def assert_frames_are_gdbs(entry: dict, gdb: str, *, in_its_root: bool = False) -> None:  # type: ignore[type-arg]
    """The process's threads and each one's frames are gdb's (physical pcs), walks complete.

    ``in_its_root``: gdb reads the files through /proc/PID/root and /proc/PID/exe
    (a process in a container, whose paths are not this machine's).
    """
    pid = entry["pid"]
    backtrace = entry["backtrace"]
    assert backtrace is not None, f"process {pid}: {entry['error']}"
    where = {"sysroot": f"/proc/{pid}/root", "executable": f"/proc/{pid}/exe"}
    oracle = gdb_backtraces(pid, gdb=gdb, **(where if in_its_root else {}))
    ours = {thread["tid"]: thread for thread in backtrace["threads"]}
    assert set(ours) == set(oracle), f"process {pid}: other threads than gdb's"
    for tid, frames in oracle.items():
        got = [frame["pc"] for frame in ours[tid]["frames"]]
        assert got == pcs(frames), f"process {pid} thread {tid} differs from gdb"
        assert ours[tid]["complete"]


def assert_running_untraced(pids: list[int]) -> None:
    """Each process's threads sleep again, and none is traced."""
    for pid in pids:
        wait_until(lambda pid=pid: all(s == "S" for s, _ in states(pid).values()), what="asleep")
        assert_untraced(pid)
