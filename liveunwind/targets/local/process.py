"""This process as an AddressSpace: the threads sampled by capture.py, its own memory read safely.

A process cannot ptrace itself, and under QEMU user mode nothing can, so a
thread's registers and stack come from :mod:`liveunwind.targets.local.capture`
(the thread copies them in a signal handler) and the unwinder reads those
copies.  Everything else — code, read-only data — is read from the
process's own memory without ever touching it directly, so a bad address
from a corrupt stack is an error, not a segfault: ``process_vm_readv`` on
our own pid, or where that does not exist (QEMU user mode answers ENOSYS) a
``write`` of the range into a pipe, which the kernel (or QEMU, checking the
guest's page table) refuses with EFAULT for memory that is not mapped
readable.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import itertools
import os
import struct
import threading

from liveunwind.arch import host_arch
from liveunwind.errors import FormatError, MemoryReadError, TargetError
from liveunwind.formats.elf import PT_LOAD
from liveunwind.targets.base import AddressSpace, Mapping, ThreadState
from liveunwind.targets.filefinder import open_image
from liveunwind.targets.files import read_kernel_file
from liveunwind.targets.live import procfs, syscalls
from liveunwind.targets.local.capture import ThreadSample, pthread_stack, sample_thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    from liveunwind.formats.elf import ElfImage
    from liveunwind.targets.files import RegularFile

_PAGE = os.sysconf("SC_PAGE_SIZE")
_unpack_word = struct.Struct("<Q").unpack_from


def sample(tid: int, pthread_id: int | None, *, timeout: float) -> ThreadSample:
    """Thread ``tid`` of this process at one instant, its stack copied to the end.

    The stack's extent comes from the thread library when the thread's
    ``pthread_t`` is known; otherwise a first signal tells where the thread's
    stack pointer is, its mapping is the stack, and a second signal copies it.
    """
    stack = pthread_stack(pthread_id) if pthread_id is not None else None
    if stack is None:
        first = sample_thread(tid, None, timeout=timeout)
        sp = first.registers.get(host_arch().sp, 0)
        mapping = _mapping_at(read_own_maps(), sp)
        if mapping is None:
            return first
        stack = (mapping.start, mapping.end)
    return sample_thread(tid, stack, timeout=timeout)


def read_own_maps() -> list[Mapping]:
    return procfs.read_maps("self")


class LocalProcess(AddressSpace):
    """AddressSpace of this process, with the sampled threads' stacks as they were copied."""

    pid: int

    def __init__(self, samples: list[ThreadSample]) -> None:
        self.arch = host_arch()
        self.pid = os.getpid()
        self._samples = samples
        # liveunwind maps the files it reads (shared and read-only): they are not loaded
        # code, and grouped with the loader's mappings of the same file they would skew its
        # load bias.  Loaders map privately.
        mappings = [
            mapping
            for mapping in read_own_maps()
            if not (mapping.perms[3:4] == "s" and not mapping.executable)
        ]
        if not any(mapping.executable and mapping.is_file for mapping in mappings):
            mappings = _code_from_files(mappings)
        self._mappings = mappings
        self._starts = [mapping.start for mapping in self._mappings]
        self._memory = _OwnMemory()
        #: The copy the last word came from: the stepper reads one stack at a time.
        self._last = samples[0] if samples else None

    def threads(self) -> list[ThreadState]:
        return [
            ThreadState(sampled.tid, _thread_name(sampled.tid), sampled.registers, "running")
            for sampled in self._samples
        ]

    def mappings(self) -> list[Mapping]:
        return self._mappings

    def entry_point(self) -> int | None:
        return procfs.entry_point("self")

    def read(self, address: int, size: int) -> bytes:
        """From a stack copy where it holds the whole range, else from this process's memory."""
        if size <= 0:
            return b""
        copy = self._copy_holding(address, size)
        if copy is not None:
            offset = address - copy.stack_start
            return copy.stack[offset : offset + size]
        return self._memory.read(address, size)

    def read_word(self, address: int) -> int:
        copy = self._copy_holding(address, 8)
        if copy is not None:
            return int(_unpack_word(copy.stack, address - copy.stack_start)[0])
        return int(_unpack_word(self._memory.read(address, 8))[0])

    def open_mapped_file(self, mapping: Mapping) -> RegularFile | None:
        """The mapped file itself when it is still the one mapped, else the kernel's handle."""
        return procfs.open_mapped_file("self", mapping)

    def _copy_holding(self, address: int, size: int) -> ThreadSample | None:
        last = self._last
        if last is not None and 0 <= address - last.stack_start <= len(last.stack) - size:
            return last
        for copy in self._samples:
            if 0 <= address - copy.stack_start <= len(copy.stack) - size:
                self._last = copy
                return copy
        return None


