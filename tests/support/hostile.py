"""What the tests of hostile targets and files share: bounded blocks, open watches, states."""

from __future__ import annotations

import ctypes
import os
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from liveunwind.targets.live import procfs


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fails the test (instead of hanging it) if the block blocks longer than ``seconds``."""

    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class OpenWatch:
    """inotify IN_OPEN on one path: did anything open it (O_PATH does not count)?"""

    IN_OPEN = 0x20

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        watch = libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN)
        assert watch >= 0, os.strerror(ctypes.get_errno())

    def opened(self) -> bool:
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)


def states(pid: int) -> dict[int, tuple[str, int]]:
    """tid → (state letter, TracerPid) of every thread of ``pid``."""
    found = {}
    for tid in procfs.list_tids(pid):
        try:
            state = procfs.read_stat(f"/proc/{pid}/task/{tid}/stat").state
        except OSError:
            continue
        found[tid] = (state, procfs.tracer_of(pid, tid))
    return found


def assert_untraced(pid: int) -> None:
    traced = {tid: tracer for tid, (_, tracer) in states(pid).items() if tracer}
    assert not traced, f"threads still traced (tid: tracer): {traced}"


@contextmanager
def planted_fifo_and_device(folder: Path) -> Iterator[tuple[Path, Path, OpenWatch]]:
    """A FIFO and a device with /dev/null's numbers in ``folder``, and a watch on the device."""
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    device = folder / "device"
    os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    watch = OpenWatch(device)
    try:
        yield fifo, device, watch
    finally:
        watch.close()
