"""Thin ctypes bindings for the system calls a live target needs.

python-ptrace wraps ``ptrace(2)`` but not PTRACE_SEIZE / PTRACE_INTERRUPT /
PTRACE_GETREGSET by name, nor ``process_vm_readv(2)``, and importing it costs
about 18 ms — more than a whole cold backtrace should take.  So the hot path
calls libc directly here; python-ptrace is used only for the PEEKDATA
fallback (see :mod:`liveunwind.targets.live.ptrace`).
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    from collections.abc import Iterable
else:
    # ctypes's names made from _ctypes: the ctypes package costs 2.5 ms of a cold start
    from liveunwind.targets.live import ffi as ctypes

PTRACE_DETACH = 17
PTRACE_GETREGSET = 0x4204
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
NT_PRSTATUS = 1
PR_SET_TIMERSLACK = 29
#: openat2(2): one number on every architecture (it came after the syscall tables were
#: unified).
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
#: waitpid option: wait for any child, cloned threads included.
WALL = 0x40000000
#: Most iovecs one process_vm_readv call takes (UIO_MAXIOV).
IOV_MAX = 1024
#: Size from which :func:`copy_remote` copies into a mapping of its own.
MAP_AT = 1 << 20


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_ptrace = _libc.ptrace
_ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_ptrace.restype = ctypes.c_long
_process_vm_readv = _libc.process_vm_readv
_process_vm_readv.argtypes = [
    ctypes.c_int,
    ctypes.POINTER(_IoVec),
    ctypes.c_ulong,
    ctypes.POINTER(_IoVec),
    ctypes.c_ulong,
    ctypes.c_ulong,
]
_process_vm_readv.restype = ctypes.c_ssize_t
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def ptrace(request: int, tid: int, address: int = 0, data: int = 0) -> int:
    """Calls ptrace(2); raises OSError with the errno on failure."""
    result = _ptrace(request, tid, address, data)
    if result == -1:
        code = ctypes.get_errno()
        if code:
            raise OSError(code, os.strerror(code))
    return result


def set_timer_slack(nanoseconds: int) -> None:
    """prctl(PR_SET_TIMERSLACK) of the calling thread: how late its sleeps may end (default
    50 µs); best effort."""
    _libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(nanoseconds), 0, 0, 0)


#: ``c_char * size`` for each size of register set asked: ctypes keeps an array type only
#: while something else holds it, and a new one is a class, a reference cycle left to the
#: garbage collector (one every few samples of a profile).
_REGSET_BUFFERS: dict[int, type[ctypes.Array[ctypes.c_char]]] = {}


def get_regset(tid: int, size: int) -> bytes:
    """The NT_PRSTATUS register set of a ptrace-stopped thread (at most ``size`` bytes)."""
    kind = _REGSET_BUFFERS.get(size)
    if kind is None:
        kind = _REGSET_BUFFERS[size] = ctypes.c_char * size
    buffer = kind()
    vector = _IoVec(ctypes.addressof(buffer), size)
    ptrace(PTRACE_GETREGSET, tid, NT_PRSTATUS, ctypes.addressof(vector))
    return buffer.raw[: vector.length]


def read_remote(pid: int, ranges: list[tuple[int, int]]) -> list[bytes | None]:
    """Reads several ranges of another process with as few process_vm_readv calls as possible.

    Returns one entry per range: its bytes, or None where the range could not
    be read in full.  The kernel stops at the first unreadable iovec, so a
    partial transfer is resumed after the failing range.  Each batch goes
    into one buffer, and both iovec arrays are packed with one call each into
    plain buffers: a ctypes array type per size (made anew for every new
    length, and kept by ctypes for good) cost more than the read itself.
    """
    results: list[bytes | None] = [None] * len(ranges)
    start = 0
    while start < len(ranges):
        batch = ranges[start : start + IOV_MAX]
        sizes = [size for _, size in batch]
        buffer = bytearray(max(sum(sizes), 1))
        anchor = ctypes.c_char.from_buffer(buffer)  # pins the buffer while the kernel writes
        offsets = list(itertools.accumulate(sizes, initial=0))
        base = ctypes.addressof(anchor)
        local = _iovecs([(base + offset, size) for offset, size in zip(offsets, sizes)])
        done = _readv(pid, local, _iovecs(batch), len(batch))
        del anchor  # the buffer may be sliced from here on
        view = memoryview(buffer)
        index = _read_in_full(sizes, done)
        for at in range(index):
            results[start + at] = view[offsets[at] : offsets[at + 1]].tobytes()
        view.release()
        # Range ``index`` failed (or was partial): skip it and carry on after it.
        start += index + 1
    return results


def _iovecs(ranges: list[tuple[int, int]]) -> bytearray:
    """``struct iovec`` records for ``(address, size)`` ranges, packed in one call."""
    return bytearray(struct.pack(f"{2 * len(ranges)}Q", *itertools.chain.from_iterable(ranges)))


def _readv(pid: int, local: bytearray, remote: bytearray, count: int) -> int:
    """process_vm_readv(2) of ``count`` packed iovecs each side: the bytes transferred.

    0 when the first remote range is unreadable (EFAULT, EIO: the caller
    skips it and goes on); any other error raises OSError.
    """
    done = _process_vm_readv(
        pid,
        ctypes.byref(_IoVec.from_buffer(local)),
        count,
        ctypes.byref(_IoVec.from_buffer(remote)),
        count,
        0,
    )
    if done < 0:
        code = ctypes.get_errno()
        if code not in (errno.EFAULT, errno.EIO):
            raise OSError(code, os.strerror(code))
        return 0
    return int(done)


def _read_in_full(sizes: Iterable[int], done: int) -> int:
    """How many of the ranges, in order, ``done`` transferred bytes filled completely.

    The kernel fills the iovecs in order and stops at the first it cannot
    read, so the range after these is the one that failed (or came in part).
    """
    count = 0
    for size in sizes:
        if done < size:
            break
        done -= size
        count += 1
    return count


class PlannedRead:
    """A batch of reads of another process made ready before it stops: the system call is left.

    Packing the iovec arrays and allocating (so zero-filling, so touching)
    the buffers is most of what reading a few dozen ranges costs besides the
    call itself; done here, while the process still runs, the stop pays for
    the call alone.  The kernel writes straight into one bytearray per
    range, and :meth:`run` hands those over: a planned read runs once.
    """

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = ranges
        self._buffers = [bytearray(max(size, 1)) for _, size in ranges]
        #: One (first index, count, local iovecs, remote iovecs) per IOV_MAX ranges.
        self._batches: list[tuple[int, int, bytearray, bytearray]] = []
        anchors = [ctypes.c_char.from_buffer(buffer) for buffer in self._buffers]
        for start in range(0, len(ranges), IOV_MAX):
            batch = ranges[start : start + IOV_MAX]
            local = [
                (ctypes.addressof(anchor), size)
                for anchor, (_, size) in zip(anchors[start : start + IOV_MAX], batch)
            ]
            self._batches.append((start, len(batch), _iovecs(local), _iovecs(batch)))
        #: Keep the buffers where the iovecs say they are until the read is done.
        self._anchors: list[ctypes.c_char] | None = anchors

    def run(self, pid: int) -> list[bytearray | None]:
        """Reads the ranges: each one's buffer, or None where it could not be read in full.

        After a range that fails, the rest of its batch is read the ordinary way.
        """
        if self._anchors is None:
            raise RuntimeError("a planned read runs once")
        ranges = self.ranges
        results: list[bytearray | None] = [None] * len(ranges)
        retry: list[int] = []
        for start, count, local, remote in self._batches:
            done = _readv(pid, local, remote, count)
            end = start + count
            index = start + _read_in_full((size for _, size in ranges[start:end]), done)
            for at in range(start, index):
                results[at] = self._buffers[at] if ranges[at][1] else bytearray()
            retry.extend(range(index + 1, end))
        self._anchors = None  # the buffers are the caller's from here on
        if retry:
            for index, data in zip(retry, read_remote(pid, [ranges[index] for index in retry])):
                results[index] = None if data is None else bytearray(data)
        return results


def copy_remote(
    pid: int, ranges: list[tuple[int, int]]
) -> list[bytearray | mmap.mmap | bytes | None]:
    """Like :func:`read_remote`, but the kernel writes straight into the buffers returned.

    One copy of the memory in liveunwind, never two (a ctypes buffer plus
    the bytes made of it).  Ranges (of at least one byte) of
    :data:`MAP_AT` or more go into an anonymous mapping of their own, which
    costs a system call but is not zero-filled first and is handed back to
    the system as a whole (anonymous: no file behind it, so no SIGBUS); smaller ones
    into a bytearray.

    Not all or nothing: a range readable only in part (it runs into a page
    that cannot be read, a file's page past its end) gives what was read of
    it from its start, shorter than asked (None when not a byte was read);
    the kernel stops there, and the next call goes on after it.
    """
    results: list[bytearray | mmap.mmap | bytes | None] = [None] * len(ranges)
    start = 0
    while start < len(ranges):
        batch = ranges[start : start + IOV_MAX]
        buffers = [bytearray(size) if size < MAP_AT else mmap.mmap(-1, size) for _, size in batch]
        # A char at each buffer's start holds it in place (as PlannedRead's): an array type
        # per length (``c_char * size``) was a new class per new length, a reference cycle
        # left to the collector, two a sample of bench/target.c's 9 threads.
        # An empty buffer has no char to hold (the kernel reads nothing into it).
        anchors = [ctypes.c_char.from_buffer(buffer) if buffer else None for buffer in buffers]
        local = _iovecs(
            [
                (ctypes.addressof(anchor) if anchor is not None else 0, len(buffer))
                for anchor, buffer in zip(anchors, buffers)
            ]
        )
        done = _readv(pid, local, _iovecs(batch), len(batch))
        del anchors  # the buffers may be resized or closed from here on
        sizes = [size for _, size in batch]
        index = _read_in_full(sizes, done)
        results[start : start + index] = buffers[:index]
        if index < len(batch):
            part = done - sum(sizes[:index])  # of the range the kernel stopped in
            if part > 0:
                buffer = buffers[index]
                if isinstance(buffer, bytearray):
                    del buffer[part:]
                    results[start + index] = buffer
                else:
                    results[start + index] = buffer[:part]
        start += index + 1
    return results


def openat2_in_root(root_fd: int, path: str, flags: int) -> int:
    """openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS: ``path`` as seen from ``root_fd``.

    Absolute symlinks and ``..`` resolve inside ``root_fd``; magic links
    (``/proc/*/fd/*``…) are refused.  Raises OSError (ENOSYS before Linux 5.6).
    """
    how = _OpenHow(flags, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
    fd = _syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(root_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)