class _OwnMemory:
    """This process's memory by pages, read without risking a fault; cached for one backtrace."""

    def __init__(self) -> None:
        self._pages: dict[int, bytes | None] = {}

    def read(self, address: int, size: int) -> bytes:
        if address < 0 or address + size > 1 << 64:
            raise MemoryReadError(address, size, "outside the address space")
        first = address - address % _PAGE
        last = address + size - 1
        last -= last % _PAGE
        pages = range(first, last + 1, _PAGE)
        missing = [page for page in pages if page not in self._pages]
        if missing:
            self._pages.update(zip(missing, _read_pages(missing)))
        chunks = []
        for page in pages:
            data = self._pages[page]
            if data is None:
                raise MemoryReadError(max(page, address), size, "not mapped or not readable")
            chunks.append(data)
        joined = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        offset = address - first
        return joined[offset : offset + size]


_use_vm_readv = True
_pipe: tuple[int, int] | None = None
_pipe_lock = threading.Lock()


def _read_pages(pages: list[int]) -> list[bytes | None]:
    """Whole pages of this process: process_vm_readv in one call, else through the pipe."""
    global _use_vm_readv
    if _use_vm_readv:
        try:
            return syscalls.read_remote(os.getpid(), [(page, _PAGE) for page in pages])
        except OSError:
            _use_vm_readv = False  # ENOSYS under QEMU user mode, EPERM under some LSMs
    return [_read_through_pipe(page, _PAGE) for page in pages]


def _read_through_pipe(address: int, size: int) -> bytes | None:
    """``size`` bytes at ``address``, written into a pipe by the kernel and read back.

    ``write`` checks the source range and fails with EFAULT where it is not
    readable, so this never faults; ``size`` stays within the pipe's capacity
    and the pipe is empty before each write, so the write never blocks.
    """
    global _pipe
    with _pipe_lock:
        if _pipe is None:
            reader, writer = os.pipe()
            os.set_blocking(writer, False)
            _pipe = (reader, writer)
        reader, writer = _pipe
        written = _libc_write(writer, address, size)
        got = b""
        while len(got) < max(written, 0):
            got += os.read(reader, written - len(got))
        return got if written == size else None


_libc = ctypes.CDLL(None, use_errno=True)
_libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
_libc.write.restype = ctypes.c_ssize_t


def _libc_write(fd: int, address: int, size: int) -> int:
    result = int(_libc.write(fd, address, size))
    if result < 0 and ctypes.get_errno() not in (errno.EFAULT, errno.EAGAIN):
        raise TargetError(f"cannot read this process's memory: {os.strerror(ctypes.get_errno())}")
    return result


def _code_from_files(mappings: list[Mapping]) -> list[Mapping]:
    """Mappings with the executable parts of loaded files marked so, from their program headers.

    QEMU user mode (7.2) lists every guest mapping of a file without ``x``,
    one mapping per run of pages (an ELF file's read-only, code and
    read-only data segments as one): the process has code it cannot be
    running.  Each such mapping is cut where the file's PT_LOAD segments
    start and end, and the pieces of executable segments get ``x``.
    """
    result: list[Mapping] = []
    images: dict[str, ElfImage | None] = {}
    for mapping in mappings:
        if not mapping.is_file or mapping.writable:
            result.append(mapping)
            continue
        if mapping.path not in images:
            images[mapping.path] = open_image(mapping.path)
        image = images[mapping.path]
        try:
            linked = None if image is None else image.vaddr_for_offset(mapping.offset)
            loads = [] if image is None else image.segments_of_type(PT_LOAD)
        except FormatError:
            linked = None
        if linked is None:
            result.append(mapping)
            continue
        bias = mapping.start - linked
        cuts = {mapping.start, mapping.end}
        executable = []
        for load in loads:
            start, end = bias + load.vaddr, bias + load.vaddr + load.memsz
            cuts.update(edge for edge in (start, end) if mapping.start < edge < mapping.end)
            if load.flags & 1:
                executable.append((start, end))
        edges = sorted(cuts)
        for start, end in itertools.pairwise(edges):
            code = any(low <= start and end <= high for low, high in executable)
            perms = mapping.perms[:2] + ("x" if code else mapping.perms[2]) + mapping.perms[3:]
            offset = mapping.offset + (start - mapping.start)
            result.append(mapping._replace(start=start, end=end, perms=perms, offset=offset))
    return result


def _mapping_at(mappings: list[Mapping], address: int) -> Mapping | None:
    index = bisect.bisect_right([mapping.start for mapping in mappings], address) - 1
    if index >= 0 and address in mappings[index]:
        return mappings[index]
    return None


def _thread_name(tid: int) -> str:
    try:
        name = read_kernel_file(f"/proc/self/task/{tid}/comm", 64)
    except OSError:
        return ""
    return name.decode("utf-8", "replace").rstrip("\n")
