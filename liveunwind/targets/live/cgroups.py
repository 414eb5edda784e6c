"""The processes of a cgroup, or of a container, found from /proc and /sys alone.

``--cgroup PATH``: every process in the cgroup and its descendants, read
from each directory's ``cgroup.procs``.  The directory must be on a cgroup
file system (its device is a ``cgroup2`` or ``cgroup`` mount's in
``/proc/self/mountinfo``); a path not under such a mount is taken relative
to the cgroup v2 mount, as ``/proc/PID/cgroup`` writes it (``0::/a/b``).

``--container ID-or-PID`` needs no container runtime: every runtime names
its container's cgroup by the container's 64-hex-digit id (docker's
``/docker/ID`` or ``docker-ID.scope``, podman's ``libpod-ID.scope``,
containerd's and CRI-O's ``…-ID.scope``, Kubernetes' ``/kubepods/…/ID``).

- An id (or a unique prefix of one): the processes whose
  ``/proc/PID/cgroup`` has a path component naming it — the container's
  cgroup and every cgroup below it, in any hierarchy (v2, or v1 where the
  runtime uses only those).
- A pid (a number that is a running process): its container as above when
  its cgroup names one; otherwise, when it is in another pid namespace than
  ours (``unshare --pid``, a runtime without cgroups of its own), every
  process of that pid namespace (``/proc/PID/ns/pid``: the same namespace,
  not those nested in it); otherwise it is in no container.

Every file is a kernel file at a path built here, read bounded; the
directories of a cgroup are opened relative to their parent's descriptor,
never following a link, and each ``cgroup.procs`` is checked regular.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from liveunwind.errors import (
    NoSuchProcessError,
    PermissionDeniedError,
    TargetError,
    UsageError,
)
from liveunwind.targets.files import READ_FLAGS, read_kernel_file, read_to_end

#: Most processes one cgroup or container may list (beyond it the run is refused, never cut).
MAX_PROCESSES = 1 << 16
#: Most cgroup directories walked below the one asked for.
MAX_CGROUPS = 1 << 14
#: Deepest cgroup walked below it (the kernel's cgroup.max.depth is unlimited by default).
MAX_DEPTH = 64
#: Most bytes of one cgroup.procs (MAX_PROCESSES pids of 7 digits and a newline fit).
_PROCS_LIMIT = 1 << 20
#: Most bytes of /proc/PID/cgroup (one line per hierarchy) and of /proc/self/mountinfo.
_CGROUP_FILE_LIMIT = 1 << 16
_MOUNTINFO_LIMIT = 1 << 20
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: A container id as runtimes write it in a cgroup path component: 64 hex digits, ending
#: the component or followed by ``.scope``, after a ``prefix-`` or ``prefix:`` if any.
_CONTAINER_COMPONENT = re.compile(r"(?:^|[-:])([0-9a-f]{64})(?:\.scope)?$")


class Members:
    """The processes found, and how (what ``--verbose`` says was used)."""

    __slots__ = ("how", "pids")

    def __init__(self, pids: list[int], how: str) -> None:
        self.pids = pids
        self.how = how


# -- --cgroup ---------------------------------------------------------------------------


def cgroup_members(path: str) -> Members:
    """Every process in the cgroup at ``path`` and the cgroups below it, by pid."""
    if not path:
        raise UsageError("--cgroup: an empty path (the whole hierarchy is --all)")
    mounts = _cgroup_mounts()
    directory = _cgroup_directory(path, mounts)
    walk = _Walk(directory)
    try:
        top = os.open(directory, _DIRECTORY_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        raise NoSuchProcessError(f"--cgroup {path}: no such cgroup ({directory})") from None
    except OSError as error:
        raise UsageError(f"--cgroup {path}: {directory}: {error.strerror}") from None
    try:
        if os.fstat(top).st_dev not in {device for device, _ in mounts}:
            raise UsageError(f"--cgroup {path}: {directory} is not on a cgroup file system")
        walk.read(top, 0)
    except OSError as error:
        raise TargetError(f"--cgroup {path}: reading {directory}: {error.strerror}") from None
    finally:
        os.close(top)
    pids = sorted(walk.pids)
    return Members(pids, f"cgroup {directory} (and {walk.walked - 1} cgroups below it)")


def _cgroup_directory(path: str, mounts: list[tuple[int, tuple[str, str]]]) -> str:
    """``path`` made absolute: as given under a cgroup mount, else under the v2 mount."""
    resolved = os.path.normpath(path) if os.path.isabs(path) else ""
    if any(_under(resolved, point) for _, (point, _) in mounts):
        return resolved
    version_2 = [point for _, (point, kind) in mounts if kind == "cgroup2"]
    if not version_2:
        raise UsageError(f"--cgroup {path}: no cgroup v2 hierarchy is mounted here")
    relative = os.path.normpath("/" + path).lstrip("/")
    return os.path.join(version_2[0], relative) if relative else version_2[0]


def _under(path: str, point: str) -> bool:
    return bool(path) and (path == point or path.startswith(point.rstrip("/") + "/"))


def _cgroup_mounts() -> list[tuple[int, tuple[str, str]]]:
    """(device, (mount point, "cgroup2" or "cgroup")) of each cgroup mount we see."""
    text = read_kernel_file("/proc/self/mountinfo", _MOUNTINFO_LIMIT).decode("utf-8", "replace")
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        kind = line.split(" - ", 1)[1].split()[0]
        if kind not in ("cgroup2", "cgroup"):
            continue
        major, _, minor = fields[2].partition(":")
        point = _unescape(fields[4])
        mounts.append((os.makedev(int(major), int(minor)), (point, kind)))
    return mounts


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


class _Walk:
    """The pids found so far below one cgroup, and how many cgroups were read, bounded."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.pids: set[int] = set()
        self.walked = 0

    def read(self, fd: int, depth: int) -> None:
        """Reads the cgroup open at ``fd`` and those below it, depth first.

        At most MAX_DEPTH descriptors are open at once (one per level), so a
        cgroup with thousands of children cannot exhaust them.
        """
        self.walked += 1
        if self.walked > MAX_CGROUPS:
            raise UsageError(f"--cgroup {self.directory}: more than {MAX_CGROUPS} cgroups below")
        if depth > MAX_DEPTH:
            raise UsageError(f"--cgroup {self.directory}: cgroups nested deeper than {MAX_DEPTH}")
        self.pids.update(_procs(fd))
        if len(self.pids) > MAX_PROCESSES:
            raise UsageError(f"--cgroup {self.directory}: more than {MAX_PROCESSES} processes")
        for name in _subdirectory_names(fd):
            try:
                child = os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue  # removed meanwhile
            try:
                self.read(child, depth + 1)
            finally:
                os.close(child)


