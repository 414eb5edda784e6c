"""A process's perf map (``/tmp/perf-PID.map``), read on from where the last read ended.

Apart from :mod:`liveunwind.modules.jit` because every live backtrace looks
for the perf map before the stop, while the registry readers are needed only
by a process with JIT code: importing them for every cold ``liveunwind pid``
cost about 1 ms of its start (jit, dynamic, linkedlist).  For the same
reason the perf map's decoder (:mod:`liveunwind.formats.unwind.perfmap`, with
``array``: 0.4 ms) is imported only once a process has a perf map; most have none.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from liveunwind.formats.unwind.perfmap import PerfMap, PerfMapView
    from liveunwind.targets.files import RegularFile

#: Bytes before the read position checked again on each read of a perf map: a
#: file rewritten in place (not just appended to) no longer holds them there.
PERF_MAP_CHECKED = 64

#: Seconds by which a perf map may seem older than its process and still be its:
#: the start is known to a clock tick, told from two clocks that NTP may slew apart.
LEFT_BEHIND_MARGIN = 1.0


class PerfMapFile:
    """A process's perf map, read as the JIT appends to it: only the bytes added since.

    JITs append to ``/tmp/perf-PID.map`` for as long as they run; reading and
    parsing it whole for each backtrace cost 171 ms at 37,042 lines, inside
    the freeze.  This keeps the entries parsed so far (a :class:`PerfMap`),
    the file's identity (device, inode) and how far it was read, and each
    :meth:`update` reads on from there, at most ``limit`` bytes: a session
    updates before the stop (most of what is new) and again in it (the few
    lines appended in between).  A file that was replaced (another inode),
    shrank, or no longer holds the bytes it held just before the read
    position (rewritten in place) is read anew from its start; one that is
    gone, or is not a regular file, names nothing.  Only complete lines are
    taken: a line still being written is read once its newline is there.

    ``path`` is resolved inside ``root`` (``/proc/PID/root``), as the process
    sees it; see :func:`~liveunwind.targets.live.procfs.perf_map_path`.

    Nothing removes a perf map when its process exits, and pids are reused
    (32,768 of them by default): the file of an earlier process with the
    same pid would name this one's code with its symbols, and make a process
    without JIT code look for a registry.  With ``started`` (the process's
    start on the wall clock, asked once a file is found), a file last written
    before the process started is taken for such a leftover and names nothing.
    """

    def __init__(
        self, root: str, path: str | None, started: Callable[[], float | None] | None = None
    ) -> None:
        self.root = root
        self.path = path
        self._started = started
        #: The process's start, once asked of ``started``.
        self._start: float | None = None
        #: The entries read so far; None while no file was found.
        self.perf_map: PerfMap | None = None
        self._identity: tuple[int, int] | None = None
        #: Where the next read starts: the end of the last complete line read.
        self._offset = 0
        #: The last bytes read before ``_offset`` (at most PERF_MAP_CHECKED).
        self._before = b""

    def update(self, limit: int, *, settle: bool = True) -> PerfMapView | str:
        """Reads up to ``limit`` more bytes of the file; returns the entries known now.

        Without a file, the empty text ``""`` (a perf map's text names
        nothing); ``settle=False`` leaves the merging of the perf map's
        blocks for a later update (for an update made while the target is
        stopped).
        """
        from liveunwind.targets.files import FileError, open_in_root

        if self.path is None:
            return ""
        try:
            with open_in_root(self.root, self.path) as file:
                if self._left_behind(file):
                    return self._forget()
                perf_map = self.perf_map
                if perf_map is None or file.identity != self._identity or file.size < self._offset:
                    perf_map = self._restart(file.identity)
                if not perf_map.full:
                    self._read(file, perf_map, limit, settle)
        except FileError:
            return self._forget()
        assert self.perf_map is not None  # _read may have restarted it
        return self.perf_map.view()

    def _forget(self) -> str:
        """Drops what was read (there is no file, or not the process's): names nothing."""
        self.perf_map = None
        self._identity = None
        return ""

    def _left_behind(self, file: RegularFile) -> bool:
        """Whether ``file`` was last written before the process started (an earlier one's)."""
        if self._started is not None:
            self._start = self._started()
            self._started = None
        return self._start is not None and file.status.st_mtime < self._start - LEFT_BEHIND_MARGIN

    def _restart(self, identity: tuple[int, int]) -> PerfMap:
        from liveunwind.formats.unwind.perfmap import PerfMap

        perf_map = self.perf_map = PerfMap()
        self._identity = identity
        self._offset = 0
        self._before = b""
        return perf_map

    def _read(self, file: RegularFile, perf_map: PerfMap, limit: int, settle: bool) -> None:
        """Reads on from the last complete line, checking the bytes before it first."""
        checked = len(self._before)
        data = file.pread(limit + checked, self._offset - checked)
        if data[:checked] != self._before:  # rewritten in place, not appended to
            perf_map = self._restart(file.identity)
            data = file.pread(limit, 0)
        else:
            data = data[checked:]
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) >= limit:
            end = len(data)  # a line longer than a whole read: skipped, not waited for
        if end:
            self._offset += end
            self._before = (self._before + data[:end])[-PERF_MAP_CHECKED:]
            perf_map.add_text(data[:end].decode("utf-8", "replace"), settle=settle)
