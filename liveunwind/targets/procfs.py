"""Reading /proc: mappings, thread lists and the facts that explain attach failures."""

from __future__ import annotations

import os
import stat
from collections import namedtuple

from liveunwind.errors import NoSuchProcessError
from liveunwind.targets.base import Mapping

#: ``PF_KTHREAD`` in the flags field of /proc/PID/stat.
_PF_KTHREAD = 0x00200000


def parse_maps(text: str) -> list[Mapping]:
    """Parses the text of /proc/PID/maps."""
    mappings = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        start, _, end = fields[0].partition("-")
        mappings.append(
            Mapping(
                start=int(start, 16),
                end=int(end, 16),
                perms=fields[1],
                offset=int(fields[2], 16),
                device=fields[3],
                inode=int(fields[4]),
                path=fields[5] if len(fields) > 5 else "",
            )
        )
    mappings.sort(key=lambda mapping: mapping.start)
    return mappings


class TaskStat(namedtuple("TaskStat", "name state flags")):
    """The few fields of /proc/PID/task/TID/stat that liveunwind uses."""

    __slots__ = ()
    name: str
    state: str
    flags: int

    @property
    def is_kernel_thread(self) -> bool:
        return bool(self.flags & _PF_KTHREAD)


_STATE_WORDS = {
    "R": "running",
    "S": "sleeping",
    "D": "disk sleep",
    "T": "stopped",
    "t": "tracing stop",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
}


def state_word(letter: str) -> str:
    return _STATE_WORDS.get(letter, letter)


def read_stat(path: str) -> TaskStat:
    """Parses a ``stat`` file; the name may contain spaces and parentheses."""
    with open(path, "rb") as stream:
        raw = stream.read().decode("utf-8", "replace")
    head, _, tail = raw.rpartition(")")
    name = head.partition("(")[2]
    fields = tail.split()
    return TaskStat(name=name, state=fields[0], flags=int(fields[6]))


def process_stat(pid: int) -> TaskStat:
    try:
        return read_stat(f"/proc/{pid}/stat")
    except FileNotFoundError:
        raise NoSuchProcessError(f"no process with pid {pid}") from None
    except ProcessLookupError:
        raise NoSuchProcessError(f"no process with pid {pid}") from None


def list_tids(pid: int) -> list[int]:
    try:
        return sorted(int(entry) for entry in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        raise NoSuchProcessError(f"process {pid} has exited") from None


def tracer_of(pid: int) -> int:
    """The pid of the process tracing ``pid``, or 0."""
    try:
        with open(f"/proc/{pid}/status") as stream:
            for line in stream:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


#: Largest perf map read; JIT runtimes append forever, so cap what we parse.
_MAX_PERF_MAP = 16 << 20


def read_perf_map(pid: int) -> str:
    """The process's ``/tmp/perf-PID.map`` as it sees it (its root, its own pid), or ``""``.

    Inside a pid namespace the file is named after the pid the process sees
    itself as (the last ``NSpid`` entry), and lives under its own root.  Only a
    regular file is read, and at most 16 MiB of it.
    """
    own_pid = pid
    try:
        with open(f"/proc/{pid}/status") as stream:
            for line in stream:
                if line.startswith("NSpid:"):
                    own_pid = int(line.split()[-1])
    except (OSError, ValueError):
        return ""
    path = f"/proc/{pid}/root/tmp/perf-{own_pid}.map"
    try:
        with open(path, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                return ""
            return stream.read(_MAX_PERF_MAP).decode("utf-8", "replace")
    except OSError:
        return ""
