"""Opening files by path when the path, or what it names, may be hostile.

liveunwind runs as root and opens paths that a target or a core chose: the
files a process maps, its perf map, the files a core's NT_FILE note names,
the file a user gives.  Any of them can be a FIFO (``open`` blocks forever),
a device (opening ``/dev/ptmx`` or ``/dev/watchdog`` has effects), a
directory, or a symlink that leads out of the target's root.  So every file
opened by path goes through :func:`open_file` or :func:`open_in_root` (and
every ELF file by path through :func:`open_elf`):

- the path is first opened with ``O_PATH``, which reaches the inode without
  opening it (no driver ``open``, no FIFO rendezvous), and ``fstat`` must
  say it is a regular file — else :class:`NotRegularFileError` names the
  path and what it is;
- only then is that very inode reopened for reading, through
  ``/proc/self/fd``, with ``O_NONBLOCK | O_NOCTTY | O_CLOEXEC``;
- reads are bounded twice: by the caller's limit and by the size ``fstat``
  reported (a /proc or /sys file says 0 or 4096 and reads as that much).

No file named by path is ever mmapped: a file truncated after it was mapped
turns the next read of a page past its new end into SIGBUS, which kills
liveunwind with no output (a deployment that copies over a library instead
of renaming, a log-rotating JIT, NFS).  :class:`FileContents` reads what is
asked for with ``pread`` into memory of our own, and notices a file that
changed under it (:class:`FileChangedError`).

:func:`open_in_root` resolves a path the way the target would see it:
inside its root directory (``/proc/PID/root``), where ``..`` stops at the
root and an absolute symlink starts again from it — with ``openat2``'s
``RESOLVE_IN_ROOT`` (Linux ≥ 5.6), else component by component.

Kernel files are another matter: ``/proc/PID/stat``, ``status``, ``maps``,
``mem`` and ``/proc/sys/...`` are named by liveunwind itself, under a
procfs it trusts, so no component of the path comes from the target and
none can be a FIFO or a device.  They report a size of 0, so the
regular-file size bound cannot apply; :func:`read_kernel_file` reads them to
their end, bounded by a limit only.  ``/proc/PID/mem`` is not read through
this module at all: it is opened once and read with ``pread`` at addresses.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat

from liveunwind.errors import FormatError, TargetError
from liveunwind.formats.elf import ElfImage, LazyBytes

#: Flags of every read-open of a file named by path.
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_CLOEXEC
#: Symlinks followed when resolving one path by hand (the kernel's own limit).
MAX_SYMLINKS = 40
#: What a kernel file read may return at most unless the caller says otherwise.
KERNEL_FILE_LIMIT = 1 << 20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


class FileError(TargetError):
    """A file named by path cannot be used: missing, unreadable, or not a regular file.

    ``errno`` is the error number when the system refused (ENOENT, EACCES…),
    else None.
    """

    def __init__(self, path: str, reason: str, error_number: int | None = None) -> None:
        self.path = path
        self.reason = reason
        self.errno = error_number
        super().__init__(f"{path}: {reason}")


class NotRegularFileError(FileError):
    """The path names a FIFO, a device, a directory, a socket…; it was not opened."""

    def __init__(self, path: str, kind: str) -> None:
        self.kind = kind
        super().__init__(path, f"is {kind}, not a regular file")


class FileChangedError(FormatError):
    """A file read lazily changed since it was opened: shorter, or written (size, mtime).

    A FormatError, because what is read from it is no longer what the
    target mapped: every decoder's caller already turns one into a problem
    of the module and a fallback of the frames in it, and the rest of the
    backtrace goes on.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO", "a regular file")."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a file liveunwind can read"


