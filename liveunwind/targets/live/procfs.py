"""Reading /proc: mappings, thread lists and the facts that explain attach failures.

The files named here (``stat``, ``status``, ``wchan``, ``maps``) are kernel
files at paths liveunwind builds itself, read with
:func:`~liveunwind.targets.files.read_kernel_file`; the one file a process
chooses, its perf map, is resolved inside its own root with
:func:`~liveunwind.targets.files.open_in_root`.
"""

from __future__ import annotations

import errno
import os
import time

from liveunwind.errors import NoSuchProcessError
from liveunwind.formats.auxv import AT_ENTRY, parse_auxv
from liveunwind.targets.base import Mapping
from liveunwind.targets.files import (
    FileError,
    NotRegularFileError,
    RegularFile,
    open_file,
    open_in_root,
    read_kernel_file,
)

#: ``PF_KTHREAD`` in the flags field of /proc/PID/stat.
_PF_KTHREAD = 0x00200000


#: Most bytes of /proc/PID/maps read (a process may have up to vm.max_map_count lines).
MAX_MAPS_TEXT = 256 << 20


def read_maps(owner: str) -> list[Mapping]:
    """The mappings of process ``owner`` (a pid, or "self"); OSError once it is gone.

    A path that is not UTF-8 is decoded with replacement characters: it is
    printed, and such a file is then opened through /proc/PID/map_files.
    """
    text = read_kernel_file(f"/proc/{owner}/maps", MAX_MAPS_TEXT)
    return parse_maps(text.decode("utf-8", "replace"))


def parse_maps(text: str) -> list[Mapping]:
    """Parses the text of /proc/PID/maps.

    A Mapping is made from positional fields (start, end, perms, offset,
    inode, path, device): by keyword, a line cost a quarter more (80 lines of
    CPython's maps: 117 µs against 93, and a live backtrace reads them twice).
    """
    mappings = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        start, _, end = fields[0].partition("-")
        path = fields[5] if len(fields) > 5 else ""
        mappings.append(
            Mapping(
                int(start, 16),
                int(end, 16),
                fields[1],
                int(fields[2], 16),
                int(fields[4]),
                path,
                fields[3],
            )
        )
    mappings.sort(key=_start_of)
    return mappings


def _start_of(mapping: Mapping) -> int:
    return mapping.start


class TaskStat:
    """The few fields of /proc/PID/task/TID/stat that liveunwind uses.

    A plain class, not a named tuple: that costs 70–170 µs of every cold start.
    """

    __slots__ = ("cpu_ticks", "flags", "name", "ran", "state")

    def __init__(self, name: str, state: str, flags: int, cpu_ticks: int = 0) -> None:
        self.name = name
        self.state = state
        self.flags = flags
        #: Clock ticks the thread ran (user and system time).
        self.cpu_ticks = cpu_ticks
        #: Whether it ran since the same file was read before (TaskStatFiles); False if unknown.
        self.ran = False

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
    return _parse_stat(read_kernel_file(path, _STAT_SIZE))


#: Most bytes of a ``stat`` file read (it is about 300).
_STAT_SIZE = 4096


def _stat_fields(data: bytes) -> tuple[str, list[str]]:
    """A ``stat`` file's name and its fields after it (the state first): the name may hold
    spaces and parentheses, so the fields begin after its last ``)``."""
    head, _, tail = data.decode("utf-8", "replace").rpartition(")")
    return head.partition("(")[2], tail.split()


def _parse_stat(data: bytes) -> TaskStat:
    name, fields = _stat_fields(data)
    cpu_ticks = int(fields[11]) + int(fields[12]) if len(fields) > 12 else 0
    return TaskStat(name=name, state=fields[0], flags=int(fields[6]), cpu_ticks=cpu_ticks)


