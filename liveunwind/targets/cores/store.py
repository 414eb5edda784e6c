"""Many cores at once: the files a folder of cores holds, and what systemd-coredump says of each.

``liveunwind core`` takes cores and folders of cores.  A folder is read one
level deep (no recursion): every entry but subfolders and hidden names —
systemd-coredump writes a core as ``.#core…`` and renames it once whole — in
name order, at most :data:`MAX_CORES` of them.  Whatever else an entry is (a
FIFO, a truncated core, a text file) is for the core reader to refuse in one
line; the run goes on.

systemd-coredump's store (``/var/lib/systemd/coredump``) names each core
``core.COMM.UID.BOOTID.PID.TIMESTAMP`` with ``.zst``, ``.xz`` or ``.lz4``
when compressed (COMM with ``.``, ``/`` and space escaped as ``\\xNN``;
TIMESTAMP in microseconds), and sets extended attributes on it:
``user.coredump.exe`` (the executable's path), ``.comm``, ``.pid``, ``.uid``,
``.gid``, ``.signal``, ``.timestamp`` (systemd's ``coredump.c``,
``fix_xattr``).  :func:`describe` reads both; the executable it names is what
the report calls the core's program (the core's own NT_FILE / AT_EXECFN
otherwise).  It is not handed to the core reader as the executable: a
program replaced since the crash would then refuse the core, where the
reader finds the right file by build-id, or says it is missing.
"""

from __future__ import annotations

import os
import re
import stat

from liveunwind.targets.files import FileError, open_file

#: Most cores taken from one folder (a store keeps a few thousand at most; this
#: bounds the listing and the report, whatever the folder holds).
MAX_CORES = 100_000
#: Longest extended attribute value read (a path: PATH_MAX is 4096).
_MAX_ATTRIBUTE = 4096
#: The extended attributes systemd-coredump sets, by what the report calls them.
_ATTRIBUTES = {"executable": "user.coredump.exe", "comm": "user.coredump.comm"}
#: ``core.COMM.UID.BOOTID.PID.TIMESTAMP[.zst|.xz|.lz4]``: COMM has no dot (escaped).
_SYSTEMD_NAME = re.compile(
    r"core\.(?P<comm>[^.]*)\.(?P<uid>\d+)\.(?P<boot_id>[0-9a-f]{32})\.(?P<pid>\d+)"
    r"\.(?P<timestamp>\d+)(?:\.(?:zst|xz|lz4))?"
)
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


class CoreEntry:
    """One core of a run: its path and what systemd-coredump recorded of it, if it did."""

    __slots__ = ("comm", "executable", "path", "pid", "timestamp")

    def __init__(
        self,
        path: str,
        *,
        executable: str | None = None,
        comm: str | None = None,
        pid: int | None = None,
        timestamp: int | None = None,
    ) -> None:
        self.path = path
        #: The executable's path as ``user.coredump.exe`` gives it (None without it).
        self.executable = executable
        #: The process's command name, from the attribute or the file name.
        self.comm = comm
        self.pid = pid
        #: When it crashed, in microseconds since the epoch (systemd's TIMESTAMP).
        self.timestamp = timestamp


class StoreError(Exception):
    """A folder of cores could not be listed (the message says why)."""


def core_entries(paths: list[str]) -> list[CoreEntry]:
    """The cores ``paths`` name: each file as it is, each folder's entries in name order.

    A path that does not exist is kept as it is: opening it says so, in
    its place in the report.  StoreError: a folder that cannot be listed,
    or more than :data:`MAX_CORES` cores in all.
    """
    entries: list[CoreEntry] = []
    for path in paths:
        try:
            is_folder = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError:
            is_folder = False
        names = list_folder(path) if is_folder else [path]
        entries.extend(describe(name) for name in names)
        if len(entries) > MAX_CORES:
            raise StoreError(f"more than {MAX_CORES} cores given; name fewer")
    return entries


def list_folder(folder: str) -> list[str]:
    """The paths of ``folder``'s entries that may be cores, in name order (see the module)."""
    paths = []
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                if entry.name.startswith(".") or entry.is_dir(follow_symlinks=False):
                    continue
                paths.append(os.path.join(folder, entry.name))
                if len(paths) > MAX_CORES:
                    raise StoreError(f"{folder} holds more than {MAX_CORES} entries")
    except OSError as error:
        raise StoreError(f"cannot list {folder}: {error.strerror or error}") from None
    return sorted(paths)


def describe(path: str) -> CoreEntry:
    """What systemd-coredump recorded of the core at ``path``: its name's fields, its attributes.

    A file systemd-coredump did not write gives an entry with the path alone.
    """
    fields = _SYSTEMD_NAME.fullmatch(os.path.basename(path))
    attributes = _attributes(path) if fields is not None else {}
    comm = attributes.get("comm")
    if comm is None and fields is not None:
        comm = _ESCAPE.sub(lambda match: chr(int(match.group(1), 16)), fields["comm"])
    return CoreEntry(
        path,
        executable=attributes.get("executable"),
        comm=comm,
        pid=int(fields["pid"]) if fields is not None else None,
        timestamp=int(fields["timestamp"]) if fields is not None else None,
    )


def _attributes(path: str) -> dict[str, str]:
    """systemd-coredump's extended attributes of ``path`` (those it has, read bounded).

    Read through a descriptor :func:`open_file` checked to be a regular
    file; a file system without extended attributes has none.
    """
    found: dict[str, str] = {}
    try:
        with open_file(path) as file:
            for name, attribute in _ATTRIBUTES.items():
                try:
                    value = os.getxattr(file.fd, attribute)
                except OSError:
                    continue  # absent (ENODATA), unsupported, or longer than any path
                if 0 < len(value) <= _MAX_ATTRIBUTE:
                    found[name] = value.decode("utf-8", "surrogateescape")
    except FileError:
        pass  # the core reader says why, in the core's line of the report
    return found