class RegularFile:
    """A regular file opened for reading, with what ``fstat`` said when it was opened."""

    __slots__ = ("fd", "note", "path", "status")

    def __init__(self, fd: int, path: str, status: os.stat_result) -> None:
        self.fd = fd
        #: The path it was opened by (for messages).
        self.path = path
        self.status = status
        #: What the user should know about how it was found (e.g. not by its path), if anything.
        self.note = ""

    @property
    def size(self) -> int:
        return self.status.st_size

    @property
    def identity(self) -> tuple[int, int]:
        """(st_dev, st_ino): which file this is."""
        return self.status.st_dev, self.status.st_ino

    def pread(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset``, never past the size fstat reported."""
        size = min(size, self.size - offset)
        if size <= 0 or offset < 0:
            return b""
        try:
            return os.pread(self.fd, size, offset)
        except OSError as error:
            raise FileError(self.path, f"cannot read: {error.strerror}", error.errno) from None

    def read(self, limit: int) -> bytes:
        """The file from its start: at most ``limit`` bytes, and at most its size."""
        return self.pread(limit, 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RegularFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_file(path: str) -> RegularFile:
    """Opens ``path`` for reading if it is a regular file; never opens anything else.

    Raises FileError (NotRegularFileError for a FIFO, device, directory…).
    """
    try:
        handle = os.open(path, _PATH_FLAGS)
    except OSError as error:
        raise FileError(path, error.strerror or str(error), error.errno) from None
    return reopen(handle, path)


def open_in_root(root: str, path: str) -> RegularFile:
    """Opens ``path`` as a process whose root directory is ``root`` would resolve it.

    ``root`` is typically ``/proc/PID/root``.  Absolute symlinks and ``..``
    stay inside it; "magic" links (``/proc/*/fd/*``, ``/proc/*/root``) are
    not followed.  Raises FileError.
    """
    try:
        root_fd = os.open(root, _PATH_FLAGS | os.O_DIRECTORY)
    except OSError as error:
        raise FileError(root, error.strerror or str(error), error.errno) from None
    try:
        handle = _resolve_in_root(root_fd, path)
    except OSError as error:
        raise FileError(path, error.strerror or str(error), error.errno) from None
    finally:
        os.close(root_fd)
    return reopen(handle, path)


def reopen(handle: int, path: str) -> RegularFile:
    """Reopens the ``O_PATH`` descriptor ``handle`` for reading if it is a regular file.

    Takes ownership of ``handle`` (it is closed either way).  Reopening
    through ``/proc/self/fd`` opens exactly the inode that was checked, so
    nothing can be swapped in between the check and the open.
    """
    try:
        status = os.fstat(handle)
        if not stat.S_ISREG(status.st_mode):
            raise NotRegularFileError(path, kind_of(status.st_mode))
        try:
            fd = os.open(f"/proc/self/fd/{handle}", READ_FLAGS)
        except OSError as error:
            raise FileError(path, error.strerror or str(error), error.errno) from None
    finally:
        os.close(handle)
    return RegularFile(fd, path, status)


#: Why a file looked for is simply not there: how a search usually ends, not a problem.
ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP, errno.ENAMETOOLONG)


#: MAP_NORESERVE (0x4000 on x86_64, aarch64 and riscv64, which Python's mmap does not name):
#: the copy is as large as the file, and a debug file can be larger than RAM and swap, of
#: which only the pages read are ever touched.
_MAP_NORESERVE = 0x4000


class FileContents(LazyBytes):
    """A regular file's bytes, copied into memory of our own as far as they are asked for.

    ``data`` is an anonymous private mapping of the file's size, zero pages
    until :meth:`fill` reads a range into it with ``pread`` (in chunks of
    :data:`CHUNK`, each read once).  Reading it can never raise SIGBUS, as a
    mapping of the file would once the file shrinks; an image asks only for
    the headers and sections it decodes, so what is copied is about what a
    mapping would have faulted in.  Measured on bench's 9-thread C target
    (``liveunwind pid``, 30 runs each, the two builds interleaved): 41.2 ms
    of CPU cold against 40.5 with mmap (median), 2.05 ms against 2.00 per
    warm backtrace; Debian's libc and its debug file cost 0.45 ms more to
    open, decode the tables and symbols of (fresh pages of our own fault in
    one by one, a file's sixteen at a time).  The file stays open (its descriptor
    closed with this object), and every read is checked against what
    ``fstat`` said when it was opened: a file that shrank or was written
    since raises :class:`FileChangedError`, then and on every later read,
    while what was already read stays as it was.
    """

    #: Bytes read at once: a section's worth, so that small reads around it cost no pread.
    CHUNK = 1 << 16

    __slots__ = ("_chunks", "_file", "data", "why")

    def __init__(self, file: RegularFile) -> None:
        self._file = file
        size = file.size
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
        try:
            self.data: mmap.mmap | bytes = mmap.mmap(-1, size, flags) if size > 0 else b""
        except OSError as error:
            raise FileError(file.path, f"no memory for a copy: {error.strerror}") from None
        #: One byte per chunk, set once the chunk is read.
        self._chunks = bytearray(-(-size // self.CHUNK))
        #: Why the file can no longer be read (it changed), once it is known.
        self.why: str | None = None

    @property
    def path(self) -> str:
        return self._file.path

    def fill(self, offset: int, size: int) -> None:
        """Makes ``data[offset:offset + size]`` hold the file's bytes (clipped to its size).

        Raises FileChangedError when the file is no longer what it was when
        opened, and FileError when the system refuses the read.
        """
        chunk = self.CHUNK
        chunks = self._chunks
        first = max(offset, 0) // chunk
        last = -(-min(offset + size, len(self.data)) // chunk)
        index = chunks.find(0, first, last) if last > first else -1
        while index >= 0:
            end = chunks.find(1, index, last)
            end = last if end < 0 else end
            self._read_chunks(index, end)
            index = chunks.find(0, end, last) if end < last else -1

    def _read_chunks(self, first: int, end: int) -> None:
        """Reads chunks ``first``..``end - 1`` in one read, then checks the file is unchanged."""
        if self.why is not None:
            raise FileChangedError(self.path, self.why)
        start = first * self.CHUNK
        size = min(end * self.CHUNK, len(self.data)) - start
        assert isinstance(self.data, mmap.mmap)  # an empty file has no chunks to read
        # Straight into place: os.pread would copy twice, through a bytes object of its own.
        # A loop, as one read returns at most 2 GiB; a read of 0 bytes is the file's end.
        done = 0
        with memoryview(self.data) as view:
            while done < size:
                try:
                    got = os.preadv(
                        self._file.fd, [view[start + done : start + size]], start + done
                    )
                except OSError as error:
                    reason = f"cannot read: {error.strerror}"
                    raise FileError(self.path, reason, error.errno) from None
                if got == 0:
                    break
                done += got
        self._check(done < size)
        self._chunks[first:end] = b"\1" * (end - first)

    def _check(self, short: bool) -> None:
        """Raises FileChangedError if the file is not as it was opened (or a read came up short)."""
        if self.changed() is None and short:
            self.why = "came up short of the size it had when it was opened"
        if self.why is not None:
            raise FileChangedError(self.path, self.why)

    def changed(self) -> str | None:
        """Why the file is not as it was opened (shorter, or written: size or mtime), or None.

        One ``fstat``; once it has changed it stays changed.
        """
        if self.why is not None:
            return self.why
        was = self._file.status
        try:
            now = os.fstat(self._file.fd)
        except OSError as error:
            self.why = f"cannot be checked: {error.strerror}"
            return self.why
        if now.st_size < was.st_size:
            self.why = f"was truncated to {now.st_size} bytes since it was opened ({was.st_size})"
        elif now.st_size != was.st_size or now.st_mtime_ns != was.st_mtime_ns:
            self.why = "was written to since it was opened (its size or mtime changed)"
        return self.why

    def identity(self) -> tuple[int, int, int, int]:
        status = self._file.status
        return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns

    def close(self) -> None:
        """Closes the file: what was read stays readable, the rest can no longer be."""
        self._file.close()
        if self.why is None:
            self.why = "was closed"

    def __del__(self) -> None:
        self._file.close()


def map_elf(file: RegularFile) -> ElfImage:
    """The ELF image in ``file``, read as it is needed (see :class:`FileContents`).

    The one place a file becomes an :class:`ElfImage`; ``file`` now belongs
    to the image.  Raises FileError (the file cannot be read) or
    FormatError (it is not ELF, or it changed).
    """
    return ElfImage(FileContents(file), origin=file.path)


def open_elf(path: str) -> ElfImage:
    """The ELF image in the regular file at ``path``, read as needed: the one way one is opened.

    Raises FileError (NotRegularFileError for a FIFO, a device…; ``errno``
    in :data:`ABSENT` when it is simply not there) or FormatError; callers
    that search turn those into "not this one" or into a problem.
    """
    return map_elf(open_file(path))


def read_kernel_file(path: str, limit: int = KERNEL_FILE_LIMIT) -> bytes:
    """A /proc (or /sys) file liveunwind names itself, read to its end, at most ``limit`` bytes.

    Raises OSError as ``open`` would (FileNotFoundError once a process is gone).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return read_to_end(fd, limit)
    finally:
        os.close(fd)


def read_to_end(fd: int, limit: int) -> bytes:
    """What an open kernel file gives until its end, at most ``limit`` bytes.

    Kernel files (/proc, /sys, cgroupfs) say size 0 and are read until a read
    returns nothing; the limit bounds one that never ends.
    """
    chunks = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# -- resolving inside a root ---------------------------------------------------------

#: Whether openat2 may be tried (cleared when the kernel lacks it; tests clear it too).
use_openat2 = True


def _resolve_in_root(root_fd: int, path: str) -> int:
    """An ``O_PATH`` descriptor of ``path`` resolved inside ``root_fd``."""
    global use_openat2
    if use_openat2:
        from liveunwind.targets.live import syscalls

        try:
            return syscalls.openat2_in_root(root_fd, path, _PATH_FLAGS)
        except OSError as error:
            if error.errno not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter
                raise
            use_openat2 = False
    return _resolve_by_hand(root_fd, path)


def _resolve_by_hand(root_fd: int, path: str) -> int:
    """Component by component with ``O_NOFOLLOW``; symlinks read and resolved against the root.

    ``..`` goes back to the directory the walk came from (never above the
    root); an absolute link starts again at the root; at most
    :data:`MAX_SYMLINKS` links are followed.  Link text is only ever
    resolved here, so a magic link is just a name that leads nowhere.
    """
    parts = [part for part in path.split("/") if part]
    trail = [os.dup(root_fd)]  # the directories from the root down to where the walk is
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == ".":
                continue
            if name == "..":
                if len(trail) > 1:
                    os.close(trail.pop())
                continue
            handle = os.open(name, _PATH_FLAGS | os.O_NOFOLLOW, dir_fd=trail[-1])
            mode = os.fstat(handle).st_mode
            if stat.S_ISLNK(mode):
                os.close(handle)
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                target = os.readlink(name, dir_fd=trail[-1])
                if target.startswith("/"):
                    while len(trail) > 1:
                        os.close(trail.pop())
                parts[:0] = [part for part in target.split("/") if part]
                continue
            if parts and not stat.S_ISDIR(mode):
                os.close(handle)
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            trail.append(handle)
        if len(trail) == 1:
            return os.dup(trail[0])  # the path named the root itself
        return trail.pop()
    finally:
        for handle in trail:
            os.close(handle)