class TaskStatFiles:
    """The ``stat`` files of one process's threads, kept open for the next stop to read again.

    Opening, reading to the end and closing a thread's ``stat`` cost 15 µs,
    one ``pread`` of the open file 2 µs (9 threads, 2 cores): a profile reads
    every thread's before every sample.  An open file stays its thread's: once
    the thread is gone it reads ESRCH, and the tid, if reused, is opened anew.
    The files kept open by all of liveunwind's sessions together are at most a
    quarter of its file limit (and at most :data:`MOST_KEPT`); other threads'
    are read by path.
    """

    #: Files kept open at most, over every instance.
    MOST_KEPT = 1024
    #: Files kept open now, over every instance.
    kept = 0

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._files: dict[int, int] = {}
        #: The CPU ticks of each thread kept open, at its last read.
        self._ticks: dict[int, int] = {}

    def read(self, tid: int) -> TaskStat:
        """The thread's ``stat`` now (``ran``: it ran since the last read); OSError once gone."""
        fd = self._files.get(tid)
        if fd is not None:
            try:
                stat = _parse_stat(os.pread(fd, _STAT_SIZE, 0))
            except OSError:  # the thread ended; its tid may be another's by now
                self._close(tid)
            else:
                stat.ran = stat.cpu_ticks > self._ticks[tid]
                self._ticks[tid] = stat.cpu_ticks
                return stat
        path = f"/proc/{self.pid}/task/{tid}/stat"
        if TaskStatFiles.kept >= _most_kept():
            return read_stat(path)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._files[tid] = fd
        TaskStatFiles.kept += 1
        stat = _parse_stat(os.pread(fd, _STAT_SIZE, 0))
        self._ticks[tid] = stat.cpu_ticks
        return stat

    def keep_only(self, tids: list[int]) -> None:
        """Closes the files of threads no longer listed."""
        for tid in self._files.keys() - set(tids):
            self._close(tid)

    def close(self) -> None:
        """Closes every file kept open."""
        for tid in list(self._files):
            self._close(tid)

    def _close(self, tid: int) -> None:
        os.close(self._files.pop(tid))
        self._ticks.pop(tid, None)
        TaskStatFiles.kept -= 1