def _procs(directory: int) -> list[int]:
    """The pids a cgroup directory's cgroup.procs lists ([] once the cgroup is removed)."""
    try:
        fd = os.open("cgroup.procs", READ_FLAGS | os.O_NOFOLLOW, dir_fd=directory)
    except FileNotFoundError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        text = read_to_end(fd, _PROCS_LIMIT)
    except OSError as error:
        if error.errno == errno.ENODEV:  # removed while open
            return []
        raise
    finally:
        os.close(fd)
    return [int(word) for word in text.split() if word.isdigit()]


def _subdirectory_names(directory: int) -> list[str]:
    """The child cgroups' names (a cgroup file system holds no links), [] once removed."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entry.name for entry in entries if entry.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


# -- --container ------------------------------------------------------------------------


def container_members(key: str, candidates: list[int]) -> Members:
    """The processes of the container ``key`` names, among ``candidates``.

    ``key`` is a pid when it is one of a running process, as written (no
    leading zero); else an id, or the prefix of one, in hex digits.
    """
    if key.isdigit() and not key.startswith("0") and os.path.exists(f"/proc/{key}/stat"):
        return _by_process(int(key), candidates)
    if not re.fullmatch(r"[0-9a-fA-F]{1,64}", key):
        raise UsageError(f"--container {key}: neither a container id (hex digits) nor a process")
    return _by_id(key.lower(), candidates, f"--container {key}")


def _by_id(prefix: str, candidates: list[int], asked: str) -> Members:
    """The processes whose cgroup paths name the one container id starting with ``prefix``."""
    found: dict[str, str] = {}  # id → its cgroup (the path down to the component naming it)
    pids = []
    for pid in candidates:
        named = _container_cgroups(pid)
        matching = {cid: cgroup for cid, cgroup in named.items() if cid.startswith(prefix)}
        if matching:
            pids.append(pid)
            for cid, cgroup in matching.items():
                found.setdefault(cid, cgroup)
    if not found:
        raise NoSuchProcessError(f"{asked}: no process's cgroup names a container {prefix}")
    if len(found) > 1:
        listed = ", ".join(sorted(cid[:12] for cid in found))
        raise UsageError(f"{asked}: several containers' ids start so: {listed}")
    ((cid, cgroup),) = found.items()
    return Members(pids, f"container {cid[:12]} by its cgroup {cgroup}")


def _by_process(pid: int, candidates: list[int]) -> Members:
    """Its container's cgroup, else its pid namespace when not ours.

    A container we run in ourselves is the host to us: its id, in every
    process's cgroup paths (cgroup v1 has no cgroup namespace), names none.
    """
    named = set(_container_cgroups(pid)) - set(_container_cgroups(os.getpid()))
    if len(named) == 1:
        return _by_id(named.pop(), candidates, f"--container {pid}")
    try:
        asked = os.stat(f"/proc/{pid}/ns/pid")
    except (FileNotFoundError, ProcessLookupError):
        raise NoSuchProcessError(f"--container {pid}: process {pid} has exited") from None
    except OSError as error:
        raise PermissionDeniedError(
            f"--container {pid}: cannot read its pid namespace: {error.strerror}"
        ) from None
    namespace = (asked.st_dev, asked.st_ino)
    if namespace == _pid_namespace(os.getpid()):
        raise NoSuchProcessError(
            f"--container {pid}: process {pid} is in no container: its cgroup names no "
            "container id and it shares our pid namespace (--cgroup takes its cgroup)"
        )
    pids = [other for other in candidates if _pid_namespace(other) == namespace]
    return Members(pids, f"the pid namespace of process {pid} (pid:[{namespace[1]}])")


def _container_cgroups(pid: int) -> dict[str, str]:
    """Container ids named in ``pid``'s cgroup paths, each with the cgroup that names it."""
    try:
        raw = read_kernel_file(f"/proc/{pid}/cgroup", _CGROUP_FILE_LIMIT)
    except OSError:
        return {}  # gone meanwhile
    return named_containers(raw.decode("utf-8", "replace"))


def named_containers(text: str) -> dict[str, str]:
    """The container ids a /proc/PID/cgroup text names, each with the cgroup naming it."""
    named: dict[str, str] = {}
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        components = path.split("/")
        for depth, component in enumerate(components):
            found = _CONTAINER_COMPONENT.search(component)
            if found:
                named.setdefault(found.group(1), "/".join(components[: depth + 1]))
                break
    return named


def _pid_namespace(pid: int) -> tuple[int, int] | None:
    """(device, inode) of ``pid``'s pid namespace, or None once it is gone."""
    try:
        status = os.stat(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    return status.st_dev, status.st_ino