def _most_kept() -> int:
    """How many ``stat`` files may be kept open: a quarter of the open-file limit, at most 1024."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return TaskStatFiles.MOST_KEPT
    return min(TaskStatFiles.MOST_KEPT, soft // 4)


def process_stat(pid: int) -> TaskStat:
    try:
        return read_stat(f"/proc/{pid}/stat")
    except FileNotFoundError:
        raise NoSuchProcessError(f"no process with pid {pid}") from None
    except ProcessLookupError:
        raise NoSuchProcessError(f"no process with pid {pid}") from None


def started_at(pid: int) -> float | None:
    """When process ``pid`` started, in seconds of the wall clock (``time.time()``); None if gone.

    ``stat``'s field 22 counts clock ticks from boot to the process's fork;
    the wall-clock time of boot is the wall clock less ``CLOCK_BOOTTIME``
    (exact to the microsecond, where /proc/stat's ``btime`` is whole seconds).
    """
    try:
        ticks = int(_stat_fields(read_kernel_file(f"/proc/{pid}/stat", _STAT_SIZE))[1][19])
    except (OSError, ValueError, IndexError):
        return None
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return booted + ticks / os.sysconf("SC_CLK_TCK")


def list_tids(pid: int) -> list[int]:
    try:
        return sorted(int(entry) for entry in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        raise NoSuchProcessError(f"process {pid} has exited") from None


def status_field(path: str, name: str) -> str:
    """One field of a ``status`` file (``TracerPid``, ``NSpid``…), or "" if absent or unreadable."""
    prefix = name + ":"
    try:
        text = read_kernel_file(path, 65536).decode("utf-8", "replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return ""


def tracer_of(pid: int, tid: int | None = None) -> int:
    """The thread tracing thread ``tid`` of ``pid`` (its main thread by default), or 0."""
    path = f"/proc/{pid}/status" if tid is None else f"/proc/{pid}/task/{tid}/status"
    try:
        return int(status_field(path, "TracerPid") or 0)
    except ValueError:
        return 0


def process_of(tid: int) -> int:
    """The process (thread group) that thread ``tid`` belongs to, or 0 if it is gone."""
    try:
        return int(status_field(f"/proc/{tid}/status", "Tgid") or 0)
    except ValueError:
        return 0


def wchan(pid: int, tid: int) -> str:
    """The kernel function thread ``tid`` sleeps in (``kernel_clone`` inside vfork()), or ""."""
    try:
        text = read_kernel_file(f"/proc/{pid}/task/{tid}/wchan", 256).decode("utf-8", "replace")
    except OSError:
        return ""
    return "" if text.strip() == "0" else text.strip()


def entry_point(owner: str) -> int | None:
    """``AT_ENTRY`` of /proc/OWNER/auxv, None where it cannot be read."""
    try:
        auxv = parse_auxv(read_kernel_file(f"/proc/{owner}/auxv"))
    except OSError:
        return None
    return auxv.get(AT_ENTRY)


def perf_map_path(pid: int) -> str | None:
    """Where the process's perf map is, inside ``/proc/PID/root``; None if that cannot be told.

    Inside a pid namespace the file is named after the pid the process sees
    itself as (the last ``NSpid`` entry), and lives under its own root: the
    path is to be resolved inside ``/proc/PID/root`` (``open_in_root``), so
    a symlink the process planted cannot lead out of it.

    A process in our own pid namespace sees itself as ``pid``: told by its
    ``ns/pid`` link (1 µs), which spares reading its ``status`` (25 µs of
    every process of a many-process run).
    """
    if _same_pid_namespace(pid):
        return f"/tmp/perf-{pid}.map"
    namespaced = status_field(f"/proc/{pid}/status", "NSpid").split()
    if not namespaced:  # absent before Linux 4.1
        return f"/tmp/perf-{pid}.map"
    try:
        return f"/tmp/perf-{int(namespaced[-1])}.map"
    except ValueError:
        return None


def _same_pid_namespace(pid: int) -> bool:
    """Whether process ``pid`` is in this process's pid namespace (False if it cannot be told)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
    except OSError:
        return False


def open_mapped_file(owner: str, mapping: Mapping) -> RegularFile | None:
    """Opens the file behind ``mapping`` of process ``owner`` (a pid, or "self") as it sees it.

    The path is resolved inside the process's root (containers, chroots)
    and used when it is the mapped file: the same (device, inode) as
    /proc/PID/maps says.  Otherwise (deleted or replaced on disk, or a path
    that leads elsewhere) the kernel's own handle in /proc/PID/map_files is
    used, which needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE.  Without
    those, a file of the right inode whose device number differs is
    accepted: btrfs subvolumes and overlayfs number devices differently in
    maps and in stat.  Only regular files are ever opened; an emptied one
    raises FileError (it cannot be mapped, and would not be the code).
    """
    if not mapping.is_file:
        return None
    path = mapping.path.removesuffix(" (deleted)")
    kernels_handle = f"/proc/{owner}/map_files/{mapping.start:x}-{mapping.end:x}"
    found: RegularFile | None
    replaced = ""  # what the path names now, when it is not the mapped file
    try:
        found = open_in_root(f"/proc/{owner}/root", path)
    except NotRegularFileError as error:
        found, replaced = None, error.kind
    except FileError:
        found = None
    if found is not None and found.identity != _identity(mapping):
        if found.status.st_ino != mapping.inode:
            found.close()
            found, replaced = None, "another file"
        else:
            try:
                kernels = open_file(kernels_handle)
            except FileError as error:
                if error.errno not in (errno.EPERM, errno.EACCES):
                    found.close()
                    found = None
            else:
                found.close()
                found = kernels
    if found is None:
        try:
            found = open_file(kernels_handle)
        except FileError:
            return None
        if found.status.st_ino != mapping.inode:
            found.close()
            return None
        if replaced:
            found.note = (
                f"{path}: is {replaced} now, not the file the process maps; "
                f"that one was read through {kernels_handle}"
            )
    if found.size == 0:
        found.close()
        raise FileError(path, "is empty (cut short since it was mapped)")
    return found


def _identity(mapping: Mapping) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a mapped file from its maps line (``fd:01``, major:minor in hex)."""
    major, _, minor = mapping.device.partition(":")
    try:
        return os.makedev(int(major, 16), int(minor, 16)), mapping.inode
    except ValueError:
        return None
